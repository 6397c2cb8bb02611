"""Helpers shared by the rollout tests."""

from __future__ import annotations

from roll_core.rollout.engine.turn_policies import TurnPolicy, make_turn_policy


class RecordingPolicy(TurnPolicy):
    """The random policy, keeping every request's prompt ids."""

    def __init__(self, codec):
        self.inner = make_turn_policy("random", codec)
        self.prompts = []

    def start_episode(self, seed):
        self.inner.start_episode(seed)

    async def generate(self, request, env, observation, version):
        self.prompts.append(list(request.prompt_ids))
        return await self.inner.generate(request, env, observation, version)
