"""``hf_infer``: batched generation with a KV cache, in pure torch + transformers (CPU or GPU).

Why a custom decode loop rather than ``model.generate``: the rollout engine needs, per request,
its own sampling params, stop tokens and stop strings, the exact sampling log-prob of every
token, and abort between steps; and on CPU the sampler, not the model, is the bottleneck of
``generate`` (see :mod:`roll_core.strategies.sampling`).

How a batch runs: prompts of different lengths are left-padded into one batch, with an
``attention_mask`` and ``position_ids`` counted from each prompt's first real token, so every
request sees exactly the positions it would see alone. The prefill runs in buckets of similar
prompt length, each padded only to its own longest, and joins their caches into one
``DynamicCache`` (a batch of mixed lengths costs about its real tokens, not rows x longest); then
each decode step feeds one token per row. Finished rows stay in the batch (fed a pad
token, their samples ignored) until a quarter of the batch has finished; then the cache and the
masks are compacted to the live rows. Requests are sorted by prompt length and cut into batches
of at most ``max_batch_size``, which keeps padding low.

Decode cache (``decode_cache``): ``dynamic`` grows each layer's K/V by one position a step (a
concatenation per layer and step); ``static`` copies the prefill into a pre-allocated cache of a
fixed batch bucket and writes each step in place, and on CUDA replays each bucket's decode step as
a captured CUDA graph (:mod:`roll_core.strategies.static_decode`). Outputs are the same (greedy
tokens equal, log-probs to float rounding). ``auto`` picks per device from :data:`DECODE_CACHE_DEFAULT`.

Log-probs: see :mod:`roll_core.strategies.sampling` (``log_softmax(logits / T)`` of the chosen
token over the full vocabulary; ``T = 1`` for greedy).

Threading: :meth:`generate` and :meth:`load_weights` serialise on a lock (weights never change
mid-batch, so every output carries one policy version); :meth:`abort` takes no lock and is
meant to be called from another thread (a Ray actor with ``max_concurrency > 1``). It is seen
between decode steps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from roll_core.errors import RollError
from roll_core.models import load_tokenizer, resolve_pretrain
from roll_core.strategies.attention import register_grouped_sdpa
from roll_core.strategies.base import GenerationOutput, GenerationRequest, InferStrategy, SamplingParams
from roll_core.strategies.generating_args import sampling_from_generating_args
from roll_core.strategies.hf_common import (
    apply_strategy_config,
    cfg_get,
    load_causal_lm,
    load_state_dict_checked,
    resolve_attn_implementation,
    resolve_device,
    set_num_threads,
    torch_dtype,
)
from roll_core.strategies.sampling import sample_next
from roll_core.strategies.static_decode import StaticDecoder, static_unsupported

logger = logging.getLogger(__name__)

#: compact the batch once this fraction of its rows has finished
COMPACT_FRACTION = 0.25
#: a prompt shorter than this share of its prefill bucket's longest starts a new bucket
PREFILL_BUCKET_RATIO = 0.75
#: ``decode_cache="auto"`` per device type (docs/benchmarks.md: the CPU A/B; docs/gpu.md: the GPU's)
DECODE_CACHE_DEFAULT = {"cpu": "static", "cuda": "static"}
DECODE_CACHES = ("auto", "dynamic", "static")


class HFInferStrategy(InferStrategy):
    """Generation with a Hugging Face causal LM and a KV cache (see the module docstring).

    Args:
        pretrain: anything :func:`roll_core.models.resolve_pretrain` accepts.
        seed: seeds the sampler's generator (and a tiny model's init, via ``resolve_pretrain``).
        dtype: ``fp32``/``bf16``/``fp16`` (ROLL spellings accepted).
        attn_implementation: ``sdpa`` (default), ``eager``, ``fa2`` (sdpa where unavailable).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; default CUDA when available.
        max_batch_size: most requests decoded together (ROLL's ``infer_batch_size``).
        cache_dir: where built / converted models are cached (default ``~/.cache/roll``).
        default_sampling: the worker's ``generating_args`` as :class:`SamplingParams`; exposed
            for the scheduler, never applied silently (every request carries its own params).
        extra_stop_token_ids: stop tokens for every request besides the tokenizer's eos.
        num_threads: torch intra-op threads for this process (see ``hf_common.set_num_threads``).
        decode_cache: ``auto`` (the device's entry of :data:`DECODE_CACHE_DEFAULT`), ``dynamic`` or
            ``static`` (see the module docstring).
        cuda_graphs: capture the static cache's decode steps as CUDA graphs (CUDA only; a failed
            capture logs its reason once and runs the same steps uncaptured).
    """

    def __init__(
        self,
        pretrain: str,
        *,
        seed: int = 0,
        dtype: str | None = "fp32",
        attn_implementation: str | None = None,
        device: str | None = None,
        max_batch_size: int = 64,
        cache_dir: str | None = None,
        default_sampling: SamplingParams | None = None,
        extra_stop_token_ids: Sequence[int] = (),
        num_threads: int | None = None,
        model_config_kwargs: Mapping[str, Any] | None = None,
        decode_cache: str = "auto",
        cuda_graphs: bool = True,
    ):
        set_num_threads(num_threads)
        if max_batch_size < 1:
            raise RollError(f"hf_infer: max_batch_size must be >= 1, got {max_batch_size}.")
        if decode_cache not in DECODE_CACHES:
            raise RollError(f"hf_infer: decode_cache must be one of {', '.join(DECODE_CACHES)}, got "
                            f"{decode_cache!r} (strategy_args.strategy_config.decode_cache).")
        self.device = resolve_device(device)
        self.decode_cache = DECODE_CACHE_DEFAULT.get(self.device.type, "dynamic") if decode_cache == "auto" \
            else decode_cache
        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        attn = resolve_attn_implementation(attn_implementation, self.device)
        if attn == "sdpa" and self.device.type == "cpu":
            attn = register_grouped_sdpa()  # same values, no per-step K/V head copies (attention.py)
        self.model = load_causal_lm(self.model_dir, torch_dtype(dtype, self.device), attn, self.device,
                                    model_config_kwargs).eval()
        self.max_batch_size = int(max_batch_size)
        self.default_sampling = default_sampling or SamplingParams()
        self.eos_token_ids = _eos_ids(self.tokenizer, self.model) | set(extra_stop_token_ids)
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.policy_version = 0
        self._generator = torch.Generator().manual_seed(int(seed))
        self._lock = threading.Lock()
        self._abort_lock = threading.Lock()
        self._abort_epoch = 0
        self._aborted: set[str] = set()
        self._inflight: set[str] = set()
        self._offloaded = False
        #: False once a prefill showed this model's cache is not plain per-layer K/V (see _prefill)
        self._shared_prefill = True
        self._static: StaticDecoder | None = None
        if self.decode_cache == "static":
            self._static = StaticDecoder(self.model, self.max_batch_size, self.pad_token_id, bool(cuda_graphs))
        #: why the last batch decoded on the growing cache although ``static`` was asked (logged once)
        self.static_fallback: str | None = None

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int, **overrides: Any) -> HFInferStrategy:
        """Build from an ``actor_infer`` worker config (ROLL names, read duck-typed).

        Reads ``model_args.{dtype, attn_implementation}``, ``infer_batch_size`` (as
        ``max_batch_size``), ``generating_args`` (as ``default_sampling``) and merges
        ``strategy_args.strategy_config`` (any constructor argument, e.g. ``device``).
        """
        kwargs: dict[str, Any] = {
            "seed": seed,
            "dtype": cfg_get(worker_config, "model_args.dtype"),
            "attn_implementation": cfg_get(worker_config, "model_args.attn_implementation"),
            "max_batch_size": cfg_get(worker_config, "infer_batch_size", 64),
            "default_sampling": sampling_from_generating_args(cfg_get(worker_config, "generating_args")),
            "model_config_kwargs": cfg_get(worker_config, "model_args.model_config_kwargs"),
        }
        kwargs = apply_strategy_config(cls, kwargs, cfg_get(worker_config, "strategy_args.strategy_config"),
                                       "actor_infer")
        return cls(pretrain, **{**kwargs, **overrides})

    # -- InferStrategy ----------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        """Generate for ``requests`` (any prompt lengths, any sampling params); outputs in order."""
        vocab = self.model.get_input_embeddings().num_embeddings
        for r in requests:
            if len(r.prompt_ids) == 0:
                raise RollError(f"request {r.request_id!r} has an empty prompt; at least one token is needed.")
            if min(r.prompt_ids) < 0 or max(r.prompt_ids) >= vocab:
                raise RollError(f"request {r.request_id!r} has token ids outside the model's vocabulary "
                                f"[0, {vocab}); was it tokenised with another tokenizer?")
        with self._lock:
            if self._offloaded:
                raise RollError("hf_infer.generate called while offloaded; call reload() first.")
            with self._abort_lock:
                epoch = self._abort_epoch
                self._inflight.update(r.request_id for r in requests)
            try:
                outputs: list[GenerationOutput | None] = [None] * len(requests)
                order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
                for start in range(0, len(order), self.max_batch_size):
                    chunk = order[start : start + self.max_batch_size]
                    for i, out in zip(chunk, self._generate_batch([requests[i] for i in chunk], epoch)):
                        outputs[i] = out
                return outputs  # type: ignore[return-value]
            finally:
                with self._abort_lock:
                    ids = {r.request_id for r in requests}
                    self._inflight -= ids
                    self._aborted -= ids

    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Copy a HF-named state dict into the model (waits for a running batch) and set the version."""
        with self._lock:
            load_state_dict_checked(self.model, weights)
            self.policy_version = int(version)

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        """Abort in-flight requests (all when ``None``); they return their tokens so far, "abort"."""
        with self._abort_lock:
            if request_ids is None:
                self._abort_epoch += 1
            else:
                self._aborted |= set(request_ids) & self._inflight

    def offload(self) -> None:
        """Move the model to CPU and free accelerator memory (no-op on CPU)."""
        with self._lock:
            if self.device.type != "cpu" and not self._offloaded:
                if self._static is not None:
                    self._static.clear()  # its graphs and caches point at device memory
                self.model.to("cpu")
                torch.cuda.empty_cache()
                self._offloaded = True

    def reload(self) -> None:
        with self._lock:
            if self._offloaded:
                self.model.to(self.device)
                self._offloaded = False

    # -- internals --------------------------------------------------------------------------
    def _aborted_rows(self, requests: Sequence[GenerationRequest], epoch: int) -> list[bool] | None:
        """Per-request abort flags, or ``None`` when nothing is aborted (the common, cheap path)."""
        if self._abort_epoch != epoch:
            return [True] * len(requests)
        if not self._aborted:
            return None
        with self._abort_lock:
            return [r.request_id in self._aborted for r in requests]

    @torch.inference_mode()
    def _generate_batch(self, requests: Sequence[GenerationRequest], epoch: int) -> list[GenerationOutput]:
        n = len(requests)
        params = [r.sampling for r in requests]
        max_new = torch.tensor([max(0, p.max_new_tokens) for p in params])
        steps = int(max_new.max()) if n else 0
        tokens = torch.full((n, max(steps, 1)), self.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros((n, max(steps, 1)), dtype=torch.float32)
        n_gen = torch.zeros(n, dtype=torch.long)
        finish: list[str | None] = ["length" if m == 0 else None for m in max_new.tolist()]
        stop_ids = _stop_id_table(self.eos_token_ids, params)
        row_generators = [torch.Generator().manual_seed(p.seed) if p.seed is not None else None for p in params]
        stop_rows = [i for i, p in enumerate(params) if p.stop_strings]
        stop_window = {i: 4 * max(len(s) for s in params[i].stop_strings) + 4 for i in stop_rows}
        # a continuation's own earlier tokens (partial rollout) take part in stop-string matching
        earlier = {i: _response_tail(requests[i], stop_window[i]) for i in stop_rows}

        flags = self._aborted_rows(requests, epoch)
        live_rows = [i for i in range(n) if finish[i] is None and not (flags and flags[i])]
        for i in range(n):
            if finish[i] is None and flags and flags[i]:
                finish[i] = "abort"
        if live_rows:
            rows = torch.tensor(live_rows)  # batch position -> request index
            prompts = [list(requests[i].prompt_ids) for i in live_rows]
            attn = _left_padding_mask(prompts)
            attn, next_pos = attn.to(self.device), attn.sum(-1, keepdim=True).to(self.device)
            cache, logits = self._prefill(prompts)
            run = self._static_run(cache, attn, next_pos, steps)
            del cache  # the static run copied it; the dynamic run holds it
            live = torch.ones(len(live_rows), dtype=torch.bool)  # per batch position

            for step in range(steps):
                flags = self._aborted_rows(requests, epoch)
                if flags is not None:
                    for b, i in enumerate(rows.tolist()):
                        if live[b] and flags[i]:
                            finish[i], live[b] = "abort", False
                    if not bool(live.any()):
                        break
                idx = rows.tolist()
                uniforms = torch.rand(len(idx), generator=self._generator)
                for b, i in enumerate(idx):
                    if row_generators[i] is not None:
                        uniforms[b] = torch.rand(1, generator=row_generators[i])[0]
                chosen, chosen_lp = sample_next(logits, [params[i] for i in idx], uniforms)
                chosen, chosen_lp = chosen.cpu(), chosen_lp.cpu()
                live_rows_t = rows[live]
                tokens[live_rows_t, step] = chosen[live]
                logprobs[live_rows_t, step] = chosen_lp[live]
                n_gen[live_rows_t] += 1
                is_stop = (stop_ids[rows] == chosen.unsqueeze(1)).any(dim=1) & live
                is_long = (n_gen[rows] >= max_new[rows]) & live
                for b in (is_stop | is_long).nonzero().flatten().tolist():
                    finish[idx[b]] = "stop" if is_stop[b] else "length"
                for b, i in enumerate(idx):
                    if live[b] and finish[i] is None and i in stop_window:
                        window = tokens[i, max(0, step + 1 - stop_window[i]) : step + 1].tolist()
                        if earlier[i] and len(window) < stop_window[i]:
                            window = earlier[i][len(window) - stop_window[i]:] + window
                        text = self.tokenizer.decode(window, skip_special_tokens=False)
                        if any(s in text for s in params[i].stop_strings):
                            finish[i] = "stop"
                live &= torch.tensor([finish[i] is None for i in idx])
                if not bool(live.any()):
                    break
                if run.should_compact(int(live.sum())):
                    keep = live.nonzero().flatten()
                    run.select(keep)
                    rows, chosen, live = rows[keep], chosen[keep], live[keep]
                feed = torch.where(live, chosen, self.pad_token_id).unsqueeze(1).to(self.device)
                logits = run.step(feed)

        return [
            GenerationOutput(
                request_id=r.request_id,
                token_ids=tokens[i, : n_gen[i]].tolist(),
                logprobs=logprobs[i, : n_gen[i]].tolist(),
                finish_reason=finish[i] or "length",  # type: ignore[arg-type]
                policy_version=self.policy_version,
            )
            for i, r in enumerate(requests)
        ]

    def _static_run(self, cache: Any, attn: torch.Tensor, next_pos: torch.Tensor, steps: int) -> Any:
        """The batch's decode: on the static cache when asked and the model allows it (else why, once)."""
        if self._static is not None and steps > 0:
            reason = static_unsupported(self.model, cache)
            if reason is None:
                return self._static.start(cache, attn, next_pos, steps)
            if reason != self.static_fallback:
                logger.warning("hf_infer: decoding on the growing cache, not the static one: %s", reason)
            self.static_fallback = reason
        return _DynamicRun(self.model, cache, attn, next_pos)

    def _prefill(self, prompts: Sequence[Sequence[int]]) -> tuple[Any, torch.Tensor]:
        """The KV cache of left-padded ``prompts`` and each row's next-token logits.

        Identical prompts (a GRPO group's samples, the first turn of a group's episodes) are run
        through the model once, and their cache rows and logits copied to every request that asked:
        a group of 8 costs one prompt's prefill, as a prefix cache would give it (docs/benchmarks.md
        section 18). The sampling is per request, so each sample keeps its own draw; a row's
        logits may differ from a full prefill's in the last bits (a matrix product's rounding can
        depend on its row count). Models whose cache is not plain per-layer K/V run every row: the
        first such prefill is done again whole, and later ones are not tried shared.
        """
        from transformers.cache_utils import DynamicLayer

        first: dict[tuple[int, ...], int] = {}
        inverse = [first.setdefault(tuple(p), len(first)) for p in prompts]
        if self._shared_prefill and len(first) < len(prompts):
            cache, logits = self._prefill_rows([list(p) for p in first])
            if all(type(layer) is DynamicLayer for layer in cache.layers):
                index = torch.tensor(inverse, device=logits.device)
                for layer in cache.layers:
                    layer.reorder_cache(index)
                return cache, logits.index_select(0, index)
            self._shared_prefill = False
        return self._prefill_rows(prompts)

    def _prefill_rows(self, prompts: Sequence[Sequence[int]]) -> tuple[Any, torch.Tensor]:
        """:meth:`_prefill` of every row as it is.

        Rows are run through the model in buckets of similar prompt length
        (:func:`prefill_buckets`), each padded only to its own longest prompt, and their caches
        are joined into one left-padded cache for the decode steps: a batch of prompts of 32 to
        512 tokens then costs about its real tokens instead of rows x longest (attention grows with
        the square of that width). Models whose cache is not plain per-layer K/V (sliding-window
        or recurrent layers) get one padded prefill.
        """
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        buckets = prefill_buckets([len(p) for p in prompts])
        parts = []
        for rows in buckets if len(buckets) > 1 else ():
            cache = DynamicCache(config=self.model.config)
            logits = self._padded_forward([prompts[b] for b in rows], cache)
            if not all(type(layer) is DynamicLayer for layer in cache.layers):
                break  # not joinable: one padded prefill below
            parts.append((rows, cache, logits))
        else:
            if parts:
                return _join_caches(parts, len(prompts), max(len(p) for p in prompts), self.model.config)
        cache = DynamicCache(config=self.model.config)
        return cache, self._padded_forward(prompts, cache)

    def _padded_forward(self, prompts: Sequence[Sequence[int]], cache: Any) -> torch.Tensor:
        """One left-padded forward of ``prompts`` into ``cache``; the last position's logits per row."""
        attn = _left_padding_mask(prompts)
        ids = torch.full(attn.shape, self.pad_token_id, dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, attn.shape[1] - len(p) :] = torch.tensor(p, dtype=torch.long)
        positions = (attn.cumsum(-1) - 1).clamp_(min=0)
        return self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device),
                          position_ids=positions.to(self.device), past_key_values=cache,
                          use_cache=True, logits_to_keep=1).logits[:, -1]


