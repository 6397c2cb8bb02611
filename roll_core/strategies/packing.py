"""Padding-free training: micro-batches by a token budget, rows packed into one sequence.

RL batches are long-tailed: padded to the longest row, most of a micro-batch is padding. With
packing on, a micro-batch's rows are concatenated into one ``[1, T]`` sequence whose position ids
restart at 0 on every row; ``cu_seq_lens_q`` (the rows' cumulative lengths) tells attention where
rows end, so no row attends to another (flash-attention's varlen kernel where it runs,
:data:`~roll_core.strategies.attention.SEGMENT_SDPA` for sdpa, transformers' block-diagonal mask
for the other implementations). The model's per-position outputs are scattered back to the padded
``[b, L-1]`` label-aligned layout, so loss functions, their global normalisers and every
per-token quantity are exactly those of the padded path; only the rounding differs (the tests pin
log-probs, entropies, values, losses and gradients against the padded path).

Public for backend plugins (``deepspeed_train``, a third party's), like :mod:`.tensors`.

* **Micro-batches** hold at most ``max_tokens`` real tokens (ROLL's
  ``sequence_packing_args.max_packed_sequence_length_train`` / ``_forward``; unset: as many
  tokens as a padded micro-batch of ``per_device_train_batch_size`` rows of the batch's width
  would hold, so peak memory stays that of the padded path). ``algorithm: none`` fills
  micro-batches in row order; ``load_balance`` spreads rows over the fewest micro-batches with
  near-equal token counts. ``min_num_micro_batches_*`` splits further. A row longer than the
  budget is a micro-batch of its own.
* **Without packing**, ROLL's dynamic batching (``use_dynamic_batching_in_train`` with
  ``max_tokens_per_microbatch_in_train``, rounded to ``sequence_length_round_in_train``) forms
  padded micro-batches of rows sorted by length under a padded-token budget; otherwise
  micro-batches are ``per_device_train_batch_size`` rows, as before.
* **Exactness** is checked, not assumed: :func:`isolates_rows` runs the model on two packed
  probes that share their last row and differ before it; packing is used only where that row's
  outputs are the same (a model whose layers mix positions other than through attention, e.g. a
  state-space hybrid, or a custom model that ignores the position ids, fails it). The default
  (``use_sequence_packing`` unset) falls back to padding with a warning; ``true`` makes it an
  error; ``false`` always pads.
* Rows whose attention mask has holes cannot be packed exactly (their tokens would become
  neighbours): such a micro-batch runs padded.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from roll_core.errors import ConfigError
from roll_core.strategies.hf_common import cfg_get

logger = logging.getLogger(__name__)

#: ``sequence_packing_args.algorithm`` values
ALGORITHMS = ("none", "load_balance")


@dataclasses.dataclass(frozen=True)
class PackingSettings:
    """How a train strategy forms micro-batches (ROLL's field names, read by :meth:`from_worker_config`).

    ``enabled``: ``None`` packs where the model is exact (the default), ``True`` requires it,
    ``False`` pads. ``max_tokens_*``: the packed budget (``None``: see the module docstring).
    ``dynamic_tokens_*`` / ``dynamic_round_*``: ROLL's dynamic batching of the padded path (``None``:
    off).
    """

    enabled: bool | None = None
    algorithm: str = "none"
    max_tokens_train: int | None = None
    max_tokens_forward: int | None = None
    min_micro_batches_train: int = 1
    min_micro_batches_forward: int = 1
    dynamic_tokens_train: int | None = None
    dynamic_tokens_forward: int | None = None
    dynamic_round_train: int = 1
    dynamic_round_forward: int = 1

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"sequence_packing_args.algorithm: unknown {self.algorithm!r}; use one of "
                              f"{', '.join(ALGORITHMS)}.")
        for name in ("max_tokens_train", "max_tokens_forward", "dynamic_tokens_train", "dynamic_tokens_forward"):
            value = getattr(self, name)
            if value is not None and int(value) < 1:
                raise ConfigError(f"{name} must be >= 1 tokens, got {value}.")

    @classmethod
    def from_worker_config(cls, worker_config: Any) -> PackingSettings:
        """``use_sequence_packing``, ``sequence_packing_args.*`` and the dynamic-batching fields."""
        args = "sequence_packing_args."

        def dynamic(on: str, budget_field: str) -> int | None:
            if not cfg_get(worker_config, on, False):
                return None
            budget = cfg_get(worker_config, budget_field)
            if not budget or int(budget) < 1:
                raise ConfigError(f"{on} needs {budget_field} >= 1 (got {budget!r}): the token budget of one "
                                  "micro-batch.")
            return int(budget)

        return cls(
            enabled=cfg_get(worker_config, "use_sequence_packing"),
            algorithm=str(cfg_get(worker_config, args + "algorithm", "none")),
            max_tokens_train=cfg_get(worker_config, args + "max_packed_sequence_length_train"),
            max_tokens_forward=cfg_get(worker_config, args + "max_packed_sequence_length_forward"),
            min_micro_batches_train=int(cfg_get(worker_config, args + "min_num_micro_batches_train", 1)),
            min_micro_batches_forward=int(cfg_get(worker_config, args + "min_num_micro_batches_forward", 1)),
            dynamic_tokens_train=dynamic("use_dynamic_batching_in_train", "max_tokens_per_microbatch_in_train"),
            dynamic_tokens_forward=dynamic("use_dynamic_batching_in_infer", "max_tokens_per_microbatch_in_infer"),
            dynamic_round_train=int(cfg_get(worker_config, "sequence_length_round_in_train", 1)),
            dynamic_round_forward=int(cfg_get(worker_config, "sequence_length_round_in_infer", 1)),
        )


# -- planning -------------------------------------------------------------------------------
def plan_micro_batches(lengths: Sequence[int], budget: int, *, algorithm: str = "none", min_count: int = 1,
                       padded_round: int | None = None) -> list[list[int]]:
    """Row indices of each micro-batch.

    Packed (``padded_round`` None): a micro-batch costs the sum of its rows' lengths; ``none`` fills
    in row order, ``load_balance`` assigns rows longest first to the emptiest of ``k`` micro-batches,
    ``k`` the fewest that fit. Padded (dynamic batching): rows sorted by length, a micro-batch
    costs rows x its longest row rounded up to ``padded_round``. Micro-batches are then split in
    halves, largest first, until there are ``min_count`` (at most one per row).
    """
    n = len(lengths)
    if n == 0:
        return []
    budget = max(1, int(budget))
    if padded_round is not None:
        step = max(1, int(padded_round))
        order = sorted(range(n), key=lambda i: lengths[i])
        groups = _greedy(order, budget, lambda rows: len(rows) * -(-max(lengths[i] for i in rows) // step) * step)
    elif algorithm == "load_balance":
        groups = _balanced(lengths, budget, max(1, math.ceil(sum(lengths) / budget)))
    else:
        groups = _greedy(list(range(n)), budget, lambda rows: sum(lengths[i] for i in rows))

    return split_to(groups, min_count, lambda rows: sum(lengths[i] for i in rows))


def split_to(groups: list[list[int]], count: int, cost: Callable[[list[int]], int] = len) -> list[list[int]]:
    """Halve the costliest group of several rows until there are ``count`` groups (or one per row)."""
    groups = list(groups)
    while len(groups) < count and any(len(g) > 1 for g in groups):
        big = max((g for g in groups if len(g) > 1), key=cost)
        at = groups.index(big)
        groups[at : at + 1] = [big[: len(big) // 2], big[len(big) // 2 :]]
    return groups


def _greedy(order: list[int], budget: int, cost: Callable[[list[int]], int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i in order:
        if groups and cost(groups[-1] + [i]) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _balanced(lengths: Sequence[int], budget: int, count: int) -> list[list[int]]:
    """Longest-first onto the emptiest bin; one more bin whenever a bin of several rows overflows."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    while True:
        bins: list[list[int]] = [[] for _ in range(min(count, len(lengths)))]
        loads = [0] * len(bins)
        for i in order:
            j = loads.index(min(loads))
            bins[j].append(i)
            loads[j] += lengths[i]
        if count >= len(lengths) or all(load <= budget or len(b) == 1 for b, load in zip(bins, loads)):
            return [sorted(b) for b in bins if b]
        count += 1


