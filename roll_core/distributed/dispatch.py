"""Batches over data-parallel ranks: split balanced by tokens, results gathered in row order.

The driver ships a step's batch once (through Ray's object store) and tells each rank which rows
are its own. Rows are assigned greedily, longest first, to the rank with the fewest tokens so far,
so ranks finish together; every rank gets the same number of rows, hence the same number of
micro-batches, which collective backends (DeepSpeed ZeRO-3, Megatron) need. Inside a rank, rows
keep the order they had in the batch, so one rank sees exactly what a single-process run sees.

Training is planned here too: ``ppo_epochs`` passes, each shuffled with a seed derived from the
step (a resumed run shuffles identically), cut into global mini-batches of ``mini_batch_size`` x
ranks rows (one optimiser step each), each split over the ranks. A batch whose rows do not split
evenly is made to by ``batch_adjust_mode`` (ROLL's options: copy rows, delete rows, or resample),
or refused with a message naming the numbers.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from roll_core.errors import ConfigError

#: metrics a train strategy already reports for the whole step (identical on every rank)
STEP_METRICS = ("loss", "grad_norm", "lr", "skipped", "optimizer_steps")


def split_rows(rows: Sequence[int], lengths: Sequence[int], parts: int) -> list[list[int]]:
    """``rows`` (indices into the batch) in ``parts`` equal shares balanced by ``lengths[row]``.

    Each share keeps the order its rows had in ``rows``. ``len(rows)`` must divide by ``parts``.
    """
    rows = list(rows)
    if len(rows) % parts:
        raise ConfigError(f"{len(rows)} rows cannot be split equally over {parts} data-parallel ranks; "
                          "set batch_adjust_mode (copy, delete, random_sample) or a batch size divisible by the ranks.")
    if parts == 1:
        return [rows]
    cap = len(rows) // parts
    position = {row: i for i, row in enumerate(rows)}
    shares: list[list[int]] = [[] for _ in range(parts)]
    loads = [0] * parts
    for row in sorted(rows, key=lambda r: (-int(lengths[r]), position[r])):
        part = min((p for p in range(parts) if len(shares[p]) < cap), key=lambda p: (loads[p], p))
        shares[part].append(row)
        loads[part] += int(lengths[row])
    return [sorted(share, key=position.__getitem__) for share in shares]


def forward_shares(lengths: Sequence[int], parts: int) -> list[list[int]]:
    """Rows for a forward-only pass: equal shares, the last row repeated to fill them (its result
    is written back once; every rank runs the same number of micro-batches)."""
    n = len(lengths)
    padded = list(range(n)) + [n - 1] * (-n % parts)
    return split_rows(padded, list(lengths) + [lengths[-1]] * (-n % parts), parts) if parts > 1 else [padded]


def adjust_rows(n: int, parts: int, mode: str, seed: int) -> list[int]:
    """Row indices (``n`` rows in) whose count divides by ``parts``, by ROLL's ``batch_adjust_mode``.

    ``copy`` repeats rows chosen at random, ``delete`` drops rows chosen at random, ``auto`` copies
    when fewer than half a share is missing and deletes otherwise, ``random_sample`` draws the
    nearest multiple of ``parts`` rows with replacement. Seeded by the step.
    """
    missing = -n % parts
    if not missing:
        return list(range(n))
    rng = random.Random(seed)
    if mode == "auto":  # whichever changes fewer rows
        mode = "copy" if missing <= n % parts or n < parts else "delete"
    if mode == "copy" or (mode == "delete" and n < parts):  # deleting would leave nothing
        extra = rng.sample(range(n), missing) if missing <= n else [rng.randrange(n) for _ in range(missing)]
        return list(range(n)) + extra
    if mode == "delete":
        dropped = set(rng.sample(range(n), n % parts))
        return [i for i in range(n) if i not in dropped]
    if mode == "random_sample":
        target = round(n / parts) * parts or parts
        return sorted(rng.choices(range(n), k=target))
    raise ConfigError(f"batch_adjust_mode {mode!r} is not one of copy, delete, auto, random_sample.")


def plan_training(lengths: Sequence[int], *, parts: int, mini_batch_size: int, epochs: int,
                  shuffle_seed: int) -> list[list[list[int]]]:
    """Per rank, its mini-batches (row indices) in optimiser-step order; every rank the same number.

    ``mini_batch_size`` is per rank (the strategy's ``mini_batch_size``; 0: the whole batch in one
    step). With one rank this is exactly the single-process schedule: the same permutations, the
    same mini-batches, the same row order.
    """
    import torch

    size = len(lengths)
    mini = mini_batch_size * parts if mini_batch_size else size
    plans: list[list[list[int]]] = [[] for _ in range(parts)]
    for epoch in range(epochs):
        order = list(range(size))
        if epochs > 1 or mini < size:  # seeded, so a resumed run shuffles identically
            gen = torch.Generator().manual_seed(int(shuffle_seed) * 1000 + epoch)
            order = torch.randperm(size, generator=gen).tolist()
        for start in range(0, size, mini):
            for rank, share in enumerate(split_rows(order[start:start + mini], lengths, parts)):
                plans[rank].append(share)
    return plans


def reduce_metrics(per_rank: Sequence[Mapping[str, float]], weights: Sequence[float]) -> dict[str, float]:
    """One dict from the ranks': step-wide values (:data:`STEP_METRICS`) from rank 0, the rest
    averaged with ``weights`` (each rank's rows)."""
    total = float(sum(weights)) or 1.0
    out: dict[str, float] = {}
    for key in per_rank[0]:
        if key.rsplit("/", 1)[-1] in STEP_METRICS:
            out[key] = float(per_rank[0][key])
        else:
            values = [(float(m[key]), w) for m, w in zip(per_rank, weights, strict=True) if key in m]
            out[key] = sum(v * w for v, w in values) / (sum(w for _, w in values) or total)
    return out


def token_lengths(batch: Mapping[str, Any]) -> list[int]:
    """Tokens per row (``attention_mask`` sums): what a rank's work grows with."""
    return [int(x) for x in batch["attention_mask"].sum(-1).tolist()]


def take_rows(batch: dict[str, Any], rows: Any, size: int) -> dict[str, Any]:
    """The rows ``rows`` (a LongTensor of indices) of every per-row entry of ``batch`` (``size`` rows)."""
    import torch

    out: dict[str, Any] = {}
    index = rows.tolist()
    for key, value in batch.items():
        if torch.is_tensor(value) and value.dim() >= 1 and value.shape[0] == size:
            out[key] = value.index_select(0, rows)
        elif isinstance(value, (list, tuple)) and len(value) == size:
            out[key] = [value[i] for i in index]
        else:
            out[key] = value
    return out