class _DynamicRun:
    """A batch's decode on the growing cache: each step appends one position per layer; finished rows
    leave once :data:`COMPACT_FRACTION` of the batch has finished."""

    def __init__(self, model: Any, cache: Any, attn: torch.Tensor, next_pos: torch.Tensor):
        self.model, self.cache, self.attn, self.next_pos = model, cache, attn, next_pos

    def should_compact(self, n_live: int) -> bool:
        rows = len(self.attn)
        return rows - n_live >= max(1, int(COMPACT_FRACTION * rows))

    def select(self, keep: torch.Tensor) -> None:
        keep = keep.to(self.attn.device)
        self.cache.batch_select_indices(keep)
        self.attn, self.next_pos = self.attn[keep], self.next_pos[keep]

    def step(self, feed: torch.Tensor) -> torch.Tensor:
        self.attn = torch.cat([self.attn, torch.ones_like(self.attn[:, :1])], dim=1)
        logits = self.model(input_ids=feed, attention_mask=self.attn, position_ids=self.next_pos,
                            past_key_values=self.cache, use_cache=True).logits[:, -1]
        self.next_pos = self.next_pos + 1
        return logits


def _left_padding_mask(prompts: Sequence[Sequence[int]]) -> torch.Tensor:
    """``(rows, longest)`` attention mask of ``prompts`` left-padded to the longest: 1 on real tokens."""
    lengths = torch.tensor([len(p) for p in prompts])
    width = int(lengths.max())
    return (torch.arange(width) >= width - lengths[:, None]).long()


