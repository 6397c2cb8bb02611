"""Text environments: the contract (:class:`TextEnv`), its config, the action parser, and
:func:`make_env` (build an env by registered name or tag)."""

from roll_core.envs.base import EnvConfig, StepOutcome, TextEnv
from roll_core.envs.factory import env_config_for, make_env, resolve_env
from roll_core.envs.parser import ActionParser, ParsedAction
from roll_core.envs.prompt import Conversation, format_turn_prompt

__all__ = [
    "ActionParser",
    "Conversation",
    "EnvConfig",
    "ParsedAction",
    "StepOutcome",
    "TextEnv",
    "env_config_for",
    "format_turn_prompt",
    "make_env",
    "resolve_env",
]
