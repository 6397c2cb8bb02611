"""RLVR dynamic sampling: ROLL's query and response filters, and how a batch is refilled.

A prompt's group (its ``num_return_sequences_in_group`` scored responses) is dropped when its
domain's ``query_filter_config`` says so (``std_filter`` with ``std_threshold: 0`` drops groups
whose rewards are all equal, which carry zero GRPO advantage); a response whose reward fails
``response_filter_config`` is resampled. :class:`~roll_core.rollout.rlvr.RLVRRollout` refills the
batch in rounds until it holds ``rollout_batch_size`` passing groups (see :class:`DynamicSampling`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: resampling rounds of a response failing the response filter before its prompt is dropped (as ROLL)
RESPONSE_RETRIES = 5


def _mean_fails(args: Mapping[str, float], rewards: Sequence[float]) -> bool:
    mean = sum(rewards) / len(rewards)
    return mean <= float(args.get("threshold_down", -1)) or mean >= float(args.get("threshold_up", math.inf))


def _std_fails(args: Mapping[str, float], rewards: Sequence[float]) -> bool:
    if len(rewards) < 2:  # one response has no spread: kept, as ROLL keeps single-response groups
        return False
    return statistics.stdev(rewards) <= float(args.get("std_threshold", -1))


#: filter type -> does the filter drop these rewards? (ROLL's thresholds and defaults; stdev is the sample one)
FILTERS: dict[str, Any] = {"no_filter": lambda args, rewards: False, "mean_filter": _mean_fails,
                           "std_filter": _std_fails}


def fails(config: Any, rewards: Sequence[float]) -> bool:
    """Whether a :class:`~roll_core.config.rlvr.RewardFilterConfig` drops ``rewards`` (a group or one response)."""
    return bool(FILTERS[config.type](config.filter_args, [float(r) for r in rewards]))


@dataclass(frozen=True)
class DynamicSampling:
    """The filters of a run's reward domains and the refill settings (ROLL's field names).

    Round 0 draws the batch's ``rollout_batch_size`` prompts, as without filters. Every later round
    draws the groups still missing, plus ``additional`` spares (``is_use_additional_prompts``:
    ``max_additional_running_prompts``), as one generation batch. Passing groups fill the batch in
    draw order; spare ones that are not needed go back to the front of the data stream, so which
    groups train never depends on which request finished first. ``max_groups`` bounds the prompts
    one step consumes (``max_groups_per_step``; default ten batches); ``unfilled`` says what happens
    when it is reached before the batch is full (``unfilled_batch``:
    :data:`~roll_core.rollout.dynamic_sampling.UNFILLED_BATCH`).
    """

    query: Mapping[str, Any] = field(default_factory=dict)  # domain -> RewardFilterConfig
    response: Mapping[str, Any] = field(default_factory=dict)
    additional: int = 0
    max_groups: int | None = None
    unfilled: str = "stop"

    @classmethod
    def from_config(cls, config: Any) -> DynamicSampling:
        rewards = config.rewards
        return cls(query={d: r.query_filter_config for d, r in rewards.items() if r.query_filter_config.active},
                   response={d: r.response_filter_config for d, r in rewards.items()
                             if r.response_filter_config.active},
                   additional=config.max_additional_running_prompts if config.is_use_additional_prompts else 0,
                   max_groups=config.max_groups_per_step, unfilled=config.unfilled_batch)

    @property
    def active(self) -> bool:
        return bool(self.query or self.response)

    def describe(self) -> str:
        parts = [f"rewards.{d}.query_filter_config {c.type} {dict(c.filter_args)}" for d, c in self.query.items()]
        parts += [f"rewards.{d}.response_filter_config {c.type} {dict(c.filter_args)}"
                  for d, c in self.response.items()]
        return "; ".join(parts) or "none"

    def response_fails(self, domain: str, reward: float) -> bool:
        config = self.response.get(domain)
        return config is not None and fails(config, [reward])

    def group_reason(self, domain: str, rewards: Sequence[float]) -> str | None:
        """The query filter's type when it drops the group, else None."""
        config = self.query.get(domain)
        return config.type if config is not None and fails(config, rewards) else None
