"""``megatron_train``: the train contract on megatron-core (CUDA): TP / PP / EP, distributed optimizer.

Decisions, and why:

* **Processes and groups.** One strategy per GPU rank, ranks from the usual ``RANK`` /
  ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_*`` variables (NCCL); ``initialize_model_parallel``
  cuts the world into tensor x pipeline x data (x expert) groups from ``strategy_config``.
* **Weights.** The HF checkpoint (``pretrain``) is read on CPU, converted to Megatron's layout and
  cut for this (TP, PP) rank by :mod:`roll_strategy_megatron.conversion`; :meth:`export_weights`
  gathers every rank's shards and converts back, so any infer strategy receives plain HF names.
* **One ``train_step`` = one optimiser step** over this data-parallel rank's batch, in micro-batches
  of ``per_device_train_batch_size`` rows through ``get_forward_backward_func()`` (pipelined when
  PP > 1). ``loss_fn`` scales by global normalisers (docs/algorithms.md §6.5), so losses must be summed;
  megatron-core divides each micro-batch loss by the micro-batch count and averages gradients over
  data-parallel ranks, hence every loss is multiplied by ``num_microbatches * dp_size``.
* **Log-probs** come from the vocab-parallel logits without gathering the vocabulary
  (:mod:`roll_strategy_megatron.logprobs`); the last pipeline stage broadcasts them to the others.
* **Checkpoints**: a ``save_pretrained``-style HF directory (rank 0) plus megatron-core's
  ``dist_checkpointing`` of the model and optimizer (sharded by rank, reloadable at another
  parallel layout) plus scheduler, step and RNG states.
* **Precision** follows ``model_args.dtype`` (bf16 / fp16 with fp32 master weights, or fp32).
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, parallel_state, tensor_parallel

from roll_core.errors import ConfigError, RollError
from roll_core.models import load_tokenizer, resolve_pretrain
from roll_core.strategies.base import LossFn, TrainStrategy
from roll_core.strategies.hf_common import DTYPES, set_num_threads
from roll_core.strategies.rng import load_state, rng_state, save_state, set_rng_state
from roll_core.strategies.settings import OptimizerSettings, resolve_settings, train_worker_kwargs
from roll_core.strategies.tensors import (
    micro_batches,
    positions,
    read_safetensors_dir,
    validate_batch,
)
from roll_strategy_megatron.conversion import (
    Qwen2Layout,
    check_parallel_sizes,
    hf_to_megatron,
    megatron_to_hf,
    merge,
    save_hf_checkpoint,
    shard,
)
from roll_strategy_megatron.logprobs import vocab_parallel_token_log_probs
from roll_strategy_megatron.model import build_gpt_model, load_local_weights
from roll_strategy_megatron.model import transformer_config as make_transformer_config

MEGATRON_DIR = "megatron"
STATE_FILE = "trainer_state_rank{rank}.pt"
#: training_args.lr_scheduler_type -> OptimizerParamScheduler's lr_decay_style
DECAY_STYLES = {"constant": "constant", "constant_with_warmup": "constant", "linear": "linear",
                "cosine": "cosine", "inverse_sqrt": "inverse-square-root"}


class MegatronTrainStrategy(TrainStrategy):
    """Actor / reference strategy on megatron-core (see the module docstring).

    Args:
        pretrain, seed, dtype, cache_dir, logits_temperature, trainable, settings, **training: as for
            ``hf_train`` (``dtype`` None: bf16); ``settings.lr_scheduler_type`` must be one of
            :data:`DECAY_STYLES`, and ``settings.lr_scheduler_kwargs`` empty (megatron's scheduler
            has no such options).
        gradient_checkpointing: sets ``recompute_granularity="full"`` unless that is given.
        attn_implementation: accepted for config compatibility; Megatron picks its own kernels.
        tensor_model_parallel_size, pipeline_model_parallel_size, expert_model_parallel_size,
        sequence_parallel, recompute_granularity, recompute_method, recompute_num_layers,
        use_distributed_optimizer, overlap_grad_reduce, overlap_param_gather: megatron-core's own.
        use_transformer_engine: Transformer Engine layers (default: when it is installed).
        transformer_config: further ``TransformerConfig`` fields, passed through verbatim.
    """

    def __init__(
        self,
        pretrain: str,
        *,
        seed: int = 0,
        dtype: str | None = None,
        attn_implementation: str | None = None,
        cache_dir: str | None = None,
        gradient_checkpointing: bool = False,
        logits_temperature: float = 1.0,
        trainable: bool = True,
        tensor_model_parallel_size: int = 1,
        pipeline_model_parallel_size: int = 1,
        expert_model_parallel_size: int = 1,
        sequence_parallel: bool = False,
        recompute_granularity: str | None = None,
        recompute_method: str | None = None,
        recompute_num_layers: int | None = None,
        use_distributed_optimizer: bool = False,
        overlap_grad_reduce: bool = False,
        overlap_param_gather: bool = False,
        use_transformer_engine: bool | None = None,
        transformer_config: Mapping[str, Any] | None = None,
        settings: OptimizerSettings | None = None,
        **training: Any,
    ):
        self.settings = resolve_settings(type(self).__name__, settings, training)
        lr_scheduler_type = self.settings.lr_scheduler_type
        self.settings.require_adamw("megatron_train")
        if not torch.cuda.is_available():
            raise RollError("megatron_train needs CUDA GPUs (megatron-core's forward pass is CUDA-only); on a "
                            "CPU machine use hf_train or deepspeed_train.")
        if lr_scheduler_type not in DECAY_STYLES:
            raise ConfigError(f"training_args.lr_scheduler_type {lr_scheduler_type!r} is not available with "
                              f"megatron_train; use one of {', '.join(DECAY_STYLES)}.")
        if logits_temperature <= 0:
            raise ConfigError(f"logits_temperature must be > 0, got {logits_temperature}.")
        if self.settings.lr_scheduler_kwargs:
            raise ConfigError("training_args.lr_scheduler_kwargs is not supported by megatron_train "
                              "(megatron-core's OptimizerParamScheduler takes no such options).")
        set_num_threads(self.settings.num_threads)
        self.dtype = DTYPES.get(str(dtype or "bf16").lower(), str(dtype))
        self.trainable = trainable
        self.logits_temperature = float(logits_temperature)
        self.global_step = 0
        if use_transformer_engine is None:
            import importlib.util

            use_transformer_engine = importlib.util.find_spec("transformer_engine") is not None
        if gradient_checkpointing and recompute_granularity is None:
            recompute_granularity = "full"

        _init_distributed()
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=tensor_model_parallel_size,
                pipeline_model_parallel_size=pipeline_model_parallel_size,
                expert_model_parallel_size=expert_model_parallel_size,
            )
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        torch.manual_seed(seed)
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self.tp_size = parallel_state.get_tensor_model_parallel_world_size()
        self.pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        self.pp_size = parallel_state.get_pipeline_model_parallel_world_size()
        self.dp_size = parallel_state.get_data_parallel_world_size()

        from transformers import AutoConfig

        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.hf_config = AutoConfig.from_pretrained(self.model_dir)
        self.layout = Qwen2Layout.from_hf_config(self.hf_config, fused_norms=use_transformer_engine)
        try:
            check_parallel_sizes(self.layout, self.tp_size, self.pp_size)
        except ValueError as exc:
            raise ConfigError(f"actor_train.strategy_args.strategy_config: {exc}") from exc
        self.config = make_transformer_config(
            self.hf_config, dtype=self.dtype, tensor_model_parallel_size=self.tp_size,
            pipeline_model_parallel_size=self.pp_size, expert_model_parallel_size=expert_model_parallel_size,
            sequence_parallel=sequence_parallel, recompute_granularity=recompute_granularity,
            recompute_method=recompute_method, recompute_num_layers=recompute_num_layers,
            extra=transformer_config,
        )
        model = build_gpt_model(self.hf_config, self.config, use_transformer_engine=use_transformer_engine).cuda()
        self._load_hf_weights(model, read_safetensors_dir(self.model_dir))
        self.vocab_start = self.tp_rank * (self.layout.vocab_size // self.tp_size)
        if trainable:
            self._setup_training(model, use_distributed_optimizer=use_distributed_optimizer,
                                 overlap_grad_reduce=overlap_grad_reduce, overlap_param_gather=overlap_param_gather)
        else:
            self.model = model.eval().requires_grad_(False)
            self.optimizer = self.scheduler = None
        from megatron.core.pipeline_parallel import get_forward_backward_func

        self.forward_backward = get_forward_backward_func()

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int,
                           **overrides: Any) -> MegatronTrainStrategy:
        """Build from an ``actor_train`` / ``reference`` worker config, as ``hf_train`` does."""
        return cls(pretrain, **train_worker_kwargs(cls, worker_config, seed, "actor_train", overrides))

    # -- TrainStrategy ----------------------------------------------------------------------
    @property
    def mini_batch_size(self) -> int:
        """Rows each data-parallel rank should pass to one :meth:`train_step`."""
        return self.settings.mini_batch_size

    def data_parallel(self) -> tuple[int, int]:
        """Megatron's data-parallel coordinates: the tensor- and pipeline-parallel ranks of one model
        replica get the same rows from roll's worker group."""
        return parallel_state.get_data_parallel_rank(), self.dp_size

    def data_parallel_group(self) -> Any:
        return parallel_state.get_data_parallel_group()

    def collects_outputs(self) -> bool:
        """One rank per replica returns results (every rank of it has them: _from_last_stage)."""
        return self.tp_rank == 0 and self.pp_rank == 0

    def compute_log_probs(self, batch: Mapping[str, Any], *, with_entropy: bool = False):
        """``(log_probs [B, L-1], entropy or None)`` on CPU, on every rank of the pipeline."""
        validate_batch(batch)
        batch_size, length = batch["input_ids"].shape
        micro = list(micro_batches(batch, self.settings.forward_batch_size, torch.cuda.current_device()))

        def loss(mb, output):
            lp, ent = self._log_probs(output, mb, with_entropy)
            return lp.sum() * 0.0, {"log_probs": lp.detach(), "entropy": None if ent is None else ent.detach()}

        self._module().eval()
        with torch.no_grad():
            outputs = self._run(micro, loss, forward_only=True)
        log_probs = torch.zeros(batch_size, length - 1)
        entropy = torch.zeros(batch_size, length - 1) if with_entropy else None
        if parallel_state.is_pipeline_last_stage():
            start = 0
            for (_, rows, width), out in zip(micro, outputs):
                log_probs[start : start + rows, : width - 1] = out["log_probs"].float().cpu()
                if entropy is not None:
                    entropy[start : start + rows, : width - 1] = out["entropy"].float().cpu()
                start += rows
        log_probs = self._from_last_stage(log_probs)
        entropy = None if entropy is None else self._from_last_stage(entropy)
        return log_probs, entropy

    def train_step(self, batch: Mapping[str, Any], loss_fn: LossFn, *,
                   with_entropy: bool | None = None) -> dict[str, float]:
        """One optimiser step over this rank's ``batch``; ``loss`` is the global-batch loss."""
        if not self.trainable:
            raise RollError("megatron_train was built with trainable=False (a reference model); it cannot train.")
        validate_batch(batch)
        want_entropy = bool(getattr(loss_fn, "needs_entropy", False) if with_entropy is None else with_entropy)
        micro = list(micro_batches(batch, self.settings.per_device_train_batch_size, torch.cuda.current_device()))
        scale = len(micro) * self.dp_size  # undo megatron-core's averaging: roll sums

        def loss(mb, output):
            lp, ent = self._log_probs(output, mb, want_entropy)
            value, metrics = loss_fn(mb, lp, ent)
            rows = mb["input_ids"].shape[0]
            reported = {k: torch.tensor(float(v) * rows) for k, v in (metrics or {}).items()}
            return value * scale, {"loss": value.detach().float(), "rows": torch.tensor(float(rows)), **reported}

        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        lr = float(self.optimizer.param_groups[0]["lr"])
        outputs = self._run(micro, loss, forward_only=False)
        success, grad_norm, _ = self.optimizer.step()
        if success:
            self.scheduler.step(increment=1)
        self.global_step += 1
        sums = torch.zeros(2, dtype=torch.float64, device="cuda")  # loss, rows
        extra: dict[str, float] = {}
        if parallel_state.is_pipeline_last_stage():
            sums[0] = sum(float(o["loss"]) for o in outputs)
            sums[1] = sum(float(o["rows"]) for o in outputs)
            for o in outputs:
                for key, value in o.items():
                    if key not in ("loss", "rows"):
                        extra[key] = extra.get(key, 0.0) + float(value)
        sums = self._from_last_stage(sums.cpu()).to("cuda")
        dist.all_reduce(sums[:1], group=parallel_state.get_data_parallel_group())
        return {"loss": float(sums[0]), "grad_norm": float(grad_norm or 0.0), "lr": lr,
                "skipped": float(not success), **{k: v / max(float(sums[1]), 1.0) for k, v in extra.items()}}

    def export_weights(self) -> dict[str, torch.Tensor]:
        """HF-named CPU weights gathered from every TP / PP shard; collective over the model-parallel group."""
        local = {k: v.detach().to("cpu", copy=True) for k, v in self._module().state_dict().items()
                 if not k.endswith("_extra_state")}
        shards: list[Any] = [None] * dist.get_world_size(parallel_state.get_model_parallel_group())
        dist.all_gather_object(shards, ((self.tp_rank, self.pp_rank), local),
                               group=parallel_state.get_model_parallel_group())
        full = merge(dict(shards), self.layout, tp_size=self.tp_size, pp_size=self.pp_size)
        return megatron_to_hf(full, self.layout)

    def save_checkpoint(self, path: str) -> None:
        """HF directory (rank 0) + Megatron distributed checkpoint + per-rank trainer state; collective."""
        weights = self.export_weights()
        if dist.get_rank() == 0:
            save_hf_checkpoint(path, weights, self.hf_config, tokenizer=self.tokenizer, source_dir=self.model_dir)
        os.makedirs(os.path.join(path, MEGATRON_DIR), exist_ok=True)
        dist.barrier()
        dist_checkpointing.save(self._sharded_state_dict(), os.path.join(path, MEGATRON_DIR))
        save_state({"global_step": self.global_step,
                    "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                    "rng": _rng_state()}, os.path.join(path, STATE_FILE.format(rank=dist.get_rank())))
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote (any parallel layout: dist_checkpointing reshards)."""
        directory = os.path.join(path, MEGATRON_DIR)
        if not os.path.isdir(directory):
            raise RollError(f"{path} is not a megatron_train checkpoint: {directory} is missing.")
        state = dist_checkpointing.load(self._sharded_state_dict(is_loading=True), directory)
        self._module().load_state_dict(state["model"])
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        trainer = load_state(os.path.join(path, STATE_FILE.format(rank=dist.get_rank())))  # weights_only
        self.global_step = int(trainer["global_step"])
        if self.scheduler is not None and trainer["scheduler"] is not None:
            self.scheduler.load_state_dict(trainer["scheduler"])
        _set_rng_state(trainer["rng"])

    # -- internals --------------------------------------------------------------------------
    def _module(self) -> Any:
        """The ``GPTModel`` (inside DDP when training)."""
        return getattr(self.model, "module", self.model)

    def _load_hf_weights(self, model: Any, hf: Mapping[str, torch.Tensor]) -> None:
        full = hf_to_megatron(hf, self.layout)
        local = shard(full, self.layout, tp_rank=self.tp_rank, tp_size=self.tp_size, pp_rank=self.pp_rank,
                      pp_size=self.pp_size)
        dtype = next(model.parameters()).dtype
        load_local_weights(model, {k: v.to(dtype) for k, v in local.items()})

    def _setup_training(self, model: Any, *, use_distributed_optimizer, overlap_grad_reduce,
                        overlap_param_gather) -> None:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        s = self.settings
        warmup_steps = s.warmup_step_count()
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=overlap_grad_reduce,
                                                   overlap_param_gather=overlap_param_gather,
                                                   use_distributed_optimizer=use_distributed_optimizer)
        self.model = DistributedDataParallel(config=self.config, ddp_config=ddp_config, module=model)
        # clip_grad 0 would skip computing the norm; a huge bound never clips but still reports it
        clip = float(s.max_grad_norm) if s.max_grad_norm and s.max_grad_norm > 0 else 1e12
        opt_config = OptimizerConfig(
            optimizer="adam", lr=s.learning_rate, min_lr=0.0, weight_decay=s.weight_decay, adam_beta1=s.adam_betas[0],
            adam_beta2=s.adam_betas[1], adam_eps=s.adam_epsilon, clip_grad=clip, bf16=self.config.bf16,
            fp16=self.config.fp16, params_dtype=self.config.params_dtype,
            use_distributed_optimizer=use_distributed_optimizer, overlap_param_gather=overlap_param_gather,
        )
        self.optimizer = get_megatron_optimizer(opt_config, [self.model])
        decay_steps = max(int(s.num_training_steps or 0), int(warmup_steps) + 1)
        style = DECAY_STYLES[s.lr_scheduler_type]
        if style != "constant" and not s.num_training_steps:
            raise ConfigError(f"training_args.lr_scheduler_type {s.lr_scheduler_type!r} needs num_training_steps "
                              "(the pipeline passes it from max_steps).")
        self.scheduler = OptimizerParamScheduler(
            self.optimizer, init_lr=0.0 if warmup_steps else s.learning_rate, max_lr=s.learning_rate, min_lr=0.0,
            lr_warmup_steps=int(warmup_steps), lr_decay_steps=decay_steps, lr_decay_style=style,
            start_wd=s.weight_decay, end_wd=s.weight_decay, wd_incr_steps=decay_steps, wd_incr_style="constant",
        )
        self.config.finalize_model_grads_func = finalize_model_grads
        self.config.grad_scale_func = self.optimizer.scale_loss
        self.config.no_sync_func = self.model.no_sync
        if overlap_param_gather and use_distributed_optimizer:
            self.config.param_sync_func = self.model.start_param_sync

    def _run(self, micro: list, loss: Any, *, forward_only: bool) -> list:
        """megatron-core's (pipelined) forward/backward over ``micro``; the last stage's loss outputs."""
        batches = iter(micro)
        model = self.model

        # sequence parallelism splits the sequence over TP ranks: widths must divide by the TP size
        multiple = self.tp_size if self.config.sequence_parallel else 1

        def forward_step(data_iterator, chunk):
            mb, _, width = next(data_iterator)
            ids, mask = (_pad_right(mb[k], multiple) for k in ("input_ids", "attention_mask"))
            output = chunk(input_ids=ids, position_ids=positions(mask),
                           attention_mask=None)  # causal attention; right padding never leaks backwards
            return output, functools.partial(_on_width, loss, mb, width)

        widest = max(width for _, _, width in micro)
        return self.forward_backward(forward_step_func=forward_step, data_iterator=batches, model=[model],
                                     num_microbatches=len(micro), seq_length=widest,
                                     micro_batch_size=self.settings.per_device_train_batch_size, forward_only=forward_only)

    def _log_probs(self, logits: torch.Tensor, mb: Mapping[str, Any], with_entropy: bool):
        from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region

        return vocab_parallel_token_log_probs(
            logits, mb["input_ids"], mb["response_mask"], vocab_start=self.vocab_start,
            temperature=self.logits_temperature, with_entropy=with_entropy,
            reduce=reduce_from_tensor_model_parallel_region if self.tp_size > 1 else (lambda t: t),
            group=parallel_state.get_tensor_model_parallel_group() if self.tp_size > 1 else None,
        )

    def _from_last_stage(self, tensor: torch.Tensor) -> torch.Tensor:
        """The last pipeline stage's ``tensor`` on every stage."""
        if self.pp_size == 1:
            return tensor
        on_gpu = tensor.to("cuda")
        dist.broadcast(on_gpu, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                       group=parallel_state.get_pipeline_model_parallel_group())
        return on_gpu.cpu()

    def _sharded_state_dict(self, is_loading: bool = False) -> dict[str, Any]:
        state = {"model": self._module().sharded_state_dict()}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.sharded_state_dict(state["model"], is_loading=is_loading)
        return state


def _pad_right(tensor: torch.Tensor, multiple: int) -> torch.Tensor:
    """``[b, L]`` padded with zeros on the right to a multiple of ``multiple``."""
    extra = -tensor.shape[1] % multiple
    return torch.nn.functional.pad(tensor, (0, extra)) if extra else tensor


def _on_width(loss: Any, mb: Mapping[str, Any], width: int, output: torch.Tensor):
    """``loss(mb, logits)`` with the logits cut back to the micro-batch's own width."""
    return loss(mb, output[:, :width])


def _init_distributed() -> None:
    """Join (or, alone, create) the NCCL default group and pick this rank's GPU."""
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:  # a single rank: make up the rendezvous
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ.setdefault("MASTER_PORT", str(s.getsockname()[1]))
        dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))


def _rng_state() -> dict[str, Any]:
    """roll's RNG states (weights_only-loadable) plus Megatron's tensor-parallel CUDA RNG tracker."""
    return {**rng_state(), "tracker": dict(tensor_parallel.get_cuda_rng_tracker().get_states())}


def _set_rng_state(state: Mapping[str, Any]) -> None:
    set_rng_state(state)
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])
