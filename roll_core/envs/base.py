"""The text-environment contract every roll env implements.

An env is a :class:`gymnasium.Env` whose observations and actions are text. roll calls only the
public methods below; a subclass implements the underscored ones and a few renderers:

==========================  ==========================================================  ==================
you implement               roll calls it                                               returns
==========================  ==========================================================  ==================
``default_instruction()``   at every ``reset`` (unless ``env_instruction`` is set)      the system prompt
``_reset(seed, options)``   from ``reset(seed=...)``, after ``self.np_random`` is        ``(observation, info)``
                            seeded
``_step(action)``           from ``step(text)`` with a *parsed, valid* action           ``StepOutcome`` or ``None``
``render_text()``           after every step (it is the next observation by default)   ``str``
``render_rgb()``            optional: validation GIFs, ``roll env play --save-gif``     ``H x W x 3`` uint8
``valid_actions()``         random play, ``check_env``, ``roll env play``               action words
``example_action()``        once per episode, for the answer format in the prompt       one action word
``solve()``                 optional: the scripted policy, ``warmup_sft``               action words
``optimal_actions()``       optional: the scripted policy draws among them              action words
==========================  ==========================================================  ==================

``docs/authoring.md`` is the full guide, with what :func:`roll_core.testing.check_env` verifies.
Subclasses declare a pydantic ``config_model`` (a subclass of :class:`EnvConfig`) for their
``env_config`` and an ``action_lookup`` (or ``None`` for free-form actions).
"""

from __future__ import annotations

import abc
import functools
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from roll_core.envs.parser import DEFAULT_ACTION_PATTERN, ActionParser, ParsedAction

RENDER_MODES = ("text", "rgb_array")


@functools.lru_cache(maxsize=1)
def _text_space() -> gym.spaces.Text:
    """The observation and action space of every text env: any text up to 64 Ki characters."""
    return gym.spaces.Text(max_length=1 << 16)


