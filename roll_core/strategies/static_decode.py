"""Decode steps for ``hf_infer`` on a pre-allocated (static) KV cache, captured as CUDA graphs on CUDA.

Why: with a growing cache every decode step allocates and concatenates each layer's K/V, and on
a GPU a step of a small model is mostly Python and kernel launches (docs/gpu.md: ~85 ms a step
for 64 rows of a 0.5B model, the GPU mostly idle). Here a batch's cache is one tensor per layer
of ``bucket rows x max length``, allocated once per *bucket* and reused by every batch that fits
it; a decode step writes one position in place. With fixed shapes and addresses the step can be
recorded once as a CUDA graph and replayed (one launch instead of hundreds).

Buckets: rows round up to a power of two (at most ``max_batch_size``), lengths to a multiple of
:data:`LENGTH_QUANTUM`; a partly filled bucket carries filler rows (pad token, one attended
position) whose outputs are ignored. As rows finish, the live ones move to the smallest bucket
that holds them (a row copy), so a tail of long responses runs on a small graph.

The cache is duck-typed for transformers' attention layers (they call only ``update``), and the
step passes a ready 4D mask, so transformers builds no mask (its builders read tensor values,
which a graph cannot). All rows of a left-padded batch write the same position, so one position
tensor drives every layer's in-place write. Models whose cache is not plain per-layer K/V, or whose
attention takes no 4D mask of the kinds in :data:`MASK_KINDS`, decode on the growing cache
(``hf_infer`` logs why).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import torch

logger = logging.getLogger(__name__)

#: cache lengths round up to a multiple of this (fewer distinct graphs; the masked tail costs little)
LENGTH_QUANTUM = 128
#: captured buckets kept per engine (least recently used dropped first; each holds its own cache)
MAX_BUCKETS = 4
#: how a decode step's 4D mask is written for an attention implementation: boolean (True = attend)
#: for sdpa kernels, additive (0 / dtype minimum) for the eager softmax
MASK_KINDS = {"sdpa": "bool", "roll_sdpa_gqa": "bool", "eager": "additive"}


def row_bucket(n: int, max_rows: int) -> int:
    """The bucket of ``n`` rows: the next power of two, at most ``max_rows`` (and at least ``n``)."""
    bucket = 1
    while bucket < n:
        bucket *= 2
    return max(n, min(bucket, max_rows))


def length_bucket(n: int) -> int:
    """The cache length holding ``n`` positions: ``n`` rounded up to :data:`LENGTH_QUANTUM`."""
    return -(-n // LENGTH_QUANTUM) * LENGTH_QUANTUM


def static_unsupported(model: Any, prefill_cache: Any) -> str | None:
    """Why ``model`` cannot decode on a static cache (``None``: it can); ``prefill_cache`` is its
    prefill's ``DynamicCache``, whose layer types say whether every layer is plain K/V."""
    from transformers.cache_utils import DynamicLayer

    attn = getattr(model.config, "_attn_implementation", None)
    if attn not in MASK_KINDS:
        return f"attention {attn!r} takes no ready 4D mask (static decode supports {', '.join(MASK_KINDS)})"
    kinds = {type(layer).__name__ for layer in prefill_cache.layers if type(layer) is not DynamicLayer}
    if kinds:
        return f"the model's cache has {', '.join(sorted(kinds))} layers (sliding-window or recurrent), not plain K/V"
    return None


class StaticKV:
    """Per-layer ``[rows, kv_heads, length, head_dim]`` K/V written in place at ``write_pos``.

    The interface transformers' attention layers use (``update``); all rows share the position.
    """

    is_compileable = True

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], write_pos: torch.Tensor):
        self.keys, self.values, self.write_pos = keys, values, write_pos

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               cache_kwargs: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx].index_copy_(2, self.write_pos, key_states)
        self.values[layer_idx].index_copy_(2, self.write_pos, value_states)
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.keys[layer_idx].shape[2])


