"""Response-level reward normalisation (docs/algorithms.md §2).

One core, :func:`normalize`, works on any grouping given as integer group ids, so RLVR (contiguous
blocks of ``num_return_sequences_in_group``) and agentic (a non-tensor key such as
``traj_group_id``) share it. The mean and the std type are chosen independently from
``batch`` / ``group`` / ``None`` and every pairing works (roll's decision; ROLL's RLVR
``reward_norm`` broke on all but group/group).

Conventions kept from ROLL and pinned by the worked examples: unbiased std (N-1), eps added to
sigma, and a set whose std is degenerate (one element, or sigma <= 1e-6) normalises to 0, so a
group whose rewards are all equal always gets advantage 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.hparams import lookup

EPS = 1e-6
MIN_STD = 1e-6


def as_keys(values: Any) -> list[Hashable]:
    """A per-row key column (list, numpy array or tensor) as a list of hashable values."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    return [tuple(v) if isinstance(v, list) else v for v in values]


def group_ids(keys: Sequence[Hashable], device: torch.device | str | None = None) -> Tensor:
    """Contiguous integer ids for per-row keys, numbered by first appearance."""
    index: dict[Hashable, int] = {}
    ids = [index.setdefault(k, len(index)) for k in as_keys(keys)]
    return torch.tensor(ids, dtype=torch.long, device=device)


def _group_sums(x: Tensor, gid: Tensor) -> tuple[Tensor, Tensor]:
    n = int(gid.max()) + 1 if gid.numel() else 0
    sums = torch.zeros(n, dtype=x.dtype, device=x.device).index_add(0, gid, x)
    counts = torch.zeros(n, dtype=x.dtype, device=x.device).index_add(0, gid, torch.ones_like(x))
    return sums, counts


def _batch_mean(x: Tensor, gid: Tensor) -> Tensor:
    return x.mean().expand_as(x)


def _group_mean(x: Tensor, gid: Tensor) -> Tensor:
    sums, counts = _group_sums(x, gid)
    return (sums / counts)[gid]


def _no_mean(x: Tensor, gid: Tensor) -> Tensor:
    return torch.zeros_like(x)


def _batch_std(x: Tensor, gid: Tensor) -> tuple[Tensor, Tensor]:
    n = torch.full_like(x, x.numel())
    std = x.std(unbiased=True) if x.numel() > 1 else x.new_zeros(())
    return std.expand_as(x), n


def _group_std(x: Tensor, gid: Tensor) -> tuple[Tensor, Tensor]:
    sums, counts = _group_sums(x, gid)
    dev = x - (sums / counts)[gid]
    sq, _ = _group_sums(dev * dev, gid)
    var = sq / (counts - 1).clamp_min(1.0)
    return var.sqrt()[gid], counts[gid]


def _constant_groups(x: Tensor, gid: Tensor) -> Tensor:
    """Per row: whether every row of its group has the same value."""
    n = int(gid.max()) + 1 if gid.numel() else 0
    high = torch.full((n,), float("-inf"), dtype=x.dtype, device=x.device).scatter_reduce(0, gid, x, "amax")
    low = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device).scatter_reduce(0, gid, x, "amin")
    return (high == low)[gid]


#: norm_mean_type -> per-row mean to subtract
MEANS = {"batch": _batch_mean, "group": _group_mean, None: _no_mean}
#: norm_std_type -> (per-row std, size of the set it was taken over)
STDS = {"batch": _batch_std, "group": _group_std}


def normalize(
    x: Tensor, gid: Tensor, mean_type: str | None, std_type: str | None, eps: float = EPS, *,
    zero_singleton_groups: bool = False,
) -> Tensor:
    """``(x - mu) / (sigma + eps)``, or ``x - mu`` when ``std_type`` is None.

    Where the std's set has one element or sigma <= 1e-6 the result is 0 (ROLL's agentic rule,
    applied to every pairing so an equal-reward group can never blow up by 1/eps). With
    ``zero_singleton_groups`` (agentic, §2.2) a group of one row is 0 too whatever set the std is
    taken over: one episode alone says nothing about how good it was relative to its group.
    """
    x = x.float()
    centered = x - lookup(MEANS, mean_type, "norm_mean_type")(x, gid)
    if mean_type == "group":  # exactly 0 for a group of equal rewards (sum / count can round off)
        centered = torch.where(_constant_groups(x, gid), torch.zeros_like(centered), centered)
    if std_type is None:
        return centered
    sigma, n = lookup(STDS, std_type, "norm_std_type")(x, gid)
    out = centered / (sigma + eps)
    degenerate = (n <= 1) | (sigma <= MIN_STD)
    if zero_singleton_groups:
        degenerate = degenerate | (_group_sums(x, gid)[1][gid] <= 1)
    return torch.where(degenerate, torch.zeros_like(out), out)


def contiguous_group_ids(batch_size: int, group_size: int, device=None) -> Tensor:
    """RLVR groups: the ``n`` responses of a prompt are contiguous rows."""
    if group_size < 1 or batch_size % group_size:
        raise ValueError(f"batch of {batch_size} rows is not a whole number of groups of {group_size}")
    return torch.arange(batch_size, device=device) // group_size


def reward_norm(
    scores: Tensor,
    group_size: int = 1,
    norm_mean_type: str | None = None,
    norm_std_type: str | None = None,
    *,
    groups: Sequence[Hashable] | None = None,
) -> Tensor:
    """RLVR response-level normalisation (§2.1); ``groups`` overrides contiguous blocks of ``group_size``."""
    gid = (
        group_ids(groups, scores.device)
        if groups is not None
        else contiguous_group_ids(scores.shape[0], group_size, scores.device)
    )
    return normalize(scores, gid, norm_mean_type, norm_std_type)


#: deprecated ``reward_normalization.method`` -> (mean, std) types, given G = batch or group
METHOD_TYPES = {
    "identity": lambda g: (None, None),
    "mean": lambda g: (g, None),
    "mean_std": lambda g: (g, g),
    "asym_clip": lambda g: (g, g),
}


def resolve_norm_types(
    grouping: str, method: str, norm_mean_type: str | None, norm_std_type: str | None
) -> tuple[str | None, str | None]:
    """Explicit types win; when both are None they come from ``method`` (§2.2)."""
    if norm_mean_type is not None or norm_std_type is not None:
        return norm_mean_type, norm_std_type
    level = "batch" if grouping == "batch" else "group"
    return lookup(METHOD_TYPES, method, "reward_normalization.method")(level)


def agentic_reward_norm(
    scores: Tensor, groups: Sequence[Hashable] | None, norm_mean_type: str | None, norm_std_type: str | None
) -> Tensor:
    """Agentic normalisation (§2.2) with groups from a per-row key; ``None`` = one batch group.

    A group of one row gets 0 whenever a std type is set, also with ``norm_std_type: batch``.
    """
    gid = (
        group_ids(groups, scores.device)
        if groups is not None
        else torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
    )
    return normalize(scores, gid, norm_mean_type, norm_std_type, zero_singleton_groups=True)