def _join_caches(parts: Sequence[tuple[list[int], Any, torch.Tensor]], n: int, width: int,
                 config: Any) -> tuple[Any, torch.Tensor]:
    """One left-padded ``DynamicCache`` of ``n`` rows and ``width`` positions, and the rows' logits,
    from per-bucket ``(rows, cache, logits)``; each bucket's cache is right-aligned in it."""
    from transformers import DynamicCache

    joined = DynamicCache(config=config)
    for layer_idx in range(len(parts[0][1].layers)):
        first = parts[0][1].layers[layer_idx]
        # keys and values apart: their head counts or sizes may differ (e.g. multi-head latent attention)
        keys = first.keys.new_zeros((n, first.keys.shape[1], width, first.keys.shape[3]))
        values = first.values.new_zeros((n, first.values.shape[1], width, first.values.shape[3]))
        for rows, cache, _ in parts:
            layer, index = cache.layers[layer_idx], torch.tensor(rows, device=keys.device)
            keys[index, :, width - layer.keys.shape[2] :] = layer.keys
            values[index, :, width - layer.values.shape[2] :] = layer.values
        joined.update(keys, values, layer_idx)
    logits = parts[0][2].new_empty((n, parts[0][2].shape[-1]))
    for rows, _, part_logits in parts:
        logits[torch.tensor(rows, device=logits.device)] = part_logits
    return joined, logits


