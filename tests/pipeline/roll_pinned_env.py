"""A test env plugin whose requirement clashes with the trainer's: it needs an idna release other
than the one installed with roll, declared as ``requirements=`` of its registration, and refuses
to run with any other (so it can only work in its own Python environment)."""

from __future__ import annotations

from typing import Any

from roll_core import hookimpl
from roll_core.envs import EnvConfig, StepOutcome, TextEnv

#: an idna release older than the trainer's (the test checks that they differ); a constant, since
#: every process that imports this module (the driver, the env managers) must agree on it
PIN = "3.6"


class PinnedConfig(EnvConfig):
    max_steps: int = 4


class PinnedEnv(TextEnv):
    """Count to 2 with Up/Down; works only where ``idna == PIN`` is the importable idna."""

    config_model = PinnedConfig
    action_lookup = {"Up": 1, "Down": -1}

    def __init__(self, config: Any = None, **overrides: Any):
        super().__init__(config, **overrides)
        import idna  # the pinned library, imported where the env runs (not at module level)

        if idna.__version__ != PIN:
            raise RuntimeError(f"PinnedEnv needs idna {PIN}, but this process imports idna {idna.__version__}")
        self.value = 0

    def default_instruction(self) -> str:
        return f"Reach 2. Answer {self.parser.format('Up')} or {self.parser.format('Down')}."

    def _reset(self, seed, options):
        self.value = int(self.np_random.integers(0, 2))
        return self.render_text(), {}

    def _step(self, action: int) -> StepOutcome:
        self.value += action
        done = self.value == 2
        return StepOutcome(reward=float(done), terminated=done, success=done)

    def render_text(self) -> str:
        return f"value {self.value}"


@hookimpl
def roll_register_envs(register):
    register("pinned_idna", "roll_pinned_env:PinnedEnv", tags=["Pinned"], requirements=[f"idna=={PIN}"],
             description="an env pinning idna against the trainer's")
