"""Checks a run passes before Ray starts: what would otherwise fail inside a worker, or loop forever.

Validation and ``resolve`` judge the config's values; these checks look at the machine and the
envs the way the workers would: the output directories can be created, ``pretrain`` resolves to a
model whose tokenizer loads, and every env tag of the run builds, resets, fills its prompt
templates and fits its first prompt into ``sequence_length``. A template naming an unknown field,
or a first prompt longer than ``sequence_length``, would otherwise fail every episode of that tag:
dropped and retried until the rollout's failure bound stops the run, minutes later.

Each problem is a :class:`~roll_core.errors.ConfigError` naming the YAML path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from roll_core.errors import ConfigError, RollError

if TYPE_CHECKING:
    from roll_core.run import Run

#: config keys of directories a run writes to
DIRECTORIES = ("output_dir", "logging_dir", "render_save_dir")


def preflight(run: Run, *, modes: Iterable[str] | None = None, model_free: bool = False,
              directories: Iterable[str] = DIRECTORIES) -> Any:
    """All checks of the module docstring; returns the rollout tokenizer it loaded (reuse it).

    ``modes``: the env managers to check (default: train, and val when the run validates);
    ``model_free``: a rollout without the model, whose tokenizer may fall back to roll's tiny one;
    ``directories``: the config keys of the directories the command writes to.
    """
    from roll_core.models.policy_tokenizer import rollout_tokenizer

    config = run.config
    check_directories(config, directories)
    tokenizer = rollout_tokenizer(run.model_path("actor_infer", required=False), seed=config.seed,
                                  model_free=model_free)
    if run.pipeline_type == "agentic":
        if modes is None:
            modes = ("train", "val") if config.eval_steps > 0 else ("train",)
        for mode in modes:
            check_first_prompts(run, mode, tokenizer)
    return tokenizer


def check_directories(config: Any, keys: Iterable[str] = DIRECTORIES) -> None:
    """Create the directories the run writes to; a path that is a file (or not writable) is an error."""
    for key in keys:
        path = getattr(config, key, None)
        if not path:
            continue
        path = os.path.expanduser(str(path))
        try:
            os.makedirs(path, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise ConfigError(f"{key}: {path!r} is a file (or lies under one), not a directory; point {key} at a "
                              "directory (it is created when missing).") from None
        except OSError as exc:
            raise ConfigError(f"{key}: cannot create the directory {path!r}: {exc.strerror or exc}.") from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{key}: the directory {path!r} is not writable by this user.")


def check_first_prompts(run: Run, mode: str, tokenizer: Any) -> dict[str, int]:
    """Build each env tag of ``mode``'s env manager, reset it and render its first prompt.

    Tags played by agent code are skipped: the agent writes its prompts. Returns the first prompt's
    length in tokens per env tag. Raises :class:`ConfigError` when a
    template cannot be filled or the prompt leaves no room for a response in ``sequence_length``.
    """
    from roll_core.chat.codec import ChatCodec
    from roll_core.chat.trajectory import make_prompt_builder
    from roll_core.envs.binding import build_env
    from roll_core.rollout.engine.episode import EpisodeFailure, checked_reset, new_conversation
    from roll_core.rollout.engine.spec import episode_seed
    from roll_core.rollout.engine.spec_from_run import rollout_spec

    spec = rollout_spec(run, mode)  # its policy is not asked for an action here
    codec = ChatCodec(tokenizer)
    limit_key = "val_sequence_length" if mode == "val" else "sequence_length"
    lengths: dict[str, int] = {}
    for tag in dict.fromkeys(spec.group_tags):
        env_spec = spec.envs[tag]
        if env_spec.is_agent:
            continue
        where = f"custom_envs.{tag}" if tag in run.config.custom_envs else f"{spec.manager_key}.tags ({tag!r})"
        try:
            env = build_env(env_spec.env)
        except RollError:
            raise
        except Exception as exc:
            raise ConfigError(f"{where}: the env {env_spec.env.registration.name!r} cannot be built: "
                              f"{type(exc).__name__}: {exc}") from exc
        try:
            group = spec.group_tags.index(tag)
            try:
                observation, info = checked_reset(env.reset(seed=episode_seed(spec, group, 0)))
            except EpisodeFailure as exc:
                raise ConfigError(f"{where}: {exc}") from None
            except Exception as exc:
                raise ConfigError(f"{where}: env.reset raised {type(exc).__name__}: {exc}") from exc
            max_turns = env_spec.max_steps or env.config.max_steps
            try:
                conversation = new_conversation(env, env_spec, info)
                conversation.observe(observation, actions_left=max_turns, last_reward=None)
            except ConfigError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            builder = make_prompt_builder(codec, spec.granularity, env_spec.history_window)
            length = builder.length_with(builder.prompt(conversation.messages))
        finally:
            close = getattr(env, "close", None)
            if close is not None:
                close()
        if length >= spec.sequence_length:
            raise ConfigError(
                f"{where}: the first prompt of a {tag} episode is {length} tokens (system message, instruction and "
                f"first observation in the chat template), but {limit_key} is {spec.sequence_length}, which leaves "
                f"no room for a response; raise {limit_key} or shorten the prompt (agent_system_template / "
                "agent_template, the env's instruction)."
            )
        lengths[tag] = length
    return lengths
