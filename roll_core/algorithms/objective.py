"""The training objectives the pipeline hands to a train strategy (docs/algorithms.md §6.4, §6.6).

Actor::

    norm = Normalisers.from_mask(label_mask(batch), norm_seq_len(config))   # whole step, all DP ranks
    strategy.train_step(batch, make_actor_loss_fn(config, norm, loss_variant=run.policy_loss.load()))

    L = rl_loss_coef * (agg(l * is_weights; sample_weights) + [use_kl_loss] kl_loss_coef * agg(k3))
        - entropy_loss_coef * agg(H)

``l`` is the per-token loss of ``actor_train.pg_variant`` (a registered policy loss) with the
importance ratio of ``ratio_type`` (token / segment / seq); every term is aggregated with
``loss_agg_mode`` over the mask and the global normalisers, so the sum of micro-batch losses is
the whole-batch loss. Micro-batch keys: ``old_log_probs``, ``advantages``, ``response_mask`` (or
``loss_mask``); ``ref_log_probs`` when ``use_kl_loss``; ``scores`` (or ``episode_scores`` for
step rows) for topr; optional ``is_weights`` [b, T] (train-infer correction) and
``sample_weights`` [b] (PG term only).

Critic (``gae`` only): ``0.5 * sum_rows masked-token-mean((V - ret)^2 [value_clip]) / N_seq``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.advantages import label_mask, require
from roll_core.algorithms.aggregation import Normalisers, agg_loss
from roll_core.algorithms.hparams import hp
from roll_core.algorithms.kl import approx_kl
from roll_core.algorithms.losses import value_loss
from roll_core.algorithms.masking import masked_mean
from roll_core.algorithms.ratio import importance_ratio
from roll_core.errors import ConfigError


def _scores_for_loss(data) -> Tensor | None:
    """TOPR splits on the raw score: the episode score for step rows, else the row score."""
    for key in ("episode_scores", "scores"):
        if key in data:
            scores = torch.as_tensor(data[key]).float()
            return scores.sum(-1) if scores.dim() > 1 else scores
    return None


def _clip_bounds(config: Any) -> tuple[float, float]:
    if hp(config, "use_pg_clip_range"):
        return hp(config, "pg_clip_low"), hp(config, "pg_clip_high")
    return hp(config, "pg_clip"), hp(config, "pg_clip")


def policy_loss(
    data,
    log_probs: Tensor,
    config: Any,
    *,
    normalisers: Normalisers,
    loss_variant: Any,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Total actor loss of one micro-batch.

    ``normalisers`` are the whole step's (over every micro-batch and data-parallel rank): the
    micro-batch's own would silently rescale its share of the loss. ``loss_variant`` is the run's
    bound policy loss (``Run.policy_loss.load()``). Metrics named ``*_loss`` are this micro-batch's
    additive share of the step's loss; the others are micro-batch means.
    """
    variant = loss_variant
    mask = label_mask(data).to(log_probs.dtype)
    norm = normalisers
    mode = hp(config, "loss_agg_mode")
    old = require(data, "old_log_probs", "the policy loss").detach()
    advantages = require(data, "advantages", "the policy loss").detach()

    ratio = importance_ratio(log_probs, old, mask, hp(config, "ratio_type"))
    per_token = variant(log_probs, old, advantages, config, ratio=ratio, scores=_scores_for_loss(data))
    if "is_weights" in data:
        per_token = per_token * data["is_weights"]
    pg = agg_loss(per_token, mask, mode, normalisers=norm, weights=data.get("sample_weights"))
    rl = pg
    metrics: dict[str, float] = {"actor/pg_loss": float(pg.detach())}

    if hp(config, "use_kl_loss"):
        ref = require(data, "ref_log_probs", "use_kl_loss")
        kl = agg_loss(approx_kl(log_probs, ref, "k3"), mask, mode, normalisers=norm)
        rl = rl + hp(config, "kl_loss_coef") * kl
        metrics["actor/kl_loss"] = float(kl.detach())
    total = hp(config, "rl_loss_coef", 1.0) * rl

    entropy_coef = hp(config, "entropy_loss_coef")
    if entropy is not None:
        ent = agg_loss(entropy, mask, mode, normalisers=norm)
        metrics["actor/entropy_loss"] = float(ent.detach())
        if entropy_coef > 0:
            total = total - entropy_coef * ent
    elif entropy_coef > 0:
        raise ConfigError(
            "entropy_loss_coef > 0 but the strategy returned no entropy; compute log-probs with_entropy=True."
        )

    with torch.no_grad():
        low, high = _clip_bounds(config)
        r, log_r = ratio.detach(), (log_probs.detach() - old)
        clipped = ((r < 1 - low) | (r > 1 + high)).to(mask.dtype)
        metrics.update(
            {
                "actor/ratio_mean": float(masked_mean(r, mask)),
                "actor/pg_clipfrac": float(masked_mean(clipped, mask)),
                "actor/approxkl": float(masked_mean(0.5 * log_r.square(), mask)),
                "actor/policykl": float(masked_mean(log_r, mask)),
            }
        )
    return total, metrics


def make_actor_loss_fn(config: Any, normalisers: Normalisers, *, loss_variant: Any):
    """A :data:`roll_core.strategies.base.LossFn` for ``TrainStrategy.train_step``."""

    def loss_fn(micro_batch, log_probs, entropy):
        return policy_loss(
            micro_batch, log_probs, config, entropy=entropy, normalisers=normalisers, loss_variant=loss_variant
        )

    return loss_fn


def critic_loss(
    data, values: Tensor, config: Any, *, normalisers: Normalisers
) -> tuple[Tensor, dict[str, float]]:
    """Value loss of one micro-batch: ``data["values"]`` are V_old, ``data["returns"]`` the targets.

    Always 0.5 x (mean over rows of the masked token-mean), whatever ``loss_agg_mode`` says (§6.6),
    with N_seq global.
    """
    mask = label_mask(data).to(values.dtype)
    old = require(data, "values", "the value loss").detach()
    returns = require(data, "returns", "the value loss").detach()
    loss = value_loss(
        values, old, returns, mask, value_clip=hp(config, "value_clip"), normalisers=normalisers
    )
    with torch.no_grad():
        metrics = {
            "critic/value_loss": float(loss.detach()),
            "critic/values_mean": float(masked_mean(values, mask)),
        }
    return loss, metrics


def make_critic_loss_fn(config: Any, normalisers: Normalisers):
    """A LossFn-shaped callable ``(micro_batch, values, _) -> (loss, metrics)`` for the critic."""

    def loss_fn(micro_batch, values, _entropy=None):
        return critic_loss(micro_batch, values, config, normalisers=normalisers)

    return loss_fn
