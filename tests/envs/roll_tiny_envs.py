"""Tiny envs for the core env tests: one that honours the contract and two that break it."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from roll_core.envs import EnvConfig, StepOutcome, TextEnv


class CounterConfig(EnvConfig):
    goal: int = Field(5, ge=1)
    max_steps: int = 20


class CounterEnv(TextEnv):
    """Count up to ``goal`` from a seeded start with Inc/Dec."""

    config_model = CounterConfig
    action_lookup = {"Inc": 1, "Dec": -1}

    def default_instruction(self) -> str:
        return f"Reach {self.config.goal}. Answer {self.parser.format('Inc')} or {self.parser.format('Dec')}."

    def _reset(self, seed: int | None, options: dict[str, Any]):
        self.value = self._start()
        return self.observation(), {}

    def _start(self) -> int:
        return int(self.np_random.integers(0, self.config.goal))

    def _step(self, action: int) -> StepOutcome:
        self.value += action
        done = self.value == self.config.goal
        return StepOutcome(reward=float(done), terminated=done, success=done)

    def render_text(self) -> str:
        return f"value={self.value}"

    def render_rgb(self) -> np.ndarray:
        frame = np.zeros((4, 4 * (self.config.goal + 1), 3), dtype=np.uint8)
        frame[:, 4 * self.value: 4 * self.value + 4] = 255
        return frame

    def solve(self) -> list[str]:
        diff = self.config.goal - self.value
        return ["Inc" if diff > 0 else "Dec"] * abs(diff)


class NondeterministicEnv(CounterEnv):
    """Ignores the seed (the global ``random`` module): caught by the seed-determinism check."""

    def _start(self) -> int:
        return random.randrange(self.config.goal)


class HashOrderEnv(CounterEnv):
    """Observation depends on str hash order: same in one process, different across processes."""

    def render_text(self) -> str:
        return "".join(sorted({"alpha", "beta", "gamma", "delta"}, key=hash)) + f" value={self.value}"


class AssigningConfig(CounterConfig):
    """Normalises ``goal`` by assigning in an after-validator: fails, since env configs are frozen."""

    @model_validator(mode="after")
    def _positive(self) -> AssigningConfig:
        self.goal = abs(self.goal)
        return self


class AssigningEnv(CounterEnv):
    config_model = AssigningConfig
