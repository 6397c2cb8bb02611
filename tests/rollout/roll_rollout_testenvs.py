"""Small envs for the rollout tests, registered as a plugin module (``PluginManager(extra_modules=...)`` / ROLL_PLUGINS).

* ``test_counting`` (tag ``Counting``): walk from 0 to a seeded target with ``Up`` / ``Down``;
  the observation names the seeded instance, so tests can see that a group shares its seed.
* ``test_flaky`` (tag ``Flaky``): Counting whose ``step`` raises with probability ``fail_prob``
  (drawn from an unseeded generator, so a replay of the same seed can succeed).
* ``test_slow`` (tag ``Slow``): Counting whose ``step`` sometimes sleeps past the step timeout.
"""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
from pydantic import Field

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_core.hookspecs import hookimpl


class CountingConfig(EnvConfig):
    max_steps: int = 6
    max_target: int = Field(4, ge=1)


class CountingEnv(TextEnv):
    """Reach the target number; reward 1 on arrival."""

    config_model = CountingConfig
    action_lookup = {"Up": 1, "Down": -1}

    def default_instruction(self) -> str:
        return f"Count to the target. Answer with {self.parser.format('Up')} or {self.parser.format('Down')}."

    def _reset(self, seed, options):
        self.instance = int(self.np_random.integers(1_000_000))
        self.target = int(self.np_random.integers(1, self.config.max_target + 1))
        self.position = 0
        return self.observation(), {"instance": self.instance}

    def _step(self, action: int) -> StepOutcome:
        before = self.position
        self.position += action
        done = self.position == self.target
        return StepOutcome(reward=1.0 if done else 0.0, terminated=done, effective=before != self.position,
                           success=done)

    def render_text(self) -> str:
        return f"instance {self.instance}: at {self.position}, target {self.target}"

    def render_rgb(self) -> np.ndarray:
        frame = np.zeros((8, 8 * (self.config.max_target + 2), 3), dtype=np.uint8)
        frame[:, 8 * max(self.position, 0): 8 * max(self.position, 0) + 8] = (255, 0, 0)
        return frame

    def solve(self) -> list[str]:
        diff = self.target - self.position
        return ["Up" if diff > 0 else "Down"] * abs(diff)


class FlakyConfig(CountingConfig):
    fail_prob: float = 0.1
    reset_fail_prob: float = 0.0


class FlakyEnv(CountingEnv):
    """Raises in ``step`` (and optionally ``reset``) at random, independently of the seed."""

    config_model = FlakyConfig

    def __init__(self, config: Any = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.chaos = random.Random()  # unseeded on purpose: a replay of the same seed may succeed

    def _reset(self, seed, options):
        if self.chaos.random() < self.config.reset_fail_prob:
            raise RuntimeError("flaky reset")
        return super()._reset(seed, options)

    def _step(self, action: int) -> StepOutcome:
        if self.chaos.random() < self.config.fail_prob:
            raise RuntimeError("flaky step")
        return super()._step(action)


class SlowConfig(CountingConfig):
    sleep_prob: float = 0.2
    sleep_s: float = 5.0


class SlowEnv(CountingEnv):
    """Sleeps ``sleep_s`` in ``step`` with probability ``sleep_prob`` (a hung env)."""

    config_model = SlowConfig

    def __init__(self, config: Any = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.chaos = random.Random()

    def _step(self, action: int) -> StepOutcome:
        if self.chaos.random() < self.config.sleep_prob:
            time.sleep(self.config.sleep_s)
        return super()._step(action)


class BrokenEnv(CountingEnv):
    """Fails on every reset: a group of it can never finish an episode."""

    def _reset(self, seed, options):
        raise RuntimeError("broken env")


@hookimpl
def roll_register_envs(register):
    register("test_counting", "roll_rollout_testenvs:CountingEnv", tags=["Counting"])
    register("test_flaky", "roll_rollout_testenvs:FlakyEnv", tags=["Flaky"])
    register("test_slow", "roll_rollout_testenvs:SlowEnv", tags=["Slow"])
    register("test_broken", "roll_rollout_testenvs:BrokenEnv", tags=["Broken"])