class EnvConfig(BaseModel):
    """Settings every env accepts in ``env_config``; env types extend it with their own fields.

    Env configs are **frozen** (an env, its env managers and the saved run share one validated
    object), so a validator cannot assign to a field: ``self.size = ...`` in a
    ``model_validator(mode="after")`` fails with "Instance is frozen". Normalise a value in a
    ``field_validator`` (return the new value) or a ``model_validator(mode="before")`` (edit the
    input mapping); keep ``mode="after"`` validators for checks that raise ``ValueError``.
    Unknown keys are errors (``extra="forbid"``), so a typo in YAML names the field.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(100, ge=1, description="Steps before the episode is truncated.")
    format_penalty: float = Field(
        -0.1, description="Reward for a response that holds no valid action (state unchanged)."
    )
    ineffective_penalty: float = Field(
        0.0, description="Added to the reward of a valid action that changes nothing (a walk into a wall): "
        "a signal where every episode of a group fails alike. 0 keeps the env's own reward.",
    )
    action_pattern: str = Field(
        DEFAULT_ACTION_PATTERN, description="Regex with one group that captures the action."
    )
    require_action_pattern: bool = Field(
        True, description="If false, a bare action word without the pattern is accepted too."
    )
    env_instruction: str | None = Field(
        None, description="Replaces the env's own instruction text when set."
    )


class StepOutcome(BaseModel):
    """What a subclass's :meth:`TextEnv._step` reports for one valid action."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    reward: float
    terminated: bool = False
    effective: bool = True  # did the action change the state?
    success: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class TextEnv(gym.Env, abc.ABC):
    """Base class of roll's text environments (the module docstring has the contract at a glance).

    Subclasses implement :meth:`default_instruction`, :meth:`_reset`, :meth:`_step` and
    :meth:`render_text`, usually :meth:`render_rgb` and :meth:`solve`, and :meth:`valid_actions`
    when ``action_lookup`` is ``None``. They never override :meth:`reset` or :meth:`step`: those
    seed the env, parse the model's response, apply the invalid-action penalty, count steps and
    truncate at ``max_steps`` the same way for every env.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES)}
    config_model: ClassVar[type[EnvConfig]] = EnvConfig
    #: action word -> env action; ``None`` means free-form text actions validated by ``_step``.
    action_lookup: ClassVar[dict[str, Any] | None] = None
    #: ``reset`` and ``step`` only compute (no I/O, no waiting, bounded work): the env manager calls
    #: them on its event loop instead of handing each call to a worker thread, which costs more CPU
    #: than a cheap step itself. No ``env_step_timeout_s`` applies to such calls (a hang stops the
    #: rollout through ``stall_timeout_s``), so leave it False for envs that call out (web, tools).
    inline_calls: ClassVar[bool] = False

    def __init__(self, config: EnvConfig | dict[str, Any] | None = None, **overrides: Any):
        """Validate ``config`` (a mapping, or an instance of :attr:`config_model`) into ``self.config``.

        ``overrides`` win over ``config``. Subclasses call ``super().__init__(config, **overrides)``
        first and may then set up state that lives across episodes (tiles, data); the instance
        itself is built in :meth:`_reset`.
        """
        if config is None or isinstance(config, dict):
            config = self.config_model.model_validate({**(config or {}), **overrides})
        elif overrides:
            config = config.model_copy(update=overrides)
        self.config = config
        self.parser = ActionParser(
            self.action_lookup,
            pattern=config.action_pattern,
            require_pattern=config.require_action_pattern,
        )
        # one shared space object: a Text space holds its charset (~12 KiB), and an env manager hosts
        # hundreds of envs
        self.observation_space = self.action_space = _text_space()
        self.render_mode = "text"
        self.num_steps = 0
        self.episode_reward = 0.0
        self.success = False
        self.done = True

    # -- the public contract: roll calls these; subclasses do not override them -------------------
    @property
    def instruction(self) -> str:
        """The task instruction (system prompt): rules and the expected action format."""
        return self.config.env_instruction or self.default_instruction()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode: seed ``self.np_random`` with ``seed``, then build it with :meth:`_reset`.

        Returns ``(observation, info)`` with ``info["instruction"]`` (the system prompt) added. The
        same seed must give the same episode in any process (``check_env`` replays seeds in a
        fresh interpreter), so draw every random choice from ``self.np_random``. ``seed=None``
        keeps the generator going. Do not override this method; implement :meth:`_reset`.
        """
        super().reset(seed=seed)
        self.num_steps = 0
        self.episode_reward = 0.0
        self.success = False
        self.done = False
        observation, info = self._reset(seed, options or {})
        info = {"instruction": self.instruction, **info}
        return observation, info

    def step(self, action: str):
        """Apply one model response (the whole text, reasoning included); one turn of the episode.

        The response is parsed (:meth:`parse`); a response with no valid action, or one that
        :meth:`_step` rejects by returning ``None``, costs ``format_penalty`` and leaves the state
        unchanged; a valid action that changes nothing (``effective=False``) adds ``ineffective_penalty``
        to the env's reward. Reaching ``max_steps`` truncates. Returns ``(observation, reward, terminated,
        truncated, info)`` where ``info["metrics"]`` holds ``success``, ``action_is_valid`` and
        ``action_is_effective`` (0.0 or 1.0) and ``info["parsed_action"]`` what stood in the
        pattern. Raises ``RuntimeError`` after the episode ended. Do not override; implement
        :meth:`_step`.
        """
        if self.done:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        parsed = self.parser.parse(action)
        self.num_steps += 1
        if parsed.is_valid:
            outcome = self._step(parsed.action)
            if outcome is None:  # free-form env rejected the action
                outcome, valid = StepOutcome(reward=self.config.format_penalty, effective=False), False
            else:
                valid = True
        else:
            outcome, valid = StepOutcome(reward=self.config.format_penalty, effective=False), False
        self.success = self.success or outcome.success
        terminated = bool(outcome.terminated)
        truncated = not terminated and self.num_steps >= self.config.max_steps
        self.done = terminated or truncated
        reward = float(outcome.reward) + (self.config.ineffective_penalty if valid and not outcome.effective else 0.0)
        self.episode_reward += reward
        info = {
            **outcome.info,
            "parsed_action": parsed.content,
            "metrics": {
                "success": float(self.success),
                "action_is_valid": float(valid),
                "action_is_effective": float(valid and outcome.effective),
            },
        }
        return self.observation(), reward, terminated, truncated, info

    def render(self, mode: str | None = None):
        """``"text"``: :meth:`render_text`; ``"rgb_array"``: :meth:`render_rgb`; else ``ValueError``."""
        mode = mode or self.render_mode
        if mode == "text":
            return self.render_text()
        if mode == "rgb_array":
            return self.render_rgb()
        raise ValueError(f"render mode {mode!r} is not supported; use one of {RENDER_MODES}")

    def close(self) -> None:
        """Release what the env holds (files, connections, subprocesses); roll calls it when an env
        manager discards an env. Nothing to do by default."""

    def parse(self, response: str) -> ParsedAction:
        """What :meth:`step` makes of ``response``: the first match of the action pattern, mapped
        through ``action_lookup`` (any case) or kept as free text. Never raises; an unusable
        response gives ``ParsedAction.is_valid == False``."""
        return self.parser.parse(response)

    def sample_action(self, rng: np.random.Generator | None = None) -> str:
        """A uniformly random entry of :meth:`valid_actions`, formatted as a model response
        (``<answer>Left</answer>``); what the ``random`` policy plays."""
        rng = rng or self.np_random
        actions = self.valid_actions()
        return self.parser.format(actions[int(rng.integers(len(actions)))])

    def observation(self) -> str:
        """The observation text after a step; :meth:`render_text` unless overridden."""
        return self.render_text()

    # -- for subclasses ------------------------------------------------------------------------
    def valid_actions(self) -> list[str]:
        """Action words that :meth:`step` accepts as *valid* in the current state (``<answer>w</answer>``
        for each ``w`` parses and is not rejected by :meth:`_step`).

        The ``random`` policy plays a uniform choice among them, ``check_env`` round-trips them
        through the parser, ``roll env play`` lists them. It need not be every accepted action: a
        free-form env returns the ones worth playing now (WebShop: the clickable elements), but it
        must never be empty while the episode runs. Default: the keys of ``action_lookup``.
        """
        if self.action_lookup is None:
            raise NotImplementedError(f"{type(self).__name__} has free-form actions (action_lookup is None), "
                                      "so it must implement valid_actions()")
        return list(dict.fromkeys(self.action_lookup))

    def example_action(self) -> str:
        """The **bare** action word shown to the model as the answer format (``Left``, not
        ``<answer>Left</answer>``): roll formats it with the env's action pattern itself, so a
        formatted value would appear with doubled tags in every prompt (``check_env`` fails it).

        Default: the first of :meth:`valid_actions`. Free-form envs may return a placeholder that
        shows the shape (``search[keywords] or click[element]``).
        """
        actions = self.valid_actions()
        return actions[0] if actions else "..."

    def solve(self) -> list[str] | None:
        """Optional: the action words that solve the episode from the current state, in order.

        The ``scripted`` policy plays the first word every turn (re-planning each turn, so slips
        do not matter); ``warmup_sft: {policy: scripted}`` clones it and ``roll env play
        --policy scripted`` shows it. Return ``[]`` or ``None`` when no solution is known from
        here; the scripted policy then plays a random valid action. Envs without a solver leave it
        unimplemented (``NotImplementedError``).
        """
        raise NotImplementedError(f"{type(self).__name__} has no solver (solve() is not implemented)")

    def optimal_actions(self) -> list[str]:
        """Optional: every action word that begins an optimal solution from the current state.

        A solver picks one plan among equals, and its tie-break is a preference a cloned policy
        may learn as if it were part of the task (FrozenLake's search order put Left before Right).
        When an env implements this, the ``scripted`` policy plays a uniformly drawn one of these
        (seeded per episode), so demonstrations show every optimal move. Return ``[]`` when none is
        known from here: the policy then follows :meth:`solve`.
        """
        raise NotImplementedError(f"{type(self).__name__} does not list its optimal actions")

    @abc.abstractmethod
    def default_instruction(self) -> str:
        """The system prompt: the task, the rules, the reward and the answer format. Used unless the
        config's ``env_instruction`` replaces it; it may depend on the config, not on the episode."""

    @abc.abstractmethod
    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Build a new episode from ``self.np_random`` (already seeded by :meth:`reset`); return the
        first observation text and an info dict (``instruction`` is added for you)."""

    @abc.abstractmethod
    def _step(self, action: Any) -> StepOutcome | None:
        """Apply one parsed action (``action_lookup[word]``, or the stripped text of a free-form
        env) and report its :class:`StepOutcome`; return ``None`` to reject a free-form action as
        invalid (the base class then applies ``format_penalty`` and keeps the state)."""

    @abc.abstractmethod
    def render_text(self) -> str:
        """The current state as the model reads it (each turn's observation, by default)."""

    def render_rgb(self) -> np.ndarray:
        """Optional: the current state as an ``H x W x 3`` uint8 image (validation GIFs under
        ``render_save_dir``, ``roll env play --save-gif``); :mod:`roll_core.envs.render` has grid helpers.
        ``check_env(..., rgb=False)`` skips it."""
        raise NotImplementedError(f"{type(self).__name__} has no rgb_array rendering")


def has_solver(env: Any) -> bool:
    """Whether ``env`` implements :meth:`TextEnv.solve` (the scripted policy needs it)."""
    return _overrides(env, "solve")


def has_optimal_actions(env: Any) -> bool:
    """Whether ``env`` implements :meth:`TextEnv.optimal_actions` (the scripted policy's tie-break)."""
    return _overrides(env, "optimal_actions")


def _overrides(env: Any, method: str) -> bool:
    found = getattr(type(env), method, None)
    return found is not None and found is not getattr(TextEnv, method)
