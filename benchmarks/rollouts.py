"""FrozenLake rollouts shared by bench_rollout.py and bench_scaling.py: the engine and the raw loops.

Three ways to play the same number of random-policy FrozenLake steps:

* :class:`EngineRollout`: roll's whole rollout engine (group queue, env-manager actors on Ray, env
  loops, prompts, token assembly, batches), the random policy standing in for the model;
* :func:`text_env_loop`: roll's FrozenLake text env alone, in one process, no engine (a new seeded
  map per reset, text rendering, answer parsing);
* :func:`raw_gym_loop`: gymnasium's own ``FrozenLake-v1`` with integer actions, in one process.

The env settings are the benchmark's own (not the demo config's, which is being retuned): 4x4 maps,
frozen probability 0.8, not slippery, ``max_steps`` turns at most.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import measure

TAG = "FrozenLake4x4"


@dataclass(frozen=True)
class LakeSetup:
    groups: int = 128
    group_size: int = 8
    envs_per_worker: int = 128
    max_steps: int = 10
    seed: int = 7
    inline: bool = False  # env calls on the event loop (no step timeout) instead of in worker threads

    @property
    def envs(self) -> int:
        return self.groups * self.group_size

    def env_config(self) -> dict[str, Any]:
        return {"size": 4, "p": 0.8, "is_slippery": False, "max_steps": self.max_steps}


def rollout_spec(setup: LakeSetup):
    from roll_core.config import bind_env
    from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec
    from roll_core.strategies.base import SamplingParams

    env = EnvSpec(tag=TAG, env=bind_env("frozen_lake", setup.env_config()), max_steps=setup.max_steps)
    return RolloutSpec(
        mode="train", seed=setup.seed, num_env_groups=setup.groups, group_size=setup.group_size,
        max_env_num_per_worker=setup.envs_per_worker, group_tags=(TAG,) * setup.groups, envs={TAG: env},
        sequence_length=4096, sampling=SamplingParams(max_new_tokens=16), policy="random",
        **({"step_timeout_s": None} if setup.inline else {}),
    )


class EngineRollout:
    """roll's rollout engine over ``setup``; :meth:`window` serves ``batches`` batches of every env."""

    def __init__(self, setup: LakeSetup):
        from roll_core.models.policy_tokenizer import tiny_tokenizer
        from roll_core.rollout import RolloutScheduler

        self.setup = setup
        started = time.perf_counter()
        self.scheduler = RolloutScheduler(rollout_spec(setup), tiny_tokenizer(), batch_size=setup.envs)
        self.start_s = time.perf_counter() - started
        self.pids = [info["pid"] for info in self.scheduler.worker_info]

    def window(self, batches: int = 1) -> dict[str, float]:
        steps, started, cpu = 0, time.perf_counter(), self.cpu_seconds()
        for _ in range(batches):
            steps += int(self.scheduler.get_batch(self.setup.envs).metrics["rollout/env_steps"])
        elapsed = time.perf_counter() - started
        return {"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
                "traj_per_s": batches * self.setup.envs / elapsed,
                "cpu_us_per_step": (self.cpu_seconds() - cpu) / steps * 1e6}

    def cpu_seconds(self) -> float:
        """CPU time of the env-manager processes together."""
        return sum(measure.cpu_seconds(pid) for pid in self.pids)

    def rss_bytes(self) -> int:
        """Resident memory of the env-manager processes together."""
        return sum(measure.rss_bytes(pid) for pid in self.pids)

    def pss_bytes(self) -> int:
        """Proportional memory of the env-manager processes together (shared pages split among sharers)."""
        return sum(measure.pss_bytes(pid) for pid in self.pids)

    def close(self) -> None:
        self.scheduler.shutdown()


def raw_gym_loop(steps: int, max_steps: int, seed: int = 0) -> dict[str, float]:
    """``steps`` random steps of gymnasium's FrozenLake-v1 4x4 (fixed map), reset at episode ends."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("FrozenLake-v1", is_slippery=False, max_episode_steps=max_steps)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    started = time.perf_counter()
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(4)))
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - started
    return {"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed}


def text_env_loop(steps: int, setup: LakeSetup) -> dict[str, float]:
    """``steps`` random steps of roll's FrozenLake text env in this process: seeded new map per reset,
    a formatted answer parsed back, the observation rendered as text (what every env loop pays)."""
    from roll_env_frozenlake.env import FrozenLakeEnv

    from roll_core.envs.policies import RandomPolicy

    env, policy = FrozenLakeEnv(setup.env_config()), RandomPolicy(setup.seed)
    episode = 0
    observation, _ = env.reset(seed=episode)
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        observation, _, terminated, truncated, _ = env.step(policy(env, observation))
        if terminated or truncated:
            episode += 1
            observation, _ = env.reset(seed=episode)
    elapsed = time.perf_counter() - started
    return {"steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
            "cpu_us_per_step": (time.process_time() - cpu) / steps * 1e6}
