"""Loss aggregation with global normalisers (docs/algorithms.md §6.5).

A training step is split into micro-batches (and over data-parallel ranks). Each micro-batch
loss is divided by normalisers taken over the *whole* step, so summing the micro-batch losses
(and gradients) gives exactly the whole-batch formula, whatever the split. Build the normalisers
once per optimiser step from the full batch's mask (``Normalisers.from_mask``), sum them over
DP ranks (``a + b``), and pass them to every micro-batch; the strategy then sums, never averages.

Modes, with M the loss mask and w_b optional per-row weights:

* ``token-mean``: sum_{b,t} l*M*w_b / N_tok (numerator masked: roll's fix of §6.5 [Q]).
* ``seq-mean-token-sum``: sum_b w_b * sum_t l*M / N_seq.
* ``seq-mean-token-mean`` (default): sum_b w_b * (sum_t l*M / sum_t M) / N_seq.
* ``seq-mean-token-sum-norm``: sum_b w_b * sum_t l*M / T, T a constant of the run
  (:func:`norm_seq_len`: RLVR's ``response_length``, the agentic ``sequence_length``); ROLL used
  each micro-batch's padded width, which makes a token's weight depend on its neighbours' lengths.
  Like ROLL, no division by N_seq.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from roll_core.algorithms.hparams import hp, lookup
from roll_core.algorithms.masking import masked_mean, masked_sum
from roll_core.errors import ConfigError


@dataclass(frozen=True)
class Normalisers:
    """Global denominators of one optimiser step: tokens, rows with a token, and T."""

    num_tokens: float
    num_seqs: float
    seq_len: float

    @classmethod
    def from_mask(cls, mask: Tensor, seq_len: float) -> Normalisers:
        """From the whole step's label mask and the run's constant T (:func:`norm_seq_len`)."""
        return cls(num_tokens=float(mask.sum()), num_seqs=float((mask.sum(-1) > 0).sum()), seq_len=float(seq_len))

    def __add__(self, other: Normalisers) -> Normalisers:
        """Combine the counts of two DP ranks (``seq_len`` is a constant and must agree)."""
        if self.seq_len != other.seq_len:
            raise ValueError("seq_len must be the same global constant on every rank")
        return Normalisers(self.num_tokens + other.num_tokens, self.num_seqs + other.num_seqs, self.seq_len)


def norm_seq_len(config: Any) -> int:
    """T of ``seq-mean-token-sum-norm``: the longest response a row can hold in this run.

    RLVR: ``response_length`` (else ``sequence_length - prompt_length``); agentic: the
    ``sequence_length`` of a whole trajectory. A constant, so the loss of a row does not depend on
    how long the other rows of its micro-batch happen to be.
    """
    sequence = hp(config, "sequence_length", None)
    if hp(config, "pipeline_type", "agentic") == "rlvr":
        response = hp(config, "response_length", None)
        prompt = hp(config, "prompt_length", None)
        if response:
            return int(response)
        if sequence and prompt:
            return int(sequence) - int(prompt)
    if sequence:
        return int(sequence)
    raise ConfigError("loss normalisation needs sequence_length (or prompt_length and response_length) in the config.")


def _row_weights(loss: Tensor, weights: Tensor | None) -> Tensor | float:
    return 1.0 if weights is None else weights.to(loss.dtype)


def _token_mean(loss, mask, w, norm):
    return (masked_sum(loss, mask, dim=-1) * w).sum() / max(norm.num_tokens, 1.0)


def _seq_mean_token_sum(loss, mask, w, norm):
    return (masked_sum(loss, mask, dim=-1) * w).sum() / max(norm.num_seqs, 1.0)


def _seq_mean_token_mean(loss, mask, w, norm):
    return (masked_mean(loss, mask, dim=-1) * w).sum() / max(norm.num_seqs, 1.0)


def _seq_mean_token_sum_norm(loss, mask, w, norm):
    return (masked_sum(loss, mask, dim=-1) * w).sum() / norm.seq_len


AGG_MODES = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def agg_loss(
    loss: Tensor,
    mask: Tensor,
    mode: str = "seq-mean-token-mean",
    *,
    normalisers: Normalisers,
    weights: Tensor | None = None,
) -> Tensor:
    """Aggregate a per-token loss ``[b, T]`` with the whole step's ``normalisers`` (required: this
    micro-batch's own would silently rescale its share of the loss)."""
    fn = lookup(AGG_MODES, mode, "loss_agg_mode")
    return fn(loss, mask.to(loss.dtype), _row_weights(loss, weights), normalisers)
