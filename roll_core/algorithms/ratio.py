"""Importance ratio of the current policy against pi_old (docs/algorithms.md §6.1).

pi_old is always the training engine's log-prob; inference log-probs only feed
:mod:`roll_core.algorithms.corrections`. Every ratio is 0 outside the mask and keeps gradients
through ``log_probs``. Selected by ``ratio_type``: ``token``, ``segment`` (one ratio per turn)
or ``seq`` (GSPO: one ratio per row).
"""

from __future__ import annotations

import torch
from torch import Tensor

from roll_core.algorithms.hparams import lookup
from roll_core.algorithms.masking import row_reduce, segment_reduce


def token_ratio(log_probs: Tensor, old_log_probs: Tensor, mask: Tensor) -> Tensor:
    return torch.exp(log_probs - old_log_probs) * mask


def segment_ratio(log_probs: Tensor, old_log_probs: Tensor, mask: Tensor) -> Tensor:
    """``exp`` of the masked-mean log-ratio of each turn, on every token of that turn."""
    return torch.exp(segment_reduce(log_probs - old_log_probs, mask)) * mask


def sequence_ratio(log_probs: Tensor, old_log_probs: Tensor, mask: Tensor) -> Tensor:
    """GSPO: ``exp`` of the masked-mean log-ratio of the row, on every token of the row."""
    return torch.exp(row_reduce(log_probs - old_log_probs, mask)) * mask


RATIOS = {"token": token_ratio, "segment": segment_ratio, "seq": sequence_ratio}


def importance_ratio(log_probs: Tensor, old_log_probs: Tensor, mask: Tensor, kind: str = "token") -> Tensor:
    return lookup(RATIOS, kind, "ratio_type")(log_probs, old_log_probs, mask)
