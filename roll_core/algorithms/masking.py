"""Masked reductions over label-aligned ``[B, T]`` tensors (T = L-1).

Every statistic here only sees positions where ``mask`` is 1, so observation, prompt and padding
tokens can never leak into a mean, a variance or a segment. Empty rows or segments reduce to 0
rather than NaN, which keeps gradients finite when a filter drops a whole row.
"""

from __future__ import annotations

import torch
from torch import Tensor

_TINY = 1e-12


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    prod = x * mask
    return prod.sum() if dim is None else prod.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean over masked positions; 0 where nothing is masked in."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp_min(_TINY)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance over all masked positions (N-1 denominator by default, as ROLL's whitening)."""
    mean = masked_mean(x, mask)
    count = mask.sum()
    var = masked_sum((x - mean) ** 2, mask) / count.clamp_min(_TINY)
    if unbiased:
        var = var * count / (count - 1).clamp_min(_TINY)
    return var


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """``(x - mu) / sqrt(var + eps)`` over every masked token of the batch, 0 outside the mask.

    Statistics are per token, not per row, so long responses weigh more (ROLL's behaviour, §4).
    """
    mean = masked_mean(x, mask)
    out = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        out = out + mean
    return out * mask


def segment_ids(mask: Tensor) -> Tensor:
    """Index of the maximal run of ones (a turn) each position is in, per row; -1 outside the mask."""
    on = mask > 0
    prev = torch.zeros_like(on)
    prev[..., 1:] = on[..., :-1]
    starts = on & ~prev
    ids = torch.cumsum(starts.long(), dim=-1) - 1
    return torch.where(on, ids, torch.full_like(ids, -1))


def segment_reduce(x: Tensor, mask: Tensor, mean: bool = True) -> Tensor:
    """Masked mean (or sum) of ``x`` over each turn segment, broadcast back to the segment's tokens.

    Differentiable (``index_add``), so a segment-level ratio passes gradients to every token of
    its turn. 0 outside the mask.
    """
    batch, width = mask.shape
    ids = segment_ids(mask)
    dump = batch * width  # one extra slot collects the positions outside every segment
    flat = torch.where(
        ids >= 0, ids + torch.arange(batch, device=mask.device)[:, None] * width, torch.full_like(ids, dump)
    ).reshape(-1)
    m = mask.to(x.dtype)
    sums = torch.zeros(dump + 1, dtype=x.dtype, device=x.device).index_add(0, flat, (x * m).reshape(-1))
    if mean:
        counts = torch.zeros(dump + 1, dtype=x.dtype, device=x.device).index_add(0, flat, m.reshape(-1))
        sums = sums / counts.clamp_min(_TINY)
    return sums[flat].reshape(batch, width) * m


def row_reduce(x: Tensor, mask: Tensor, mean: bool = True) -> Tensor:
    """Masked mean (or sum) of each row, broadcast to the row's masked tokens (0 elsewhere)."""
    reduced = masked_mean(x, mask, dim=-1) if mean else masked_sum(x, mask, dim=-1)
    return reduced[:, None] * mask
