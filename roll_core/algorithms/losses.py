"""Per-token policy-gradient losses, entropy and the critic's value loss (docs/algorithms.md §6.3, §6.6).

Two layers:

* Pure functions (``ppo_loss``, ``tis_loss``, ...) with explicit hyper-parameters, returning the
  per-token loss ``[B, T]``. Aggregation over tokens and rows happens elsewhere
  (:mod:`roll_core.algorithms.aggregation`), so these never look at a mask.
* Registered policy losses (``ppo``, ``vanilla``, ``tis``, ``topr``, ``cispo``, ``kimi15``),
  selected by ``actor_train.pg_variant``. The contract every policy-loss plugin follows::

      loss(log_probs, old_log_probs, advantages, config, *, ratio=None, scores=None) -> Tensor[B, T]

  ``log_probs`` carries the gradient; ``old_log_probs`` are the training engine's pi_old;
  ``ratio`` is the importance ratio chosen by ``ratio_type`` (token / segment / seq), defaulting
  to the token ratio; ``scores`` is the raw response-level score per row ``[B]`` (TOPR splits on
  its sign). Hyper-parameters are read from ``config`` by ROLL's names. Extra keyword arguments
  must be accepted (``**_``) so the caller can add context without breaking plugins.

Gradient w.r.t. log pi of each variant (checked by the tests with autograd):
ppo: -rA unclipped, 0 clipped; dual clip: 0 once r > c for A < 0; vanilla: -A; tis: -clip(r)A;
topr: -A w+ (score > 0), -clip(r, 0, 1) A w- (score <= 0); cispo: -clip(r)A (0 where the unified
mask drops the token); kimi15: -A + tau * log r.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.aggregation import Normalisers, agg_loss
from roll_core.algorithms.hparams import hp


def _ratio(log_probs: Tensor, old_log_probs: Tensor, ratio: Tensor | None) -> Tensor:
    return torch.exp(log_probs - old_log_probs) if ratio is None else ratio


def ppo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    ratio: Tensor | None = None,
) -> Tensor:
    """``-min(rA, clip(r, 1-clip_low, 1+clip_high) A)``; ``dual_clip_c`` bounds it by ``-cA`` for A < 0.

    ROLL hard-codes c = 1 + 2*pg_clip (1.4); roll takes c from ``dual_clip_c`` (default 3.0).
    """
    r = _ratio(log_probs, old_log_probs, ratio)
    surrogate = torch.min(r * advantages, r.clamp(1 - clip_low, 1 + clip_high) * advantages)
    if dual_clip_c is not None:
        bounded = torch.max(surrogate, dual_clip_c * advantages)
        surrogate = torch.where(advantages < 0, bounded, surrogate)
    return -surrogate


def vanilla_loss(log_probs: Tensor, advantages: Tensor) -> Tensor:
    """REINFORCE: ``-A log pi`` (no ratio)."""
    return -advantages * log_probs


def tis_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    *,
    lower_bound: float = 0.0,
    upper_bound: float = 1.0,
    ratio: Tensor | None = None,
) -> Tensor:
    """Truncated IS: ``-sg(clip(r, lb, ub)) A log pi``."""
    w = _ratio(log_probs, old_log_probs, ratio).detach().clamp(lower_bound, upper_bound)
    return -w * advantages * log_probs


def topr_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    scores: Tensor,
    *,
    positive_weight: float = 1.0,
    negative_weight: float = 1.0,
    ratio: Tensor | None = None,
) -> Tensor:
    """TOPR: plain ``-A log pi`` on positive-score rows, truncated IS (clip r to [0, 1]) on the rest.

    ``scores`` is the raw score, ``[B]`` (one per row) or broadcastable to the loss.
    """
    if scores.dim() == 1 and log_probs.dim() == 2:
        scores = scores[:, None]
    w = _ratio(log_probs, old_log_probs, ratio).detach().clamp(0.0, 1.0)
    positive = -advantages * log_probs * positive_weight
    negative = -w * advantages * log_probs * negative_weight
    return torch.where(scores > 0, positive, negative)


def cispo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    *,
    epsilon_low: float = 0.1,
    epsilon_high: float = 0.1,
    unified_mask: bool = False,
    ratio: Tensor | None = None,
) -> Tensor:
    """CISPO: ``-sg(clip(r, 1-eps_l, 1+eps_h)) A log pi``; the unified mask drops tokens PPO would clip."""
    r = _ratio(log_probs, old_log_probs, ratio).detach()
    loss = -r.clamp(1 - epsilon_low, 1 + epsilon_high) * advantages * log_probs
    if unified_mask:
        dropped = ((advantages > 0) & (r > 1 + epsilon_high)) | ((advantages < 0) & (r < 1 - epsilon_low))
        loss = loss * (~dropped).to(loss.dtype)
    return loss


def kimi15_loss(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, *, tau: float = 0.1) -> Tensor:
    """Kimi 1.5: ``-A log pi + tau/2 (log pi - log pi_old)^2``."""
    return -advantages * log_probs + 0.5 * tau * (log_probs - old_log_probs).square()


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last dimension: ``logsumexp(z) - sum softmax(z) z``."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def value_loss_per_token(
    values: Tensor, old_values: Tensor, returns: Tensor, value_clip: float | None = None
) -> Tensor:
    """``(V - ret)^2``, or with ``value_clip`` c ``max((V - ret)^2, (clip(V, V_old +- c) - ret)^2)``."""
    loss = (values - returns).square()
    if value_clip is not None:
        clipped = torch.max(torch.min(values, old_values + value_clip), old_values - value_clip)
        loss = torch.max(loss, (clipped - returns).square())
    return loss


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    value_clip: float | None = None,
    normalisers: Normalisers,
) -> Tensor:
    """Critic loss: 0.5 x mean over rows of the masked token-mean, whatever ``loss_agg_mode`` is (§6.6)."""
    per_token = value_loss_per_token(values, old_values, returns, value_clip)
    return 0.5 * agg_loss(per_token, mask, "seq-mean-token-mean", normalisers=normalisers)


# --- registered policy losses: read hyper-parameters from the config by ROLL's names -------------


def _clip_range(config: Any) -> tuple[float, float]:
    if hp(config, "use_pg_clip_range"):
        return hp(config, "pg_clip_low"), hp(config, "pg_clip_high")
    return hp(config, "pg_clip"), hp(config, "pg_clip")


def ppo(log_probs, old_log_probs, advantages, config, *, ratio=None, **_) -> Tensor:
    """PPO clipped surrogate: ``pg_clip`` (or ``pg_clip_low``/``pg_clip_high`` with ``use_pg_clip_range``),
    dual clip with ``dual_clip_c`` when ``dual_clip_loss``."""
    low, high = _clip_range(config)
    c = hp(config, "dual_clip_c") if hp(config, "dual_clip_loss") else None
    return ppo_loss(
        log_probs, old_log_probs, advantages, clip_low=low, clip_high=high, dual_clip_c=c, ratio=ratio
    )


def vanilla(log_probs, old_log_probs, advantages, config, **_) -> Tensor:
    """REINFORCE policy gradient ``-A log pi``."""
    return vanilla_loss(log_probs, advantages)


def tis(log_probs, old_log_probs, advantages, config, *, ratio=None, **_) -> Tensor:
    """Truncated importance sampling (``tis_lower_bound``, ``tis_upper_bound``)."""
    return tis_loss(
        log_probs,
        old_log_probs,
        advantages,
        lower_bound=hp(config, "tis_lower_bound"),
        upper_bound=hp(config, "tis_upper_bound"),
        ratio=ratio,
    )


def topr(log_probs, old_log_probs, advantages, config, *, ratio=None, scores=None, **_) -> Tensor:
    """TOPR (``topr_positive_weight``, ``topr_negative_weight``); needs the raw ``scores``."""
    if scores is None:
        raise ValueError("pg_variant 'topr' needs the raw response scores (data['scores'])")
    return topr_loss(
        log_probs,
        old_log_probs,
        advantages,
        scores,
        positive_weight=hp(config, "topr_positive_weight"),
        negative_weight=hp(config, "topr_negative_weight"),
        ratio=ratio,
    )


def cispo(log_probs, old_log_probs, advantages, config, *, ratio=None, **_) -> Tensor:
    """CISPO (``cispo_epsilon_low``, ``cispo_epsilon_high``, ``cispo_use_unified_mask``)."""
    return cispo_loss(
        log_probs,
        old_log_probs,
        advantages,
        epsilon_low=hp(config, "cispo_epsilon_low"),
        epsilon_high=hp(config, "cispo_epsilon_high"),
        unified_mask=hp(config, "cispo_use_unified_mask"),
        ratio=ratio,
    )


def kimi15(log_probs, old_log_probs, advantages, config, **_) -> Tensor:
    """Kimi 1.5 policy gradient with a squared log-ratio penalty (``kimi15_tau``)."""
    return kimi15_loss(log_probs, old_log_probs, advantages, tau=hp(config, "kimi15_tau"))
