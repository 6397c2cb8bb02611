"""``deepspeed_train``: the train contract on a DeepSpeed engine (ZeRO 0-3, CPU offload, bf16/fp16).

Mirrors ``hf_train`` (same constructor arguments, batch helpers, log-prob formula and metrics) and
adds what DeepSpeed brings; see :mod:`roll_strategy_deepspeed.config` for ``strategy_config``.

Decisions, and why:

* **Processes.** One strategy per data-parallel rank. Ranks come from the usual ``RANK`` /
  ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT`` variables (torchrun, or the
  pipeline's workers); without them the strategy is a single rank on a free local port. The
  backend is NCCL on CUDA and gloo elsewhere; without CUDA, ``DS_ACCELERATOR`` defaults to ``cpu``.
* **One ``train_step`` = one optimiser step over the rank's share of the batch**, in micro-batches
  of ``per_device_train_batch_size`` rows. roll owns the accumulation boundary
  (``set_gradient_accumulation_boundary``), so batches need not hold exactly
  ``gradient_accumulation_steps`` micro-batches. ``loss_fn`` scales by *global* normalisers
  (docs/algorithms.md §6.5): the micro-batch losses must be *summed* over micro-batches and ranks.
  DeepSpeed averages gradients over ranks and (by default) divides by the accumulation steps, so
  every loss goes to ``engine.backward(loss * dp_world_size, scale_wrt_gas=False)``: the update
  is then that of the whole global batch, whatever the split (the two-rank test pins this).
  All ranks must call ``train_step`` / ``compute_log_probs`` / ``export_weights`` together with
  the same number of micro-batches (checked: ZeRO-3 gathers parameters collectively).
* **Precision.** The model is loaded in fp32; DeepSpeed casts it for bf16/fp16 and keeps fp32
  master weights in the optimizer. Exported weights are the module's (compute) dtype.
* **ZeRO-3** loads the model under ``deepspeed.zero.Init`` (through transformers'
  ``HfDeepSpeedConfig``, set only while loading), so no rank ever holds the whole fp32 model;
  :meth:`export_weights` gathers one parameter at a time.
* **Checkpoints**: a ``save_pretrained`` directory (rank 0) plus DeepSpeed's own checkpoint in
  ``deepspeed/`` (module, optimizer and scheduler state, per-rank partitions) and per-rank RNG
  states; :meth:`load_checkpoint` restores all of it on a freshly built strategy.
* **Packing** (``packing=``, from ``use_sequence_packing`` / ``sequence_packing_args``) as in
  ``hf_train`` (:mod:`roll_core.strategies.packing`): on by default where the model keeps packed
  rows apart; with several ranks the micro-batch count is the largest of any rank's plan.
* **LoRA** (``lora=``, from ``model_args.lora_*``) as in ``hf_train``: peft wraps the model before
  DeepSpeed does, so only the adapters reach DeepSpeed's optimizer; reference log-probs come from
  the base with adapters disabled; exported weights are merged (gathered first under ZeRO-3); the
  checkpoint's model directory is the adapter in peft's format.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from typing import Any

import torch

if not torch.cuda.is_available():  # before DeepSpeed picks its accelerator
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch.distributed as dist  # noqa: E402

from roll_core.errors import ConfigError, RollError  # noqa: E402
from roll_core.models import load_tokenizer, resolve_pretrain  # noqa: E402
from roll_core.strategies.base import LossFn, TrainStrategy  # noqa: E402
from roll_core.strategies.hf_common import (  # noqa: E402
    cfg_get,
    resolve_attn_implementation,
    set_num_threads,
    torch_dtype,
)
from roll_core.strategies.lora import (  # noqa: E402
    LoraSettings,
    adapter_payload,
    adapters_disabled,
    apply_lora,
    merged_state_dict,
    parameter_counts,
    save_adapter,
    save_merged,
)
from roll_core.strategies.packing import (  # noqa: E402
    MicroBatch,
    PackingSettings,
    micro_batch_plan,
    packed_attention,
    resolve_packing,
)
from roll_core.strategies.rng import load_state, rng_state, save_state, set_rng_state  # noqa: E402
from roll_core.strategies.settings import OptimizerSettings, resolve_settings, train_worker_kwargs  # noqa: E402
from roll_core.strategies.tensors import (  # noqa: E402
    label_log_probs,
    mask_or_none,
    positions,
    token_log_probs,
    validate_batch,
)
from roll_strategy_deepspeed.config import AUTO, TrainingNumbers, build_deepspeed_config  # noqa: E402

DS_DIR = "deepspeed"
#: torch dtype -> the model_args.dtype name DeepSpeed's config is derived from
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
DS_TAG = "roll"
RNG_FILE = "rng_state_rank{rank}.pt"


class DeepSpeedTrainStrategy(TrainStrategy):
    """Actor / reference strategy on a DeepSpeed engine (see the module docstring).

    Args:
        pretrain, seed, dtype, attn_implementation, cache_dir, gradient_checkpointing,
        logits_temperature, trainable, lora, settings, **training: as for ``hf_train``.
        zero_stage, offload_optimizer, offload_param: roll's shortcuts (``0..3``, ``"cpu"``).
        zero_optimization, bf16, fp16, gradient_clipping, train_batch_size,
        train_micro_batch_size_per_gpu, steps_per_print, wall_clock_breakdown: DeepSpeed's own
            config sections; ``"auto"`` (or absent) means "derive from the training args".
        deepspeed_config: any further DeepSpeed config sections, passed through verbatim.
        dist_backend: torch.distributed backend (default NCCL on CUDA, gloo otherwise).
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
        zero_stage: int | None = None,
        offload_optimizer: Any = None,
        offload_param: Any = None,
        zero_optimization: Mapping[str, Any] | None = None,
        bf16: Mapping[str, Any] | None = None,
        fp16: Mapping[str, Any] | None = None,
        gradient_clipping: Any = AUTO,
        train_batch_size: Any = AUTO,
        train_micro_batch_size_per_gpu: Any = AUTO,
        steps_per_print: int | None = None,
        wall_clock_breakdown: bool | None = None,
        deepspeed_config: Mapping[str, Any] | None = None,
        dist_backend: str | None = None,
        lora: LoraSettings | None = None,
        packing: PackingSettings | None = None,
        settings: OptimizerSettings | None = None,
        **training: Any,
    ):
        self.settings = resolve_settings(type(self).__name__, settings, training)
        set_num_threads(self.settings.num_threads)
        if logits_temperature <= 0:
            raise ConfigError(f"logits_temperature must be > 0, got {logits_temperature}.")
        on_cuda = torch.cuda.is_available()
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if on_cuda else torch.device("cpu")
        dtype = DTYPE_NAMES[torch_dtype(dtype, device)]  # None: bf16 on CUDA, fp32 on CPU (as hf_train)
        init_distributed(dist_backend or ("nccl" if on_cuda else "gloo"))
        torch.manual_seed(seed)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.trainable = trainable
        self.logits_temperature = float(logits_temperature)
        self.global_step = 0

        from transformers import AutoConfig

        numbers = TrainingNumbers(
            dtype=dtype, settings=self.settings, world_size=self.world_size,
            hidden_size=int(AutoConfig.from_pretrained(self.model_dir).hidden_size), on_cuda=on_cuda,
            trainable=trainable,
        )
        sections = {"zero_optimization": zero_optimization, "bf16": bf16, "fp16": fp16,
                    "gradient_clipping": gradient_clipping, "train_batch_size": train_batch_size,
                    "train_micro_batch_size_per_gpu": train_micro_batch_size_per_gpu,
                    "steps_per_print": steps_per_print, "wall_clock_breakdown": wall_clock_breakdown}
        self.ds_config = build_deepspeed_config(sections, numbers, zero_stage=zero_stage,
                                                offload_optimizer=offload_optimizer, offload_param=offload_param,
                                                extra=deepspeed_config)
        self.zero_stage = int(self.ds_config["zero_optimization"]["stage"])
        self.packing = packing or PackingSettings()
        attn = resolve_attn_implementation(attn_implementation, device)
        model = self._load_model(packed_attention(attn) if self.packing.enabled is not False else attn)
        if trainable and gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.lora = lora
        if lora is not None:
            model = apply_lora(model, lora)
        if not trainable:
            model.requires_grad_(False)
        self.engine = self._initialize(model)
        self.device = self.engine.device
        self.engine.eval()  # every rank runs the check (ZeRO-3 gathers parameters collectively)
        self.packs = resolve_packing(self.packing, lambda p: self.engine.module(**p.forward_kwargs()).logits,
                                     self.device, type(self).__name__)
        self.engine.train(trainable)

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int,
                           **overrides: Any) -> DeepSpeedTrainStrategy:
        """Build from an ``actor_train`` / ``reference`` worker config, as ``hf_train`` does.

        ``strategy_args.strategy_config`` may be a ROLL DeepSpeed preset (``${deepspeed_zero3}``):
        its ``gradient_accumulation_steps`` must be ``auto`` or equal ``training_args``'.
        """
        strategy_config = dict(cfg_get(worker_config, "strategy_args.strategy_config", {}) or {})
        ds_gas = strategy_config.pop("gradient_accumulation_steps", AUTO)
        kwargs = train_worker_kwargs(cls, _Overlay(worker_config, strategy_config), seed, "actor_train", overrides)
        gas = kwargs["settings"].gradient_accumulation_steps
        if ds_gas != AUTO and int(ds_gas) != int(gas):
            raise ConfigError(
                f"actor_train.strategy_args.strategy_config.gradient_accumulation_steps is {ds_gas!r} but "
                f"training_args.gradient_accumulation_steps is {gas!r}; set it to 'auto' or make them agree.")
        return cls(pretrain, **kwargs)

    # -- TrainStrategy ----------------------------------------------------------------------
    @property
    def mini_batch_size(self) -> int:
        """Rows each rank should pass to one :meth:`train_step` (one optimiser step)."""
        return self.settings.mini_batch_size

    def compute_log_probs(self, batch: Mapping[str, Any], *, with_entropy: bool = False):
        """``(log_probs [B, L-1], entropy [B, L-1] or None)``, masked by ``response_mask[:, 1:]``, on CPU."""
        validate_batch(batch)
        batch_size, length = batch["input_ids"].shape
        log_probs = torch.zeros(batch_size, length - 1)
        entropy = torch.zeros(batch_size, length - 1) if with_entropy else None
        micro = self._micro_batches(batch, train=False)
        self._check_lockstep(len(micro), "compute_log_probs")
        was_training = self.engine.training
        self.engine.eval()
        try:
            with torch.no_grad():
                for m in micro:
                    lp, ent = self._forward_micro(m, with_entropy)
                    log_probs[m.index, : m.width - 1] = lp.float().cpu()
                    if entropy is not None:
                        entropy[m.index, : m.width - 1] = ent.float().cpu()
        finally:
            self.engine.train(was_training)
        return log_probs, entropy

    def train_step(self, batch: Mapping[str, Any], loss_fn: LossFn, *,
                   with_entropy: bool | None = None) -> dict[str, float]:
        """One optimiser step over this rank's ``batch``; loss, grad_norm, lr, skipped, ``loss_fn``'s metrics.

        ``loss`` is the global-batch loss (summed over ranks); the other metrics are this rank's.
        """
        if not self.trainable:
            raise RollError("deepspeed_train was built with trainable=False (a reference model); it cannot train.")
        validate_batch(batch)
        want_entropy = bool(getattr(loss_fn, "needs_entropy", False) if with_entropy is None else with_entropy)
        micro = self._micro_batches(batch, train=True)
        self._check_lockstep(len(micro), "train_step")
        self.engine.train()
        lr = float(self.engine.get_lr()[0])
        total_loss, metric_sums, rows_seen = torch.zeros((), dtype=torch.float64), {}, 0
        for i, m in enumerate(micro):
            rows = len(m.index)
            self.engine.set_gradient_accumulation_boundary(i == len(micro) - 1)
            lp, ent = self._forward_micro(m, want_entropy)
            loss, metrics = loss_fn(m.mb, lp, ent)
            self.engine.backward(loss * self.engine.dp_world_size, scale_wrt_gas=False)
            total_loss += float(loss.detach())
            rows_seen += rows
            for key, value in (metrics or {}).items():
                metric_sums[key] = metric_sums.get(key, 0.0) + float(value) * rows
        own_norm = self._local_grad_norm()
        self.engine.step()
        grad_norm = self.engine.get_global_grad_norm()
        grad_norm = own_norm if grad_norm is None else float(grad_norm)
        if self.world_size > 1:
            dist.all_reduce(total_loss, op=dist.ReduceOp.SUM)  # float64 on CPU: gloo and NCCL both fine
        self.global_step += 1
        return {"loss": float(total_loss), "grad_norm": grad_norm, "lr": lr,
                "skipped": float(self.engine.skipped_steps),
                **{k: v / max(rows_seen, 1) for k, v in metric_sums.items()}}

    def compute_reference_log_probs(self, batch: Mapping[str, Any]):
        """The reference policy's log-probs: the base model, LoRA adapters disabled (LoRA only)."""
        with adapters_disabled(self.engine.module):
            return self.compute_log_probs(batch)[0]

    def parameter_counts(self) -> tuple[int, int]:
        return parameter_counts(self.engine.module)

    def export_adapter(self, *, with_base: bool = False):
        if self.lora is None:
            raise RollError("export_adapter: this deepspeed_train model has no LoRA adapter.")
        with self._gathered():
            return adapter_payload(self.engine.module, with_base=with_base)

    def save_model(self, path: str) -> None:
        """A standalone model directory (LoRA: the merged model); collective."""
        if self.lora is None:
            self.save_checkpoint(path)
            return
        weights = self.export_weights()
        if self.rank == 0:
            save_merged(self.engine.module, self.tokenizer, path, weights)
        dist.barrier()

    def export_weights(self) -> dict[str, torch.Tensor]:
        """HF-named CPU copies of every weight (tied names included); gathers ZeRO-3 shards; with
        LoRA, the merged weights.

        Collective under ZeRO-3: every rank calls it, every rank gets the full state dict.
        """
        if self.lora is not None:
            with self._gathered():
                return merged_state_dict(self.engine.module)
        module = self.engine.module
        tensors = dict(module.named_parameters(remove_duplicate=False))
        tensors.update(module.named_buffers(remove_duplicate=False))
        out: dict[str, torch.Tensor] = {}
        for name in module.state_dict().keys():
            tensor = tensors[name]
            gather = deepspeed.zero.GatheredParameters([tensor], enabled=hasattr(tensor, "ds_id"))
            with gather:
                out[name] = tensor.detach().to("cpu", copy=True)
        return out

    def save_checkpoint(self, path: str) -> None:
        """HF directory (rank 0) + DeepSpeed engine state + this rank's RNG state; collective."""
        weights = self.export_weights() if self.lora is None else None
        with self._gathered():  # collective under ZeRO-3
            if self.rank == 0:
                os.makedirs(path, exist_ok=True)
                if self.lora is not None:
                    save_adapter(self.engine.module, path)
                else:
                    self.engine.module.save_pretrained(path, state_dict=weights)
                self.tokenizer.save_pretrained(path)
        self.engine.save_checkpoint(os.path.join(path, DS_DIR), tag=DS_TAG,
                                    client_state={"global_step": self.global_step})
        os.makedirs(path, exist_ok=True)
        save_state(rng_state(), os.path.join(path, RNG_FILE.format(rank=self.rank)))
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote; call it on a freshly built strategy."""
        ds_dir = os.path.join(path, DS_DIR)
        if not os.path.isdir(os.path.join(ds_dir, DS_TAG)):
            raise RollError(f"{path} is not a deepspeed_train checkpoint: {ds_dir}/{DS_TAG} is missing "
                            "(checkpoints are tied to their strategy; hf_train's hold no DeepSpeed state).")
        load_path, client_state = self.engine.load_checkpoint(
            ds_dir, tag=DS_TAG, load_optimizer_states=self.trainable, load_lr_scheduler_states=self.trainable)
        if load_path is None:
            raise RollError(f"DeepSpeed could not load the checkpoint in {ds_dir}.")
        self.global_step = int((client_state or {}).get("global_step", 0))
        rng_file = os.path.join(path, RNG_FILE.format(rank=self.rank))
        if os.path.isfile(rng_file):
            set_rng_state(load_state(rng_file))  # weights_only: the file cannot run code

    # -- internals --------------------------------------------------------------------------
    def _load_model(self, attn: str) -> Any:
        from transformers import AutoModelForCausalLM

        with _zero3_init(self.ds_config if self.zero_stage == 3 else None):
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32,
                                                         attn_implementation=attn)
        model.config.use_cache = False
        return model

    def _initialize(self, model: Any) -> Any:
        if not self.trainable:
            engine, *_ = deepspeed.initialize(model=model, config=self.ds_config, dist_init_required=False)
            return engine
        weight_decay = self.ds_config["optimizer"]["params"]["weight_decay"]
        decay, no_decay = [], []
        for p in model.parameters():
            if p.requires_grad:  # ZeRO-3 shards are flat: their real shape is ds_shape
                (decay if len(getattr(p, "ds_shape", p.shape)) >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        engine, *_ = deepspeed.initialize(model=model, model_parameters=groups, config=self.ds_config,
                                          lr_scheduler=self.settings.lr_scheduler, dist_init_required=False)
        return engine

    def _gathered(self):
        """Every parameter whole on this rank for the duration (ZeRO-3; a no-op otherwise)."""
        params = list(self.engine.module.parameters())
        return deepspeed.zero.GatheredParameters(params, enabled=self.zero_stage == 3)

    def _micro_batches(self, batch: Mapping[str, Any], *, train: bool) -> list[MicroBatch]:
        """As ``hf_train``'s (packed under a token budget, or padded); with several ranks, every rank
        then splits to the largest count of any rank, so all run the same number of micro-batches."""
        rows = self.settings.per_device_train_batch_size if train else self.settings.forward_batch_size

        def plan(least: int) -> list[MicroBatch]:
            return micro_batch_plan(batch, self.packing, packing=self.packs, rows=rows, train=train,
                                    device=self.device, min_count=least)

        micro = plan(1)
        if self.world_size > 1:
            most = torch.tensor([len(micro)], dtype=torch.long, device=self.device)
            dist.all_reduce(most, op=dist.ReduceOp.MAX)
            if int(most) > len(micro):
                micro = plan(int(most))
        return micro

    def _forward_micro(self, micro: MicroBatch, with_entropy: bool):
        if micro.packed is not None:
            packed = micro.packed.response_only()
            logits = self.engine(**packed.forward_kwargs(), logits_to_keep=packed.src).logits[0]
            lp, ent = label_log_probs(logits, packed.target, self.logits_temperature, with_entropy)
            return packed.unpack(lp), (packed.unpack(ent) if ent is not None else None)
        mb = micro.mb
        logits = self.engine(input_ids=mb["input_ids"], attention_mask=mask_or_none(mb["attention_mask"]),
                             position_ids=positions(mb["attention_mask"])).logits
        return token_log_probs(logits, mb["input_ids"], mb["response_mask"], self.logits_temperature,
                               with_entropy)

    def _check_lockstep(self, count: int, what: str) -> None:
        """Every rank must run the same number of micro-batches (collective forwards/backwards)."""
        if self.world_size == 1:
            return
        both = torch.tensor([count, -count], dtype=torch.long, device=self.device)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        if int(both[0]) != count or int(-both[1]) != count:
            raise RollError(f"deepspeed_train.{what}: data-parallel ranks got different numbers of micro-batches "
                            f"(this rank {count}, others between {int(-both[1])} and {int(both[0])}); give every "
                            "rank the same number of rows.")

    def _local_grad_norm(self) -> float | None:
        """Stage 0 in fp32 keeps full gradients in ``.grad`` and DeepSpeed reports no norm: compute it."""
        if self.zero_stage != 0 or self.engine.bfloat16_enabled() or self.engine.fp16_enabled():
            return None
        grads = [p.grad for p in self.engine.module.parameters() if p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


class _Overlay:
    """A worker config seen with a replaced ``strategy_args.strategy_config`` (read duck-typed)."""

    def __init__(self, base: Any, strategy_config: Mapping[str, Any]):
        self._base, self._strategy_config = base, strategy_config

    def __getattr__(self, name: str) -> Any:
        if name == "strategy_args":
            return {"strategy_name": cfg_get(self._base, "strategy_args.strategy_name"),
                    "strategy_config": self._strategy_config}
        return cfg_get(self._base, name)


def init_distributed(backend: str) -> None:
    """Join (or, alone, create) the default process group from the standard environment variables.

    Inside ``roll run`` the rank's worker has joined its group already; DeepSpeed's communication
    layer still has to be set up over it (its world size would otherwise read 1).
    """
    if dist.is_initialized():
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False,
                                   dist_init_required=False)
        return
    if "WORLD_SIZE" not in os.environ:  # a single rank: make up the rendezvous
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _zero3_init(ds_config: Mapping[str, Any] | None):
    """Let ``from_pretrained`` build the model under ``deepspeed.zero.Init`` (ZeRO-3 only)."""
    if ds_config is None:
        yield
        return
    from transformers.integrations.deepspeed import HfDeepSpeedConfig, unset_hf_deepspeed_config

    keep_alive = HfDeepSpeedConfig(dict(ds_config))  # transformers holds only a weak reference
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del keep_alive
