"""Who answers a turn: the model (through the generation scheduler) or a model-free policy.

Every env loop asks its :class:`TurnPolicy` for a :class:`GenerationOutput` and handles the answer
the same way, so ``random`` and ``scripted`` rollouts exercise the whole engine (prompts, token
assembly, groups, batches) minus the model. Model-free policies need the env itself (its valid
actions, its solver), which is why they run inside the env manager rather than in an inference
worker: they produce the response text, which is tokenised here and closed with the end-of-turn
token exactly like a model response that stopped by itself.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Mapping
from typing import Any, ClassVar

from roll_core.chat.codec import ChatCodec
from roll_core.envs.policies import POLICIES as TEXT_POLICIES
from roll_core.errors import ConfigError
from roll_core.strategies.base import GenerationOutput, GenerationRequest


class TurnPolicy(abc.ABC):
    """Answers one turn of one env."""

    #: whether a model (inference workers, a generation scheduler) is needed
    needs_model: ClassVar[bool] = False

    def start_episode(self, seed: int) -> None:
        """Called before every episode with a seed derived from (group, episode, member)."""

    @abc.abstractmethod
    async def generate(self, request: GenerationRequest, env: Any, observation: str,
                       version: int) -> GenerationOutput:
        """The response to ``request``; ``version`` is the policy version the episode was admitted at."""


class ModelPolicy(TurnPolicy):
    """Sends the request to the generation scheduler (a Ray actor) and awaits the answer."""

    needs_model = True

    def __init__(self, name: str, codec: ChatCodec, generate_scheduler: Any = None, **options: Any):
        if options:
            raise ConfigError(f"the model as the rollout policy takes no policy options, got {sorted(options)}")
        if generate_scheduler is None:
            raise ConfigError(
                "the rollout policy is the model, but no generation scheduler was given; build one "
                "(roll_core.workers.generate_scheduler.GenerateScheduler) or use a model-free policy (random, scripted)"
            )
        self.scheduler = generate_scheduler

    async def generate(self, request, env, observation, version):
        return await self.scheduler.generate.remote(request)


class TextPolicy(TurnPolicy):
    """A model-free policy of :data:`roll_core.envs.policies.POLICIES` (``policy(env, observation)
    -> response text``), answering turns like a model.

    The response is tokenised and closed with the end-of-turn token, truncated at the request's
    ``max_new_tokens`` like a model's would be; log-probs are 0 and the version is the one the
    episode was admitted at (a fixed policy never goes stale). It is rebuilt every episode with that
    episode's seed. ``options`` go to the policy's constructor (the scripted policy's ``slip_rate``);
    a move the policy does not stand behind (its ``demonstrated`` is False) is answered untrainable.
    """

    def __init__(self, name: str, codec: ChatCodec, generate_scheduler: Any = None, **options: Any):
        self.codec = codec
        self.factory = functools.partial(TEXT_POLICIES[name], **{**TEXT_POLICY_OPTIONS.get(name, {}), **options})
        try:
            self.policy = self.factory(None)
        except TypeError as exc:
            raise ConfigError(f"the {name!r} rollout policy does not take the options {sorted(options)}: {exc}") from None

    def start_episode(self, seed: int) -> None:
        self.policy = self.factory(seed)

    async def generate(self, request, env, observation, version):
        text = self.policy(env, observation)
        ids = self.codec.encode(text) + self.codec.end_of_turn_ids
        limit = request.sampling.max_new_tokens
        finish = "stop"
        if len(ids) > limit:
            ids, finish = ids[:limit], "length"
        return GenerationOutput(request_id=request.request_id, token_ids=ids, logprobs=[0.0] * len(ids),
                                finish_reason=finish, policy_version=version,
                                trainable=getattr(self.policy, "demonstrated", True))


#: options of a text policy inside a rollout: one policy name covers every env of a run, so the
#: scripted policy plays envs without a solver randomly instead of refusing them
TEXT_POLICY_OPTIONS: dict[str, dict[str, Any]] = {"scripted": {"without_solver": "random"}}

#: rollout policy name -> class built as ``cls(name, codec, generate_scheduler=...)``; ``policy`` is
#: ROLL's ``llm_proxy.proxy_type`` name for the model; the model-free ones are roll_core.envs.policies'.
TURN_POLICIES: dict[str, type[TurnPolicy]] = {
    "model": ModelPolicy,
    "policy": ModelPolicy,
    **{name: TextPolicy for name in TEXT_POLICIES},
}


def check_policy(name: str) -> str:
    if name not in TURN_POLICIES:
        raise ConfigError(f"Unknown rollout policy {name!r}; use one of {', '.join(sorted(TURN_POLICIES))}.")
    return name


def policy_needs_model(name: str) -> bool:
    return TURN_POLICIES[check_policy(name)].needs_model


def make_turn_policy(name: str, codec: ChatCodec, generate_scheduler: Any = None,
                     options: Mapping[str, Any] | None = None) -> TurnPolicy:
    return TURN_POLICIES[check_policy(name)](name, codec, generate_scheduler=generate_scheduler, **dict(options or {}))


def lockstep_rollout(spec: Any, generate_scheduler: Any) -> bool:
    """Whether ``spec``'s batches generate in lock-step rounds: a synchronous run whose policy is the model."""
    return bool(spec.lockstep and spec.async_generation_ratio == 0 and generate_scheduler is not None
                and policy_needs_model(spec.policy))