class Bucket:
    """One bucket's buffers (cache, inputs, mask, logits) and, on CUDA, its captured decode step."""

    def __init__(self, model: Any, rows: int, length: int, like: list[tuple[torch.Tensor, torch.Tensor]],
                 pad_id: int):
        device, dtype = model.device, like[0][0].dtype
        self.model, self.rows, self.length, self.pad_id = model, rows, length, pad_id
        self.cache = StaticKV([k.new_zeros((rows, k.shape[1], length, k.shape[3])) for k, _ in like],
                              [v.new_zeros((rows, v.shape[1], length, v.shape[3])) for _, v in like],
                              torch.zeros(1, dtype=torch.long, device=device))
        self.ids = torch.full((rows, 1), pad_id, dtype=torch.long, device=device)
        self.pos = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.attend = torch.zeros((rows, 1, 1, length), dtype=torch.bool, device=device)
        kind = MASK_KINDS[model.config._attn_implementation]
        self.mask = self.attend if kind == "bool" else torch.zeros((rows, 1, 1, length), dtype=dtype, device=device)
        self._additive = kind == "additive"
        self._floor = torch.finfo(dtype).min if self._additive else 0.0
        self.logits: torch.Tensor | None = None
        self.graph: Any = None

    def reset(self) -> None:
        """Nothing attended but position 0 (filler rows must attend somewhere: no NaN from an empty softmax)."""
        self.attend.zero_()
        self.attend[..., 0] = True
        self.ids.fill_(self.pad_id)
        self.pos.zero_()

    def forward(self) -> torch.Tensor:
        if self._additive:
            self.mask.copy_(torch.where(self.attend, 0.0, self._floor))
        return self.model(input_ids=self.ids, attention_mask=self.mask, position_ids=self.pos,
                          past_key_values=self.cache, use_cache=True).logits[:, -1]

    def capture(self) -> None:
        """Record :meth:`forward` as a CUDA graph (warm-up on a side stream first, as torch requires).

        The warm-up and the capture write K/V at the current ``write_pos``; callers capture before the
        prefill fills the cache, so nothing a batch reads is touched."""
        self.reset()
        self.cache.write_pos.fill_(self.length - 1)
        stream = torch.cuda.Stream(device=self.ids.device)
        stream.wait_stream(torch.cuda.current_stream(self.ids.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward()
        torch.cuda.current_stream(self.ids.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.logits = self.forward()
        self.graph = graph

    def step(self) -> torch.Tensor:
        if self.graph is not None:
            self.graph.replay()
            return self.logits  # type: ignore[return-value]
        return self.forward()


class StaticDecoder:
    """The buckets of one engine (see the module docstring); :meth:`start` begins a batch's decode."""

    def __init__(self, model: Any, max_rows: int, pad_id: int, capture: bool):
        self.model, self.max_rows, self.pad_id = model, max_rows, pad_id
        self.capture = capture and model.device.type == "cuda"
        self.buckets: OrderedDict[tuple[int, int], Bucket] = OrderedDict()
        #: why capture was given up (logged once); then every bucket runs its step eagerly
        self.capture_failed: str | None = None

    def clear(self) -> None:
        """Drop every bucket (their graphs point at the model's current weights: call before they move)."""
        self.buckets.clear()

    def bucket(self, rows: int, length: int, like: Any) -> Bucket:
        key = (row_bucket(rows, self.max_rows), length)
        if key in self.buckets:
            self.buckets.move_to_end(key)
            return self.buckets[key]
        while len(self.buckets) >= MAX_BUCKETS:
            self.buckets.popitem(last=False)
        bucket = Bucket(self.model, key[0], length, like, self.pad_id)
        if self.capture and self.capture_failed is None:
            try:
                bucket.capture()
            except Exception as exc:  # noqa: BLE001  # any capture failure: the same step, uncaptured
                self.capture_failed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                logger.warning("hf_infer: decode steps not captured as CUDA graphs (%s); running them eagerly "
                               "on the static cache", self.capture_failed)
                bucket.graph = None
        self.buckets[key] = bucket
        return bucket

    def start(self, prefill_cache: Any, attn: torch.Tensor, next_pos: torch.Tensor, steps: int) -> StaticRun:
        """A batch's decode from its prefill (left-padded ``attn`` ``[n, W]``, ``next_pos`` ``[n, 1]``)."""
        n, width = attn.shape
        # each layer's K and V as empty tensors of the right dtype, device and head shape
        like = [(layer.keys.new_empty((0, layer.keys.shape[1], 0, layer.keys.shape[3])),
                 layer.values.new_empty((0, layer.values.shape[1], 0, layer.values.shape[3])))
                for layer in prefill_cache.layers]
        bucket = self.bucket(n, length_bucket(width + steps), like)
        bucket.reset()
        for layer, keys, values in zip(prefill_cache.layers, bucket.cache.keys, bucket.cache.values):
            keys[:n, :, :width] = layer.keys
            values[:n, :, :width] = layer.values
        bucket.attend[:n, 0, 0, :width] = attn.bool()
        bucket.pos[:n] = next_pos
        return StaticRun(self, bucket, n, width, like)


class StaticRun:
    """One batch's decode on a bucket: :meth:`step` feeds one token per row, :meth:`select` keeps rows."""

    def __init__(self, decoder: StaticDecoder, bucket: Bucket, n: int, column: int, like: Any):
        self.decoder, self.bucket, self.n, self.column, self.like = decoder, bucket, n, column, like

    def should_compact(self, n_live: int) -> bool:
        """Move when the live rows fit a smaller bucket."""
        return row_bucket(max(n_live, 1), self.decoder.max_rows) < self.bucket.rows

    def select(self, keep: torch.Tensor) -> None:
        """Keep the batch positions ``keep`` (in order): copied into the smallest bucket holding them."""
        old, k = self.bucket, len(keep)
        new = self.decoder.bucket(k, old.length, self.like)
        index = keep.to(old.ids.device)
        new.reset()
        for src, dst in zip(old.cache.keys + old.cache.values, new.cache.keys + new.cache.values):
            dst[:k] = src.index_select(0, index)
        new.attend[:k] = old.attend.index_select(0, index)
        new.pos[:k] = old.pos.index_select(0, index)
        self.bucket, self.n = new, k

    def step(self, feed: torch.Tensor) -> torch.Tensor:
        """Logits ``[n, vocab]`` after feeding ``feed`` (``[n, 1]``, on the model's device)."""
        b = self.bucket
        b.ids[: self.n] = feed
        b.attend[..., self.column] = True
        b.cache.write_pos.fill_(self.column)
        logits = b.step()
        b.pos += 1
        self.column += 1
        return logits[: self.n]
