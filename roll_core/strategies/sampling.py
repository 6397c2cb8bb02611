"""Next-token sampling for the decode loop: fast on CPU, with exact log-probs.

Why not ``torch.multinomial``: on CPU it draws one exponential variate per vocabulary entry per
row and step, which dominated tiny-model generation (docs/dependencies.md). Here each row needs one
uniform number: the token is found by inverse-CDF search (``cumsum`` + ``searchsorted``) over
the filtered distribution. Top-k runs ``torch.topk`` first, so only k candidates are sorted and
searched; top-p without top-k sorts the row once.

Which log-prob is returned (the contract's "sampling log-prob"): ``log_softmax(logits / T)`` of
the chosen token over the *full* vocabulary, i.e. the raw model distribution scaled by the
temperature, *not* renormalised after top-k / top-p filtering. That is the quantity a training
engine can recompute from logits alone (``hf_train`` with ``logits_temperature=T``), so the
train–inference correction compares like with like; at ``T = 1`` and without filtering it is
exactly the policy's log-prob. Greedy rows (``T <= 0``) report ``log_softmax(logits)`` (``T = 1``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence

import torch

from roll_core.strategies.base import SamplingParams

logger = logging.getLogger(__name__)

#: candidates gathered by ``topk`` before a top-p-only row falls back to a full sort
NUCLEUS_CANDIDATES = 256


def filter_kind(params: SamplingParams, vocab_size: int) -> tuple[str, int]:
    """How a row is sampled: ``("greedy"|"full"|"top_k"|"top_p", k)``."""
    if params.greedy:
        return ("greedy", 0)
    if params.top_k and 0 < params.top_k < vocab_size:
        return ("top_k", params.top_k)
    return ("top_p", 0) if params.top_p < 1.0 else ("full", 0)


def sample_next(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    uniforms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of ``logits [B, V]``; return ``(tokens [B], logprobs [B])``.

    ``uniforms [B]`` are U[0, 1) draws (one per row; the caller owns the RNG, which is how
    per-request seeds work). Rows may have different sampling params; rows sharing a filter
    kind are processed together.
    """
    logits = logits.float()
    batch, vocab = logits.shape
    device = logits.device
    temps = [p.temperature if not p.greedy else 1.0 for p in params]
    scaled = logits if all(t == 1.0 for t in temps) else logits / torch.tensor(temps, device=device)[:, None]
    # unnormalised probabilities exp(z - max): one pass serves sampling and the log-partition
    top = scaled.amax(dim=-1, keepdim=True)
    weights = (scaled - top).exp_()
    total = weights.sum(dim=-1, keepdim=True)
    log_z = (top + torch.log(total)).squeeze(1)
    uniforms = uniforms.to(device=device, dtype=torch.float32)
    tokens = torch.empty(batch, dtype=torch.long, device=device)

    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for row, p in enumerate(params):
        groups[filter_kind(p, vocab)].append(row)
    for (kind, k), rows in groups.items():
        idx = torch.tensor(rows, device=device)
        top_p = torch.tensor([params[r].top_p for r in rows], device=device)
        tokens[idx] = _SAMPLERS[kind](
            _Rows(scaled[idx], weights[idx], top[idx], total[idx], uniforms[idx], top_p, k)
        )
    logprobs = scaled.gather(1, tokens.unsqueeze(1)).squeeze(1) - log_z
    return tokens, logprobs


class _Rows:
    """The slices of one group of rows that the samplers need."""

    def __init__(self, scaled, weights, top, total, uniforms, top_p, k):
        self.scaled, self.weights, self.top, self.total = scaled, weights, top, total
        self.uniforms, self.top_p, self.k = uniforms, top_p, k


def _greedy(r: _Rows) -> torch.Tensor:
    return torch.argmax(r.scaled, dim=-1)


def _full(r: _Rows) -> torch.Tensor:
    return _inverse_cdf(r.weights, r.uniforms)


def _top_k(r: _Rows) -> torch.Tensor:
    """Top-k, then (HF / vLLM order) top-p over the renormalised k candidates."""
    values, index = torch.topk(r.scaled, r.k, dim=-1, sorted=True)
    probs = torch.softmax(values, dim=-1)
    if bool((r.top_p < 1.0).any()):
        probs = _nucleus(probs, r.top_p)
    return index.gather(1, _inverse_cdf(probs, r.uniforms).unsqueeze(1)).squeeze(1)


def _top_p(r: _Rows) -> torch.Tensor:
    """Nucleus sampling, exact, without sorting the vocabulary when the nucleus is small.

    The nucleus is the shortest descending prefix whose probability reaches ``top_p``; when the
    top ``NUCLEUS_CANDIDATES`` tokens already reach it, the nucleus lies inside them. Only rows
    where they do not (very flat distributions) sort the whole row.
    """
    k = min(NUCLEUS_CANDIDATES, r.scaled.shape[-1])
    values, index = torch.topk(r.scaled, k, dim=-1, sorted=True)
    probs = torch.exp(values - r.top) / r.total
    uncovered = probs.sum(dim=-1) < r.top_p
    if bool(uncovered.any()):
        rows = uncovered.nonzero().squeeze(1)
        full_values, full_index = torch.sort(r.scaled[rows], dim=-1, descending=True)
        full_probs = torch.exp(full_values - r.top[rows]) / r.total[rows]
        picked = full_index.gather(1, _inverse_cdf(_nucleus(full_probs, r.top_p[rows]),
                                                   r.uniforms[rows]).unsqueeze(1)).squeeze(1)
    tokens = index.gather(1, _inverse_cdf(_nucleus(probs, r.top_p), r.uniforms).unsqueeze(1)).squeeze(1)
    if bool(uncovered.any()):
        tokens[rows] = picked
    return tokens


def _nucleus(sorted_probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero every candidate after the shortest prefix reaching ``top_p`` (the first always stays)."""
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    return sorted_probs.masked_fill(mass_before >= top_p.unsqueeze(1), 0.0)


_SAMPLERS = {"greedy": _greedy, "full": _full, "top_k": _top_k, "top_p": _top_p}


def _inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Index drawn proportionally to non-negative ``weights [b, n]`` (zero weight: never drawn)."""
    cdf = torch.cumsum(weights, dim=-1)
    target = uniforms.unsqueeze(1) * cdf[:, -1:]
    pick = torch.searchsorted(cdf, target, right=True).squeeze(1)
    over = pick >= weights.shape[-1]
    if bool(over.any()):  # u * total rounded up to total: take the last token that has weight
        positions = torch.arange(weights.shape[-1], device=weights.device)
        last = torch.where(weights[over] > 0, positions, 0).amax(dim=-1)
        pick[over] = last
    return pick
