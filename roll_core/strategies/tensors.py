"""Batches, log-probs and weight files: what every train strategy does the same way.

Public for backend plugins (``deepspeed_train``, ``megatron_train``, a third party's): a batch is
validated, cut into micro-batches trimmed to their longest row, fed with position ids counted from
each row's first real token, and scored with label-aligned log-probs exactly like ``hf_train``
does, so log-probs of two backends agree on the same weights.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from roll_core.errors import RollError

#: the keys every training batch has (see :mod:`roll_core.strategies.base`)
REQUIRED_KEYS = ("input_ids", "attention_mask", "response_mask")


def validate_batch(batch: Mapping[str, Any]) -> None:
    missing = [k for k in REQUIRED_KEYS if k not in batch]
    if missing:
        raise RollError(f"training batch lacks {missing}; it needs {list(REQUIRED_KEYS)} (see strategies.base).")
    shape = tuple(batch["input_ids"].shape)
    if len(shape) != 2 or shape[1] < 2:
        raise RollError(f"input_ids must be [B, L] with L >= 2, got {list(shape)}.")
    for key in REQUIRED_KEYS[1:]:
        if tuple(batch[key].shape) != shape:
            raise RollError(f"{key} has shape {list(batch[key].shape)}, input_ids {list(shape)}.")


def micro_batches(batch: Mapping[str, Any], size: int, device: Any) -> Iterator[tuple[dict[str, Any], int, int]]:
    """Yield ``(micro_batch, rows, width)``: rows ``[i, i+size)``, trimmed to their longest row.

    Per-row entries are sliced: tensors with ``B`` rows (width ``L`` cut to ``width``, ``L-1`` to
    ``width-1``, moved to ``device``) and sequences of length ``B``; anything else passes through.
    """
    batch_size = batch["input_ids"].shape[0]
    for start in range(0, batch_size, size):
        yield select_rows(batch, slice(start, min(start + size, batch_size)), device)


def select_rows(batch: Mapping[str, Any], rows: slice | torch.Tensor, device: Any) -> tuple[dict[str, Any], int, int]:
    """``(micro_batch, rows, width)`` of the rows ``rows`` (a slice or an index tensor), trimmed to
    their longest row as :func:`micro_batches` describes."""
    batch_size, length = batch["input_ids"].shape
    mask = batch["attention_mask"][rows]
    used = mask.bool().any(dim=0).nonzero()
    width = max(2, int(used.max()) + 1 if len(used) else 2)
    picked = rows if isinstance(rows, slice) else rows.tolist()
    mb: dict[str, Any] = {}
    for key, value in batch.items():
        if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == batch_size:
            value = value[rows]
            if value.dim() >= 2 and value.shape[1] in (length, length - 1):
                value = value[:, : width - (length - value.shape[1])]
            mb[key] = value.to(device)
        elif isinstance(value, (list, tuple)) and len(value) == batch_size:
            mb[key] = value[picked] if isinstance(picked, slice) else type(value)(value[i] for i in picked)
        else:
            mb[key] = value
    return mb, mask.shape[0], width


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counted from each row's first real token (right or left padding alike)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_(min=0)


def mask_or_none(mask: torch.Tensor) -> torch.Tensor | None:
    """No mask when nothing is padded: lets attention take its causal fast path."""
    return None if bool(mask.bool().all()) else mask


def logits_to_keep(response_mask: torch.Tensor) -> int:
    """How many trailing positions need logits: from the one before the micro-batch's first
    response token to the end (transformers' ``logits_to_keep``). Earlier positions only predict
    prompt tokens, which every per-token quantity masks out."""
    length = response_mask.shape[1]
    rows = response_mask.bool().any(dim=0).nonzero()
    first = int(rows[0]) if len(rows) else length - 1
    return max(2, length - max(first - 1, 0))


def token_log_probs(logits: torch.Tensor, input_ids: torch.Tensor, response_mask: torch.Tensor,
                    temperature: float = 1.0, with_entropy: bool = False):
    """Label-aligned ``[B, L-1]`` log-probs (and entropy) of ``input_ids[:, 1:]``, masked by
    ``response_mask[:, 1:]``.

    ``logits`` may cover only the last ``K <= L`` positions (a forward with ``logits_to_keep=K``,
    see :func:`logits_to_keep`); the positions before them get 0, as masked positions do.
    """
    length = input_ids.shape[1]
    offset = length - logits.shape[1]  # first position the logits cover
    labels = input_ids[:, offset + 1:]
    log_probs, entropy = label_log_probs(logits[:, :-1], labels, temperature, with_entropy)
    mask = response_mask[:, offset + 1:].to(log_probs.dtype)
    log_probs = log_probs * mask
    entropy = entropy * mask if entropy is not None else None
    if offset:
        pad = (offset, 0)
        log_probs = torch.nn.functional.pad(log_probs, pad)
        entropy = torch.nn.functional.pad(entropy, pad) if entropy is not None else None
    return log_probs, entropy


def label_log_probs(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0,
                    with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log softmax(logits / T)[label]`` (and the entropy) in float32, unmasked: ``logits [..., V]``,
    ``labels [...]``. The one formula of the padded and the packed paths."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    lse = torch.logsumexp(z, dim=-1)
    log_probs = z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(-1) if with_entropy else None
    return log_probs, entropy


def read_safetensors_dir(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files in ``path`` (sharded checkpoints too)."""
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    files = [f for f in files if not os.path.basename(f).startswith("value_head")]
    if not files:
        raise RollError(f"{path} holds no .safetensors weights; is it a checkpoint written by save_checkpoint?")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    return state
