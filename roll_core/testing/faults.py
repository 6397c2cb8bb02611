"""A fault-injection env: raises, hangs, or returns garbage in a configurable share of its calls.

It tests what a rollout does when an env misbehaves: roll's own CI runs ``roll run`` with it hanging
in 20% of steps, and env authors can put it next to their env in a config to see what their run
would do. The game underneath is a short counting walk (``Up`` / ``Down`` to a seeded target, with a
solver), so it trains like any other env when no fault fires.

Load it as a plugin module without installing anything::

    ROLL_PLUGINS=roll_core.testing.faults roll run my.yaml \\
        +custom_envs.Faulty.env_type=fault_injection +custom_envs.Faulty.env_config.hang_prob=0.2 ...

or use :class:`FaultyEnv` directly. Every call draws one number from the env's fault generator
(unseeded by default, so a retried episode can succeed; set ``fault_seed`` for a fixed sequence):
below ``raise_prob`` the call raises, then ``hang_prob`` it sleeps ``hang_s`` (an hour by default:
a hang), then ``garbage_prob`` it returns a malformed result (a wrong tuple, a non-finite reward,
a non-text observation or a non-dict info). ``fault_in`` picks the calls: ``step``, ``reset`` or both.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from roll_core.envs.base import EnvConfig, StepOutcome, TextEnv
from roll_core.hookspecs import hookimpl

#: the malformed results a garbage call returns, in turn
GARBAGE_KINDS = ("short_tuple", "nan_reward", "bytes_observation", "info_not_a_dict")


class InjectedFault(RuntimeError):
    """What a faulty call raises (so tests can tell injected faults from real bugs)."""


class FaultConfig(EnvConfig):
    """Fault shares per call, and the counting game underneath."""

    max_steps: int = Field(6, ge=1)
    max_target: int = Field(3, ge=1, description="Targets are drawn from 1..max_target.")
    raise_prob: float = Field(0.0, ge=0.0, le=1.0, description="Share of calls that raise InjectedFault.")
    hang_prob: float = Field(0.0, ge=0.0, le=1.0, description="Share of calls that sleep hang_s (a hang).")
    garbage_prob: float = Field(0.0, ge=0.0, le=1.0, description="Share of calls that return a malformed result.")
    hang_s: float = Field(3600.0, ge=0.0, description="How long a hanging call sleeps.")
    fault_in: Literal["step", "reset", "both"] = Field("step", description="Which calls may fault.")
    fault_seed: int | None = Field(None, description="Seed of the fault draws; null: unseeded (retries differ).")

    @model_validator(mode="after")
    def _shares_add_up(self):
        total = self.raise_prob + self.hang_prob + self.garbage_prob
        if total > 1.0:
            raise ValueError(f"raise_prob + hang_prob + garbage_prob is {total:g}; the shares must add up to <= 1")
        return self


class FaultyEnv(TextEnv):
    """Count from 0 to a seeded target; reward 1 on arrival. Faults as configured (module docstring)."""

    config_model = FaultConfig
    action_lookup = {"Up": 1, "Down": -1}

    def __init__(self, config: Any = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.faults = random.Random(self.config.fault_seed)
        self.garbage_count = 0
        self.position = self.target = 0

    # -- faults --------------------------------------------------------------------------------
    def _fault(self, call: str) -> str | None:
        """``raise`` / ``hang`` / ``garbage`` / None for this call (one draw per call)."""
        c = self.config
        if c.fault_in not in (call, "both"):
            return None
        draw = self.faults.random()
        for kind, share in (("raise", c.raise_prob), ("hang", c.hang_prob), ("garbage", c.garbage_prob)):
            if draw < share:
                return kind
            draw -= share
        return None

    def _misbehave(self, call: str) -> bool:
        """Raise or hang now; True when this call must return garbage."""
        kind = self._fault(call)
        if kind == "raise":
            raise InjectedFault(f"injected fault in {call}")
        if kind == "hang":
            time.sleep(self.config.hang_s)
        return kind == "garbage"

    def _garbage(self, good: tuple) -> Any:
        kind = GARBAGE_KINDS[self.garbage_count % len(GARBAGE_KINDS)]
        self.garbage_count += 1
        if kind == "short_tuple":
            return good[:-1]
        if kind == "nan_reward" and len(good) == 5:
            return (good[0], math.nan, *good[2:])
        if kind == "bytes_observation":
            return (str(good[0]).encode(), *good[1:])
        return (*good[:-1], ["not", "a", "dict"])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        garbage = self._misbehave("reset")
        result = super().reset(seed=seed, options=options)
        return self._garbage(result) if garbage else result

    def step(self, action: str):
        garbage = self._misbehave("step")
        result = super().step(action)
        return self._garbage(result) if garbage else result

    # -- the counting game ---------------------------------------------------------------------
    def default_instruction(self) -> str:
        return (f"Walk from 0 to the target number. Answer with {self.parser.format('Up')} or "
                f"{self.parser.format('Down')}.")

    def _reset(self, seed, options):
        self.target = int(self.np_random.integers(1, self.config.max_target + 1))
        self.position = 0
        return self.observation(), {}

    def _step(self, action: int) -> StepOutcome:
        before = self.position
        self.position += action
        done = self.position == self.target
        return StepOutcome(reward=1.0 if done else 0.0, terminated=done, effective=before != self.position,
                           success=done)

    def render_text(self) -> str:
        return f"You are at {self.position}; the target is {self.target}."

    def render_rgb(self) -> np.ndarray:
        frame = np.zeros((8, 8 * (self.config.max_target + 2), 3), dtype=np.uint8)
        x = 8 * max(self.position, 0)
        frame[:, x: x + 8] = (255, 0, 0)
        return frame

    def solve(self) -> list[str]:
        diff = self.target - self.position
        return ["Up" if diff > 0 else "Down"] * abs(diff)


@hookimpl
def roll_register_envs(register):
    register("fault_injection", "roll_core.testing.faults:FaultyEnv", tags=["Faulty"],
             description="Counting walk that raises, hangs or returns garbage in a share of its calls (testing)")