# -- packing --------------------------------------------------------------------------------
class PackedRows(NamedTuple):
    """One micro-batch packed into ``[1, T]``, and where its outputs go in the padded layout.

    ``src[k]`` is the packed position whose output is the label-aligned value at
    ``[rows[k], cols[k]]`` of the ``[b, width-1]`` layout (every real token but each row's last);
    ``target[k]`` is the token it predicts and ``weight[k]`` its ``response_mask`` value.
    """

    input_ids: Any
    position_ids: Any
    cu_seqlens: Any
    max_length: int
    src: Any
    rows: Any
    cols: Any
    target: Any
    weight: Any
    shape: tuple[int, int]

    def forward_kwargs(self) -> dict[str, Any]:
        """What the model's forward takes: ids, restarting position ids, and the rows' bounds under
        flash-attention's keyword names (which transformers passes down to the attention function)."""
        return {"input_ids": self.input_ids, "position_ids": self.position_ids,
                "cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                "max_length_q": self.max_length, "max_length_k": self.max_length}

    def response_only(self) -> PackedRows:
        """Only the outputs that predict a response token (what log-probs need). Never empty: a
        micro-batch without response tokens keeps one output, at weight 0, so the loss keeps a graph."""
        keep = self.weight.bool()
        if not bool(keep.any()):
            keep[:1] = True
        return self._replace(src=self.src[keep], rows=self.rows[keep], cols=self.cols[keep],
                             target=self.target[keep], weight=self.weight[keep])

    def unpack(self, values: Any) -> Any:
        """``values [K]`` (one per kept output) -> ``[b, width-1]``, zeros elsewhere, times the mask."""
        import torch

        out = torch.zeros(self.shape, dtype=values.dtype, device=values.device)
        return out.index_put((self.rows, self.cols), values * self.weight.to(values.dtype))


def pack_rows(mb: Mapping[str, Any]) -> PackedRows | None:
    """Pack a (trimmed) micro-batch; ``None`` when some row's attention mask has holes."""
    import torch

    mask = mb["attention_mask"].bool()
    b, width = mask.shape
    lengths = mask.sum(1)
    cols_all = torch.arange(width, device=mask.device).expand(b, width)
    first = torch.where(mask, cols_all, width).min(1).values
    last = torch.where(mask, cols_all, -1).max(1).values
    if bool(((last - first + 1 != lengths) & (lengths > 0)).any()):
        return None
    input_ids = mb["input_ids"][mask]
    cols = cols_all[mask]
    rows = torch.arange(b, device=mask.device).unsqueeze(1).expand(b, width)[mask]
    position_ids = cols - first[rows]
    ends = lengths.cumsum(0)
    not_last = torch.ones(len(input_ids), dtype=torch.bool, device=mask.device)
    not_last[ends[lengths > 0] - 1] = False
    src = torch.arange(len(input_ids), device=mask.device)[not_last]
    rows, cols = rows[not_last], cols[not_last]
    return PackedRows(
        input_ids=input_ids.unsqueeze(0), position_ids=position_ids.unsqueeze(0),
        cu_seqlens=torch.cat([ends.new_zeros(1), ends]).to(torch.int32), max_length=int(lengths.max()) if b else 0,
        src=src, rows=rows, cols=cols, target=input_ids[src + 1], weight=mb["response_mask"][rows, cols + 1],
        shape=(b, width - 1),
    )


# -- the micro-batches of one call ------------------------------------------------------------
class MicroBatch(NamedTuple):
    """A micro-batch: its rows' entries (``mb``, trimmed to ``width``), which batch rows they are
    (``index``), and the packed layout (``None``: run padded)."""

    mb: dict[str, Any]
    index: Any
    width: int
    packed: PackedRows | None


def micro_batch_plan(batch: Mapping[str, Any], settings: PackingSettings, *, packing: bool, rows: int,
                     train: bool, device: Any, min_count: int = 1) -> list[MicroBatch]:
    """The micro-batches of one ``train_step`` (``train``) or forward-only pass over ``batch``.

    ``packing``: whether this strategy packs (its model passed :func:`isolates_rows`); ``rows``:
    the row count of a padded micro-batch (``per_device_train_batch_size`` or the forward one).
    """
    import torch

    from roll_core.strategies.tensors import select_rows

    mask = batch["attention_mask"]
    lengths = [int(v) for v in mask.sum(1).tolist()]
    used = mask.bool().any(dim=0).nonzero()
    width = int(used.max()) + 1 if len(used) else 2
    if packing:
        budget = (settings.max_tokens_train if train else settings.max_tokens_forward) or rows * width
        least = settings.min_micro_batches_train if train else settings.min_micro_batches_forward
        groups = plan_micro_batches(lengths, budget, algorithm=settings.algorithm, min_count=max(least, min_count))
    else:
        dynamic = settings.dynamic_tokens_train if train else settings.dynamic_tokens_forward
        if dynamic:
            step = settings.dynamic_round_train if train else settings.dynamic_round_forward
            groups = plan_micro_batches(lengths, dynamic, min_count=min_count, padded_round=step)
        else:
            groups = [list(range(i, min(i + rows, len(lengths)))) for i in range(0, len(lengths), rows)]
            groups = split_to(groups, min_count)  # lockstep with other ranks
    out = []
    for group in groups:
        index = torch.tensor(group, dtype=torch.long)
        contiguous = group == list(range(group[0], group[0] + len(group)))  # a slice: views, not copies
        mb, _, w = select_rows(batch, slice(group[0], group[0] + len(group)) if contiguous else index, device)
        out.append(MicroBatch(mb, index, w, pack_rows(mb) if packing else None))
    return out


# -- is packing exact for this model? --------------------------------------------------------
def isolates_rows(forward: Callable[[PackedRows], Any], device: Any) -> bool:
    """Whether ``forward(packed) -> [1, T, ...]`` keeps packed rows apart.

    Two probes share their last row and differ in the row before it; with rows kept apart the
    shared row's outputs are the same numbers in both (same shapes, same kernels), while a model
    that lets the rows mix changes them by far more than the tolerance.
    """
    import torch

    def probe(first: list[int]) -> Any:
        ids = torch.tensor([first, [7, 11, 13, 17, 19, 23, 29, 31]], device=device)
        mask = torch.ones_like(ids)
        with torch.no_grad():
            return forward(pack_rows({"input_ids": ids, "attention_mask": mask, "response_mask": mask}))[0, 8:].float()

    a, b = probe([3, 5, 8, 13, 21, 34, 55, 89]), probe([90, 80, 70, 60, 50, 40, 30, 20])
    scale = float(a.abs().max()) + 1e-6
    return bool((a - b).abs().max() <= 1e-3 * scale)


def resolve_packing(settings: PackingSettings, forward: Callable[[PackedRows], Any], device: Any,
                    owner: str) -> bool:
    """Whether ``owner`` packs: ``enabled`` False -> no; otherwise the probe decides, and a model
    that fails it is an error when packing was required, a warning (padding) when it was the default."""
    if settings.enabled is False:
        return False
    if isolates_rows(forward, device):
        return True
    why = (f"{owner}: this model mixes packed rows (its outputs for one row change with the row packed "
           "before it: a layer other than attention sees the whole sequence, or the model ignores position ids)")
    if settings.enabled:
        raise ConfigError(f"{why}; set use_sequence_packing: false to train it on padded rows.")
    logger.warning("%s; training on padded rows instead (set use_sequence_packing: false to silence this).", why)
    return False


def packed_attention(attn: str) -> str:
    """The attention implementation a packing strategy loads: roll's per-row sdpa for ``sdpa``
    (:data:`~roll_core.strategies.attention.SEGMENT_SDPA`); the others pack as they are."""
    if attn == "sdpa":
        from roll_core.strategies.attention import register_segment_sdpa

        return register_segment_sdpa()
    return attn
