"""A test env whose steps take long-tailed time, as tool and web calls do (benchmark only, not shipped).

``straggler`` plays a fixed number of turns; each ``step`` sleeps for a latency drawn from a Pareto
distribution (scale ``latency_scale_s``, shape ``tail_alpha``; alpha 1.5 has a finite mean and an
infinite variance), capped at ``latency_cap_s``. The draw is a pure function of the episode seed, the
turn and the actions taken so far, so any rollout that plays the same (seed, actions) sleeps the same
times: the async and the lockstep rollouts of bench_stragglers.py wait on identical latencies.

It is registered programmatically: the benchmark loads this module as an extra plugin to bind the
env (``PluginManager(extra_modules=["straggler_env"])``), and puts benchmarks/ on PYTHONPATH so the
Ray workers import it.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import numpy as np
from pydantic import Field

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_core.hookspecs import hookimpl

ACTIONS = ("A", "B", "C", "D", "E", "F", "G", "H")


class StragglerConfig(EnvConfig):
    turns: int = Field(4, ge=1, description="Turns of every episode (it terminates after the last).")
    latency_scale_s: float = Field(0.02, gt=0, description="Pareto scale: the shortest step latency.")
    tail_alpha: float = Field(1.5, gt=1.0, description="Pareto shape; smaller is heavier-tailed.")
    latency_cap_s: float = Field(2.0, gt=0, description="No step sleeps longer than this.")


def step_latency(config: StragglerConfig, seed: int, turn: int, history: str) -> float:
    """Latency of one step: Pareto(scale, alpha) drawn from (seed, turn, actions so far), capped."""
    key = hashlib.blake2b(f"{seed}/{turn}/{history}".encode(), digest_size=8).digest()
    u = np.random.default_rng(int.from_bytes(key, "little")).random()
    return float(min(config.latency_scale_s * (1.0 - u) ** (-1.0 / config.tail_alpha), config.latency_cap_s))


class StragglerEnv(TextEnv):
    """Answer with any letter A-H each turn; every step sleeps a long-tailed latency, then continues."""

    config_model = StragglerConfig
    action_lookup = {a: a for a in ACTIONS}

    def __init__(self, config: StragglerConfig | dict[str, Any] | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.seed = 0
        self.history = ""
        self.slept_s = 0.0  # total sleep of the current episode (the lockstep baseline reads it)

    def default_instruction(self) -> str:
        return f"Call the tool {self.config.turns} times. Answer with a letter A-H, as {self.parser.format('A')}."

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.seed = int(seed or 0)
        self.history = ""
        self.slept_s = 0.0
        return self.observation(), {}

    def _step(self, action: str) -> StepOutcome:
        latency = step_latency(self.config, self.seed, self.num_steps, self.history)
        time.sleep(latency)
        self.slept_s += latency
        self.history += action
        done = self.num_steps >= self.config.turns
        return StepOutcome(reward=1.0 if done else 0.0, terminated=done, success=done)

    def render_text(self) -> str:
        return f"turn {self.num_steps + 1} of {self.config.turns}; calls so far: {self.history or 'none'}"


@hookimpl
def roll_register_envs(register):
    register("straggler", f"{__name__}:StragglerEnv", tags=["Straggler"],
             description="Benchmark env: fixed turns, each step sleeps a seeded heavy-tailed latency")