def prefill_buckets(lengths: Sequence[int], ratio: float = PREFILL_BUCKET_RATIO) -> list[list[int]]:
    """Row indices grouped for prefill: longest first, a new bucket when a prompt is shorter than
    ``ratio`` x its bucket's longest (so at most ``1 - ratio`` of a bucket's positions are padding)."""
    buckets: list[list[int]] = []
    bucket_width = 0
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if not buckets or lengths[i] < ratio * bucket_width:
            buckets.append([])
            bucket_width = lengths[i]
        buckets[-1].append(i)
    return buckets


def _eos_ids(tokenizer: Any, model: Any) -> set[int]:
    """The tokenizer's eos plus every eos id the model's configs name."""
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None),
                  getattr(model.config, "eos_token_id", None)):
        if value is None:
            continue
        ids.update([value] if isinstance(value, int) else list(value))
    return ids


def _response_tail(request: GenerationRequest, window: int) -> list[int]:
    """The last (at most ``window``) prompt tokens that are the response's own (``response_prefix``)."""
    own = min(max(0, int(request.response_prefix)), len(request.prompt_ids), window)
    return list(request.prompt_ids[len(request.prompt_ids) - own:]) if own else []


def _stop_id_table(eos: set[int], params: Sequence[SamplingParams]) -> torch.Tensor:
    """``[n, S]`` stop ids per request (eos + its own), padded with -1 (never a token)."""
    per_row = [sorted(eos | set(p.stop_token_ids)) for p in params]
    width = max((len(s) for s in per_row), default=1) or 1
    table = torch.full((len(per_row), width), -1, dtype=torch.long)
    for i, ids in enumerate(per_row):
        table[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return table
