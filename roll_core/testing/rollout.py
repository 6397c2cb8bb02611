"""``smoke_rollout``: play whole episodes with a non-model policy and report what happened.

It drives an env the way the rollout engine does (the same :class:`Conversation` prompts, the same
parser), so a plugin author sees quickly whether episodes end, rewards arrive and the prompts build,
before spending any GPU time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from roll_core.envs.base import EnvConfig, TextEnv
from roll_core.envs.policies import Policy, make_policy
from roll_core.envs.prompt import Conversation
from roll_core.registry import Registry


@dataclass
class RolloutStats:
    """Aggregates over the episodes of one :func:`smoke_rollout`."""

    episodes: int
    steps: int
    mean_reward: float
    success_rate: float
    mean_episode_length: float
    valid_action_rate: float
    effective_action_rate: float
    truncated_rate: float
    steps_per_second: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _build(env: str | type[TextEnv] | TextEnv, env_config: Mapping[str, Any] | EnvConfig | None,
           registry: Registry | None) -> TextEnv:
    if isinstance(env, TextEnv):
        return env
    if isinstance(env, type):
        return env(env_config if isinstance(env_config, EnvConfig) else dict(env_config or {}))
    from roll_core.envs.factory import make_env

    return make_env(env, env_config, registry=registry)


def smoke_rollout(env: str | type[TextEnv] | TextEnv, env_config: Mapping[str, Any] | EnvConfig | None = None,
                  *, episodes: int = 10, policy: str | Policy = "random", seed: int = 0,
                  registry: Registry | None = None) -> RolloutStats:
    """Play ``episodes`` episodes (seeds ``seed``, ``seed + 1``, ...) with ``policy`` and return stats.

    ``policy`` is ``"random"``, ``"scripted"`` (the env's ``solve()``) or a callable
    ``policy(env, observation) -> response``.
    """
    instance = _build(env, env_config, registry)
    act = make_policy(policy, seed)
    steps = valid = effective = successes = truncations = 0
    total_reward = 0.0
    started = time.perf_counter()
    for episode in range(episodes):
        observation, _ = instance.reset(seed=seed + episode)
        conversation = Conversation.for_env(instance)
        conversation.observe(observation, actions_left=instance.config.max_steps)
        terminated = truncated = False
        while not (terminated or truncated):
            response = act(instance, observation)
            conversation.respond(response)
            observation, reward, terminated, truncated, info = instance.step(response)
            steps += 1
            total_reward += reward
            valid += info["metrics"]["action_is_valid"]
            effective += info["metrics"]["action_is_effective"]
            if not (terminated or truncated):
                conversation.observe(observation, last_reward=reward,
                                     actions_left=instance.config.max_steps - instance.num_steps)
        successes += instance.success
        truncations += truncated
    elapsed = max(time.perf_counter() - started, 1e-9)
    return RolloutStats(
        episodes=episodes,
        steps=steps,
        mean_reward=total_reward / max(episodes, 1),
        success_rate=successes / max(episodes, 1),
        mean_episode_length=steps / max(episodes, 1),
        valid_action_rate=valid / max(steps, 1),
        effective_action_rate=effective / max(steps, 1),
        truncated_rate=truncations / max(episodes, 1),
        steps_per_second=steps / elapsed,
    )
