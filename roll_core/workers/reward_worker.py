"""A reward domain's rank: a Ray actor that scores samples with the domain's registered reward.

Started only by :class:`roll_core.workers.reward_group.RewardGroup`. The reward function is the
same registration the driver would call (a plugin's function needs no change); a reward class
(``llm_judge``, ``reward_model``) is built once here, with its model. The actor is threaded
(``infer_batch_size`` calls at once), so one slow or hung sample does not hold the others; every
call returns ``(reward, correct, failure reason)`` and never raises for a sample.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from typing import Any

from roll_core.errors import ConfigError
from roll_core.registry import Registration


class RewardWorker:
    """See the module docstring."""

    def __init__(self, domain: str, section: Any, reward: Registration, *, seed: int = 0,
                 strategy: Registration | None = None, plugins: Mapping[str, str] | None = None):
        from roll_core.rewards.dispatch import RewardDispatcher
        from roll_core.run import check_plugin_versions

        check_plugin_versions(plugins or {}, f"rewards.{domain} worker")
        services = {"generate": JudgeGenerator(strategy, section, seed)} if strategy is not None else {}
        self.domain = domain
        self.dispatcher = RewardDispatcher({domain: section}, {domain: reward}, seed=seed, services=services)

    def ready(self) -> bool:
        return True

    def node(self) -> tuple[str, str]:
        """``(node_id, node_ip)`` where this worker runs (a replacement's sign that it is up)."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def score(self, prompt: str, response: str, reference: str | None, response_tokens: int,
              row: Mapping[str, Any] | None) -> tuple[float, bool, str]:
        return self.dispatcher.score_checked(self.domain, prompt, response, reference, response_tokens, row)


class JudgeGenerator:
    """``generate(text) -> reply``: a judge model served by an installed inference strategy, the
    judge prompt sent as one user message through the model's chat template."""

    def __init__(self, strategy: Registration, section: Any, seed: int):
        from roll_core.models import load_tokenizer, resolve_pretrain
        from roll_core.strategies.generating_args import sampling_from_generating_args

        pretrain = section.model_args.model_name_or_path
        if not pretrain:
            raise ConfigError("judge_model_type 'inference' loads the judge from the domain's "
                              "model_args.model_name_or_path, which is not set.")
        self.strategy = strategy.load().from_worker_config(section, pretrain, seed)
        self.tokenizer = load_tokenizer(resolve_pretrain(pretrain, seed=seed))
        self.sampling = sampling_from_generating_args(section.generating_args)
        self._ids = itertools.count()
        self._lock = threading.Lock()  # one generate at a time on the strategy

    def __call__(self, text: str) -> str:
        from roll_core.rewards.generative_rm import chat_prompt_ids
        from roll_core.strategies.base import GenerationRequest

        ids = chat_prompt_ids(self.tokenizer, text)
        request = GenerationRequest(f"judge-{next(self._ids)}", ids, self.sampling)
        with self._lock:
            out = self.strategy.generate([request])[0]
        return self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
