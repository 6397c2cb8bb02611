"""Text environments: the contract (:class:`TextEnv`), its config and the action parser."""

from roll_core.envs.base import EnvConfig, StepOutcome, TextEnv
from roll_core.envs.parser import ActionParser, ParsedAction

__all__ = ["ActionParser", "EnvConfig", "ParsedAction", "StepOutcome", "TextEnv"]
