"""RLVR's per-response masks and weights (docs/algorithms.md §5, §6.4): which responses train, how much.

Masks (a response that fails one trains on no token; the row stays in the batch, so group
statistics are unchanged):

* ``max_len_mask``: a response cut at the length limit says nothing about the answer;
* ``difficulty_mask``: a prompt trains only if ``low < mean score of its group < high`` (groups
  all right or all wrong carry no GRPO signal anyway, and may be over- or under-trained on);
* ``error_max_len_clip``: a failed response (score <= 0) trains only if it is shorter than
  ``error_max_len_threshold`` tokens (long failures are often rambling, not wrong reasoning).

Weights, on the policy-gradient term only, each rescaled to mean 1 over the batch:

* ``difficulty_loss_weight``: ``0.5 + 1.5 d`` with ``d`` = 1 - the group's mean score (clamped to
  [0, 1]): prompts the policy fails more often weigh more;
* ``length_loss_weight``: ``1.5 - length / longest response of the batch``: shorter responses weigh more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.normalization import group_ids


@dataclass(frozen=True)
class SampleMaskSettings:
    """The RLVR config's fields of this module (all off by default)."""

    max_len_mask: bool = False
    difficulty_mask: bool = False
    difficulty_low_threshold: float = 0.0
    difficulty_high_threshold: float = 1.0
    error_max_len_clip: bool = False
    error_max_len_threshold: int = 9999999999
    difficulty_loss_weight: bool = False
    length_loss_weight: bool = False

    @classmethod
    def from_config(cls, config: Any) -> SampleMaskSettings:
        return cls(**{name: getattr(config, name) for name in cls.__dataclass_fields__})

    @property
    def masks(self) -> bool:
        return self.max_len_mask or self.difficulty_mask or self.error_max_len_clip

    @property
    def weights(self) -> bool:
        return self.difficulty_loss_weight or self.length_loss_weight


def _mean_one(weights: Tensor) -> Tensor:
    return weights / weights.mean().clamp_min(1e-8)


def sample_masks(scores: Tensor, groups: list[Any], lengths: Tensor, truncated: Tensor,
                 settings: SampleMaskSettings) -> tuple[Tensor, Tensor | None, dict[str, float]]:
    """``(keep [B] bool, sample_weights [B] or None, metrics)`` for responses with these ``scores``
    (the reward of each response), prompt ``groups`` (a key per row), ``lengths`` (generated
    tokens) and ``truncated`` flags (cut at the length limit)."""
    scores = scores.float()
    keep = torch.ones_like(scores, dtype=torch.bool)
    metrics: dict[str, float] = {}
    gid = group_ids(groups, scores.device)
    sums = torch.zeros(int(gid.max()) + 1).index_add(0, gid, scores)
    counts = torch.zeros(int(gid.max()) + 1).index_add(0, gid, torch.ones_like(scores))
    group_mean = (sums / counts)[gid]
    if settings.max_len_mask:
        keep &= ~truncated.bool()
    if settings.difficulty_mask:
        inside = (group_mean > settings.difficulty_low_threshold) & (group_mean < settings.difficulty_high_threshold)
        metrics["train/difficulty_mask_kept"] = float(inside.float().mean())
        keep &= inside
    if settings.error_max_len_clip:
        keep &= (scores > 0) | (lengths < settings.error_max_len_threshold)
    if settings.masks:
        metrics["train/rows_trained"] = float(keep.float().mean())
    weights = None
    if settings.difficulty_loss_weight:
        weights = _mean_one(0.5 + 1.5 * (1.0 - group_mean.clamp(0.0, 1.0)))
    if settings.length_loss_weight:
        by_length = _mean_one(1.5 - lengths.float() / lengths.float().max().clamp_min(1.0))
        weights = by_length if weights is None else _mean_one(weights * by_length)
    return keep, weights, metrics
