"""Train-inference mismatch correction (docs/algorithms.md §6.2).

rho = exp(log pi_old - log pi_infer) compares the training engine's log-probs with the sampler's.
Aggregated per ``token``, per ``segment`` (turn), ``geometric`` (per row, mean log-ratio) or
``sequence`` (per row, summed log-ratio). The IS weight multiplies the per-token PG loss only;
each filter removes tokens from the loss mask.

Pipeline use (after old log-probs are recomputed)::

    updates, metrics = apply_train_infer_correction(batch, config)
    batch.update(updates)      # "is_weights" and/or a filtered "loss_mask"
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.advantages import label_mask
from roll_core.algorithms.hparams import hp, lookup
from roll_core.algorithms.masking import masked_mean, row_reduce, segment_reduce

#: agg type -> aggregated log-ratio on every masked token
LOG_RATIO_AGGREGATES = {
    "token": lambda delta, mask: delta * mask,
    "segment": lambda delta, mask: segment_reduce(delta, mask, mean=True),
    "geometric": lambda delta, mask: row_reduce(delta, mask, mean=True),
    "sequence": lambda delta, mask: row_reduce(delta, mask, mean=False),
}


def train_infer_ratio(
    old_log_probs: Tensor, infer_log_probs: Tensor, mask: Tensor, kind: str = "token"
) -> Tensor:
    """rho per token at granularity ``kind``; 0 outside the mask."""
    agg = lookup(LOG_RATIO_AGGREGATES, kind, "train_infer_correction weight_type/agg_type")
    return torch.exp(agg(old_log_probs - infer_log_probs, mask)) * mask


def is_weights(
    old_log_probs: Tensor,
    infer_log_probs: Tensor,
    mask: Tensor,
    *,
    weight_type: str = "token",
    upper_bound: float | None = 1.2,
    detach: bool = True,
) -> Tensor:
    """``clamp(rho, 0, upper_bound)`` (no upper clamp when ``upper_bound`` is None)."""
    w = train_infer_ratio(old_log_probs, infer_log_probs, mask, weight_type).clamp(min=0.0, max=upper_bound)
    return w.detach() if detach else w


def filter_mask(
    old_log_probs: Tensor,
    infer_log_probs: Tensor,
    mask: Tensor,
    *,
    agg_type: str = "token",
    ratio_enabled: bool = True,
    ratio_low: float = 0.8,
    ratio_high: float = 1.2,
    diff_enabled: bool = False,
    diff_low: float = -0.2,
    diff_high: float = 0.2,
) -> Tensor:
    """The mask with the tokens this filter rejects removed.

    The ratio test uses rho at ``agg_type`` (so a ``sequence`` filter keeps or drops whole rows);
    the diff test compares probabilities ``p_old - p_infer`` per token, which do not aggregate.
    """
    keep = mask > 0
    if ratio_enabled:
        rho = train_infer_ratio(old_log_probs, infer_log_probs, mask, agg_type)
        keep = keep & (rho >= ratio_low) & (rho <= ratio_high)
    if diff_enabled:
        diff = old_log_probs.exp() - infer_log_probs.exp()
        keep = keep & (diff >= diff_low) & (diff <= diff_high)
    return keep.to(mask.dtype)


def apply_train_infer_correction(
    data: dict[str, Any], config: Any
) -> tuple[dict[str, Tensor], dict[str, float]]:
    """Read ``config.train_infer_correction`` and return the batch updates it implies.

    Needs ``old_log_probs`` and ``infer_log_probs`` (label-aligned, 0 off the response) and the
    mask (``loss_mask`` if present, else ``response_mask[:, 1:]``). Returns ``{"is_weights": w}``
    when the IS weight is enabled and ``{"loss_mask": m}`` when a filter is enabled (filters apply
    in order); nothing when the correction is off. The metric ``train_infer/logprob_abs_diff`` (mean
    ``|old - infer|`` over the mask) is always returned.
    """
    cfg = hp(config, "train_infer_correction")
    mask = label_mask(data)
    old, infer = data["old_log_probs"].detach(), data["infer_log_probs"]
    updates: dict[str, Tensor] = {}
    # always reported: with matching engines and weights it is ~0; a large value means the
    # sampled tokens were not conditioned on the rows being trained (or the weights differ)
    metrics: dict[str, float] = {"train_infer/logprob_abs_diff": float(masked_mean((old - infer).abs(), mask))}
    for f in cfg.filters or ():
        if not f.enabled:
            continue
        mask = filter_mask(
            old,
            infer,
            mask,
            agg_type=f.agg_type,
            ratio_enabled=f.ratio_enabled,
            ratio_low=f.ratio_low,
            ratio_high=f.ratio_high,
            diff_enabled=f.diff_enabled,
            diff_low=f.diff_low,
            diff_high=f.diff_high,
        )
        updates["loss_mask"] = mask
    if "loss_mask" in updates:
        before = label_mask(data).sum().clamp_min(1)
        metrics["train_infer/filtered_token_frac"] = float(1 - mask.sum() / before)
    w_cfg = cfg.is_weight
    if w_cfg.enabled:
        w = is_weights(
            old,
            infer,
            mask,
            weight_type=w_cfg.weight_type,
            upper_bound=w_cfg.upper_bound,
            detach=w_cfg.detach,
        )
        updates["is_weights"] = w
        metrics["train_infer/is_weight_mean"] = float(masked_mean(w, mask))
    return updates, metrics
