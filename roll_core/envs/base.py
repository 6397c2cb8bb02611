"""The text-environment contract every roll env implements.

An env is a :class:`gymnasium.Env` whose observations and actions are text:

* ``reset(seed=...) -> (observation, info)``; ``info["instruction"]`` holds the task instruction
  (the system prompt: rules, the action format). The same seed gives the same instance, in any
  process, on any thread.
* ``step(response_text) -> (observation, reward, terminated, truncated, info)``. The base class
  parses the response (:class:`ActionParser`); an invalid action costs ``format_penalty`` and does
  not change the state. ``info["metrics"]`` holds ``success``, ``action_is_valid`` and
  ``action_is_effective`` for this step. Reaching ``max_steps`` truncates.
* ``render(mode)`` with ``"text"`` (a string) and ``"rgb_array"`` (an ``H x W x 3`` uint8 array).

Subclasses implement :meth:`TextEnv._reset`, :meth:`TextEnv._step`, :meth:`TextEnv.render_text`,
and usually :meth:`TextEnv.render_rgb`; they declare a pydantic ``config_model`` for their
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
    """Settings every env accepts in ``env_config``; env types extend it with their own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(100, ge=1, description="Steps before the episode is truncated.")
    format_penalty: float = Field(
        -0.1, description="Reward for a response that holds no valid action (state unchanged)."
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
    """Base class of roll's text environments (see the module docstring for the contract)."""

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

    # -- the public contract -------------------------------------------------------------
    @property
    def instruction(self) -> str:
        """The task instruction (system prompt): rules and the expected action format."""
        return self.config.env_instruction or self.default_instruction()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.num_steps = 0
        self.episode_reward = 0.0
        self.success = False
        self.done = False
        observation, info = self._reset(seed, options or {})
        info = {"instruction": self.instruction, **info}
        return observation, info

    def step(self, action: str):
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
        self.episode_reward += float(outcome.reward)
        info = {
            **outcome.info,
            "parsed_action": parsed.content,
            "metrics": {
                "success": float(self.success),
                "action_is_valid": float(valid),
                "action_is_effective": float(valid and outcome.effective),
            },
        }
        return self.observation(), float(outcome.reward), terminated, truncated, info

    def render(self, mode: str | None = None):
        mode = mode or self.render_mode
        if mode == "text":
            return self.render_text()
        if mode == "rgb_array":
            return self.render_rgb()
        raise ValueError(f"render mode {mode!r} is not supported; use one of {RENDER_MODES}")

    def parse(self, response: str) -> ParsedAction:
        return self.parser.parse(response)

    def valid_actions(self) -> list[str]:
        """Action words valid in the current state (for random and scripted policies)."""
        if self.action_lookup is None:
            raise NotImplementedError(f"{type(self).__name__} must implement valid_actions()")
        return list(dict.fromkeys(self.action_lookup))

    def example_action(self) -> str:
        """The action shown to the model as the answer format; free-form envs override it."""
        actions = self.valid_actions()
        return actions[0] if actions else "..."

    def sample_action(self, rng: np.random.Generator | None = None) -> str:
        """A random valid action, already formatted as a model response."""
        rng = rng or self.np_random
        actions = self.valid_actions()
        return self.parser.format(actions[int(rng.integers(len(actions)))])

    def observation(self) -> str:
        """The observation text of the current state (what follows an action)."""
        return self.render_text()

    # -- for subclasses --------------------------------------------------------------------
    @abc.abstractmethod
    def default_instruction(self) -> str:
        """The env's instruction text (used unless ``env_instruction`` overrides it)."""

    @abc.abstractmethod
    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Build the instance for ``seed`` (use ``self.np_random``); return (observation, info)."""

    @abc.abstractmethod
    def _step(self, action: Any) -> StepOutcome | None:
        """Apply a parsed action; return ``None`` to reject a free-form action as invalid."""

    @abc.abstractmethod
    def render_text(self) -> str:
        """The current state as text."""

    def render_rgb(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no rgb_array rendering")
