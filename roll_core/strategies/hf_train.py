"""``hf_train``: log-probs and training of a Hugging Face causal LM in pure torch (CPU or GPU).

One class serves the actor (trainable) and the reference model (``trainable=False``: eval mode,
no optimizer; only :meth:`compute_log_probs`). The critic lives in
:mod:`roll_core.strategies.critic` and shares the optimisation machinery defined here.

Decisions, and why:

* **One ``train_step`` = one optimiser step over the whole given batch.** The batch is split into
  micro-batches (packed: by a token budget; padded: ``per_device_train_batch_size`` rows, or
  ROLL's dynamic batching); each micro-batch's loss is
  back-propagated as returned by ``loss_fn`` and the gradients add up. ``loss_fn`` scales its
  loss by *global* normalisers (docs/algorithms.md §6.5), so the update does not depend on how the
  batch is split (a test pins this). ``gradient_accumulation_steps`` therefore only defines the
  mini-batch the pipeline should hand over: :attr:`mini_batch_size` =
  ``per_device_train_batch_size * gradient_accumulation_steps``. These numbers, and the optimiser's,
  are one :class:`~roll_core.strategies.settings.OptimizerSettings` shared with the other train
  strategies.
* **Packed by default** (:mod:`roll_core.strategies.packing`): a micro-batch's rows are packed
  into one sequence (position ids restarting per row, attention kept within each row) under a
  token budget, and the outputs are scattered back to the padded label-aligned layout, so
  ``loss_fn`` sees the same ``[b, l-1]`` tensors either way. Packing is used where a check at
  load time shows the model keeps packed rows apart; ``use_sequence_packing: false`` (``packing=
  PackingSettings(enabled=False)``) pads instead: rows are right-padded to the batch's longest
  row and each micro-batch of ``per_device_train_batch_size`` rows runs at its own longest row
  (tensors of width ``L`` are cut to ``l`` and label-aligned ones of width ``L-1`` to ``l-1``).
  Results are padded back with zeros.
* **Log-probs** are label-aligned ``[B, L-1]``, computed as ``z[label] - logsumexp(z)`` in float32
  (``z = logits / logits_temperature``), multiplied by ``response_mask[:, 1:]``.
  :meth:`compute_log_probs` returns ``(log_probs, entropy)``; ``entropy`` is ``None`` unless asked.
* **Optimiser**: ``training_args.optim`` (AdamW by default; fused AdamW, SGD, Adafactor); as in the Hugging Face Trainer, biases and norm weights (1-D parameters)
  get no weight decay. The scheduler is ``transformers.get_scheduler(lr_scheduler_type, ...)``,
  stepped once per ``train_step``. A non-finite gradient norm skips the update (counted in
  ``skipped``) rather than corrupting the weights.
* **Checkpoints** are a ``save_pretrained`` directory (safetensors + tokenizer) plus
  ``trainer_state.pt`` (optimizer, scheduler, step, and torch / CUDA / numpy / python RNG states,
  stored so that ``torch.load(weights_only=True)`` reads them: :mod:`roll_core.strategies.rng`);
  :meth:`load_checkpoint` restores all of it, so a resumed run continues bit-for-bit on CPU.
* **LoRA** (``lora=``, from ``model_args.lora_*``; :mod:`roll_core.strategies.lora`): the model is
  a peft ``PeftModel`` and only the adapters are trained; :meth:`compute_reference_log_probs` is
  the base model (adapters disabled), so no reference copy is needed; :meth:`export_weights` sends
  merged weights; checkpoints hold the adapter in peft's format (and the merged model under
  ``merged/`` with ``save_merged``).
* **The LM head runs on response positions only** in training and log-prob forwards (packed: the
  positions that predict a response token; padded: ``logits_to_keep`` from the first response
  token of the micro-batch on): prompt positions are
  masked out of every per-token quantity anyway, and with a 49k vocabulary the head's logits are
  a large share of a small model's step. The kept positions' logits are the same numbers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from roll_core.errors import ConfigError, RollError
from roll_core.models import load_tokenizer, resolve_pretrain
from roll_core.models.saving import save_pretrained
from roll_core.strategies.base import LossFn, TrainStrategy
from roll_core.strategies.hf_common import (
    freeze_prefixes,
    load_causal_lm,
    load_state_dict_checked,
    resolve_attn_implementation,
    resolve_device,
    set_num_threads,
    torch_dtype,
)
from roll_core.strategies.lora import (
    LoraSettings,
    adapter_payload,
    adapters_disabled,
    apply_lora,
    load_adapter_weights,
    merged_state_dict,
    parameter_counts,
    save_adapter,
    save_merged,
)
from roll_core.strategies.packing import (
    MicroBatch,
    PackedRows,
    PackingSettings,
    micro_batch_plan,
    packed_attention,
    resolve_packing,
)
from roll_core.strategies.rng import load_state, rng_state, save_state, set_rng_state
from roll_core.strategies.settings import OptimizerSettings, resolve_settings, train_worker_kwargs
from roll_core.strategies.tensors import (
    label_log_probs,
    logits_to_keep,
    mask_or_none,
    positions,
    read_safetensors_dir,
    token_log_probs,
    validate_batch,
)

TRAINER_STATE = "trainer_state.pt"
#: the RNG state of data-parallel rank > 0 (rank 0's is in TRAINER_STATE)
RANK_STATE = "rng_state_rank{rank}.pt"


class OptimizedModel:
    """AdamW + LR schedule + micro-batched, clipped optimiser steps + exact checkpoints.

    Shared by the actor and the critic; subclasses provide ``self.model`` (an ``nn.Module``),
    ``_forward_micro`` and the weight (de)serialisation hooks.
    """

    model: Any
    device: Any
    trainable: bool
    settings: OptimizerSettings
    #: the model wrapped in DistributedDataParallel when the role has several ranks (training only)
    ddp: Any = None
    #: how micro-batches are formed, and whether they are packed (:mod:`roll_core.strategies.packing`)
    packing: PackingSettings = PackingSettings()
    packs: bool = False

    @property
    def mini_batch_size(self) -> int:
        """Rows the pipeline should pass to one ``train_step`` (one optimiser step) on this rank."""
        return self.settings.mini_batch_size

    def _wrap_data_parallel(self) -> None:
        """Several ranks: train through torch's DistributedDataParallel (gloo on CPU, nccl on GPU).

        DDP averages gradients over ranks, while every rank's loss is already its share of the
        global-batch loss (global normalisers): the backward multiplies by the number of ranks, so
        the update is the whole batch's, whatever the number of ranks.
        """
        from roll_core.distributed.process_group import world_size

        if self.trainable and world_size() > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.ddp = DistributedDataParallel(self.model, device_ids=None)

    def offload(self) -> None:
        """Move the weights and the optimizer state to CPU memory while a colocated role (the
        inference engine) uses the GPU; :meth:`reload` brings them back. Nothing to do on CPU, and
        nothing under DDP (its gradient buckets live on the device)."""
        if self.device.type != "cuda" or self.ddp is not None or getattr(self, "_offloaded", False):
            return
        self._move_state("cpu")
        self._offloaded = True
        torch.cuda.empty_cache()

    def reload(self) -> None:
        if not getattr(self, "_offloaded", False):
            return
        self._move_state(self.device)
        self._offloaded = False

    def _move_state(self, device: Any) -> None:
        self.model.to(device)
        optimizer = getattr(self, "optimizer", None)
        for state in (optimizer.state.values() if optimizer is not None else ()):
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    state[key] = value.to(device, non_blocking=True)

    def _micro_batches(self, batch: Mapping[str, Any], *, train: bool) -> list[MicroBatch]:
        """The micro-batches of one train step (``train``) or forward-only pass: packed under a token
        budget when this strategy packs, else padded (:func:`~roll_core.strategies.packing.micro_batch_plan`)."""
        rows = self.settings.per_device_train_batch_size if train else self.settings.forward_batch_size
        return micro_batch_plan(batch, self.packing, packing=self.packs, rows=rows, train=train, device=self.device)

    def _resolve_packing(self, packing: PackingSettings | None, outputs: Any) -> None:
        """Pack when asked (or by default) and the model keeps packed rows apart; ``outputs(packed)``
        is the model's per-position output the check compares."""
        self.packing = packing or PackingSettings()
        was_training = self.model.training
        self.model.eval()
        try:
            self.packs = resolve_packing(self.packing, outputs, self.device, type(self).__name__)
        finally:
            self.model.train(was_training)

    def _train_module(self) -> Any:
        """What training forwards go through: the DDP wrapper while training with several ranks."""
        return self.ddp if self.ddp is not None and self.model.training else self.model

    def _setup_optimizer(self) -> None:
        s = self.settings
        self.global_step = 0
        self.skipped_steps = 0
        decay, no_decay = [], []
        for p in self.model.parameters():
            if p.requires_grad:
                (decay if p.dim() >= 2 else no_decay).append(p)
        self.optimizer = s.optimizer(
            [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay, "weight_decay": 0.0}])
        self.scheduler = s.lr_scheduler(self.optimizer)

    def _optimizer_step(self, batch: Mapping[str, Any], run_micro: Any) -> dict[str, float]:
        """Backward every micro-batch (``run_micro(micro_batch) -> (loss, metrics)``), clip, step once."""
        if not self.trainable:
            raise RollError(f"{type(self).__name__} was built with trainable=False (a reference model); "
                            "it cannot train.")
        from contextlib import nullcontext

        from roll_core.distributed.process_group import all_reduce_sum, world_size

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total_loss, metric_sums, rows_seen = 0.0, {}, 0
        ranks = world_size() if self.ddp is not None else 1
        micro = self._micro_batches(batch, train=True)
        for i, micro_batch in enumerate(micro):
            rows = len(micro_batch.index)
            # gradients are all-reduced once, in the last micro-batch's backward
            with self.ddp.no_sync() if self.ddp is not None and i < len(micro) - 1 else nullcontext():
                loss, metrics = run_micro(micro_batch)
                (loss * ranks).backward()
            total_loss += float(loss.detach())
            rows_seen += rows
            for key, value in (metrics or {}).items():
                metric_sums[key] = metric_sums.get(key, 0.0) + float(value) * rows
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        max_norm = self.settings.max_grad_norm
        limit = max_norm if max_norm and max_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit))
        lr = float(self.scheduler.get_last_lr()[0])
        if np.isfinite(grad_norm):
            self.optimizer.step()
            self.scheduler.step()
        else:
            self.skipped_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        if ranks > 1:  # each rank holds its share of the global-batch loss
            total_loss = all_reduce_sum(total_loss)
        return {"loss": total_loss, "grad_norm": grad_norm, "lr": lr, "skipped": float(self.skipped_steps),
                **{k: v / max(rows_seen, 1) for k, v in metric_sums.items()}}

    # -- checkpoints ------------------------------------------------------------------------
    def _save_trainer_state(self, path: str) -> None:
        """Rank 0 writes ``trainer_state.pt``; with several ranks each other rank writes its own RNG
        state (the optimizer state is the same on every DDP rank), then all wait for each other."""
        from roll_core.distributed.process_group import barrier, rank

        state = {
            "global_step": self.global_step,
            "skipped_steps": self.skipped_steps,
            "optimizer": self.optimizer.state_dict() if self.trainable else None,
            "scheduler": self.scheduler.state_dict() if self.trainable else None,
            "rng": rng_state(),
        }
        if rank() == 0:
            save_state(state, os.path.join(path, TRAINER_STATE))
        else:
            os.makedirs(path, exist_ok=True)
            save_state({"rng": state["rng"]}, os.path.join(path, RANK_STATE.format(rank=rank())))
        barrier()

    def _load_trainer_state(self, path: str) -> None:
        from roll_core.distributed.process_group import rank

        file = os.path.join(path, TRAINER_STATE)
        if not os.path.isfile(file):
            raise RollError(f"{path} is not a roll checkpoint: {TRAINER_STATE} is missing.")
        state = load_state(file)  # weights_only: a checkpoint directory's file never runs code
        self.global_step = int(state["global_step"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        if self.trainable and state["optimizer"] is not None:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        rng = state["rng"]
        if rank() > 0:
            own = os.path.join(path, RANK_STATE.format(rank=rank()))
            if not os.path.isfile(own):
                raise RollError(f"{path} holds no state of rank {rank()} ({RANK_STATE.format(rank=rank())}): it "
                                "was saved with fewer ranks; resume with the same device_mapping / world_size.")
            rng = load_state(own)["rng"]
        set_rng_state(rng)


class HFTrainStrategy(OptimizedModel, TrainStrategy):
    """Actor / reference strategy over a Hugging Face causal LM (see the module docstring).

    Args:
        pretrain: anything :func:`roll_core.models.resolve_pretrain` accepts.
        seed: seeds a tiny model's init (via ``resolve_pretrain``) and torch's global RNG.
        dtype, attn_implementation, device, cache_dir: as for ``hf_infer``.
        gradient_checkpointing: recompute activations in backward (ROLL enables it unless
            ``model_args.disable_gradient_checkpointing``); ``gradient_checkpointing_use_reentrant``
            picks torch's reentrant implementation (default: the non-reentrant one).
        model_config_kwargs: overrides of the model's HF config (``model_args.model_config_kwargs``).
        freeze_module_prefix: comma-separated parameter-name prefixes left out of training.
        logits_temperature: logits are divided by it before log-softmax (match the sampler's T).
        trainable: False builds a reference model: eval mode, frozen, no optimizer.
        lora: train LoRA adapters instead of the whole model (see the module docstring).
        save_merged: with LoRA, checkpoints also hold the merged model under ``merged/``.
        settings: the optimiser, schedule, micro-batch sizes and threads (see
            :class:`~roll_core.strategies.settings.OptimizerSettings`).
        **training: :class:`OptimizerSettings` fields by name (``learning_rate=1e-3``), applied over
            ``settings``.
    """

    def __init__(
        self,
        pretrain: str,
        *,
        seed: int = 0,
        dtype: str | None = "fp32",
        attn_implementation: str | None = None,
        device: str | None = None,
        cache_dir: str | None = None,
        gradient_checkpointing: bool = False,
        gradient_checkpointing_use_reentrant: bool | None = None,
        model_config_kwargs: Mapping[str, Any] | None = None,
        freeze_module_prefix: str | None = None,
        logits_temperature: float = 1.0,
        trainable: bool = True,
        lora: LoraSettings | None = None,
        save_merged: bool = False,
        packing: PackingSettings | None = None,
        settings: OptimizerSettings | None = None,
        **training: Any,
    ):
        self.settings = resolve_settings(type(self).__name__, settings, training)
        set_num_threads(self.settings.num_threads)
        if lora is not None and freeze_module_prefix:
            raise ConfigError("model_args.freeze_module_prefix with LoRA: the base model is frozen already and only "
                              "the adapters train; unset freeze_module_prefix (additional_target trains modules "
                              "in full).")
        if logits_temperature <= 0:
            raise ConfigError(f"logits_temperature must be > 0, got {logits_temperature}.")
        torch.manual_seed(seed)
        self.device = resolve_device(device)
        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        attn = resolve_attn_implementation(attn_implementation, self.device)
        if packing is None or packing.enabled is not False:
            attn = packed_attention(attn)
        self.model = load_causal_lm(self.model_dir, torch_dtype(dtype, self.device), attn, self.device,
                                    model_config_kwargs)
        self.trainable = trainable
        self.logits_temperature = float(logits_temperature)
        self.model.config.use_cache = False
        self.lora = lora
        self.save_merged = bool(save_merged)
        if trainable and gradient_checkpointing:
            self.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": bool(gradient_checkpointing_use_reentrant)})
            if lora is not None and gradient_checkpointing_use_reentrant:
                self.model.enable_input_require_grads()  # reentrant checkpoints need a grad-carrying input
        if lora is not None:
            self.model = apply_lora(self.model, lora)
        self._resolve_packing(packing, lambda p: self.model(**p.forward_kwargs()).logits)
        if trainable:
            self.frozen_parameters = freeze_prefixes(self.model, freeze_module_prefix)
            self._wrap_data_parallel()
            self._setup_optimizer()
        else:
            self.model.eval().requires_grad_(False)
            self.global_step, self.skipped_steps = 0, 0

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int, **overrides: Any) -> HFTrainStrategy:
        """Build from an ``actor_train`` / ``reference`` worker config (ROLL names, duck-typed).

        Reads ``model_args.{dtype, attn_implementation, disable_gradient_checkpointing}``, the
        settings (:meth:`OptimizerSettings.from_worker_config`), and merges
        ``strategy_args.strategy_config``. Pass ``num_training_steps`` (and ``trainable=False``
        for a reference) as overrides.
        """
        return cls(pretrain, **train_worker_kwargs(cls, worker_config, seed, "actor_train", overrides))

    # -- TrainStrategy ----------------------------------------------------------------------
    def compute_log_probs(self, batch: Mapping[str, Any], *, with_entropy: bool = False):
        """``(log_probs [B, L-1], entropy [B, L-1] or None)``, masked by ``response_mask[:, 1:]``, on CPU."""
        validate_batch(batch)
        batch_size, length = batch["input_ids"].shape
        log_probs = torch.zeros(batch_size, length - 1)
        entropy = torch.zeros(batch_size, length - 1) if with_entropy else None
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for micro in self._micro_batches(batch, train=False):
                    lp, ent = self._forward_micro(micro, with_entropy)
                    log_probs[micro.index, : micro.width - 1] = lp.float().cpu()
                    if entropy is not None:
                        entropy[micro.index, : micro.width - 1] = ent.float().cpu()
        finally:
            self.model.train(was_training)
        return log_probs, entropy

    def compute_reference_log_probs(self, batch: Mapping[str, Any]):
        """The reference policy's log-probs: the base model, LoRA adapters disabled (LoRA only)."""
        with adapters_disabled(self.model):
            return self.compute_log_probs(batch)[0]

    def parameter_counts(self) -> tuple[int, int]:
        return parameter_counts(self.model)

    def train_step(self, batch: Mapping[str, Any], loss_fn: LossFn, *,
                   with_entropy: bool | None = None) -> dict[str, float]:
        """One optimiser step over ``batch``; returns loss, grad_norm, lr, skipped and ``loss_fn``'s metrics.

        ``loss_fn`` gets entropy when ``with_entropy`` (default: ``loss_fn.needs_entropy`` if set).
        """
        validate_batch(batch)
        want_entropy = bool(getattr(loss_fn, "needs_entropy", False) if with_entropy is None else with_entropy)

        def run(micro: MicroBatch):
            lp, ent = self._forward_micro(micro, want_entropy)
            return loss_fn(micro.mb, lp, ent)

        return self._optimizer_step(batch, run)

    def export_weights(self) -> dict[str, torch.Tensor]:
        """HF-named CPU copies of every weight (tied names included), safe to hand to another process;
        with LoRA, the merged weights (the trained model itself is left as it is)."""
        if self.lora is not None:
            return merged_state_dict(self.model)
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def device_weights(self) -> dict[str, torch.Tensor] | None:
        """The HF-named weights where they live (no copy), for a weight handoff that stays on the GPU
        (:mod:`roll_core.workers.weight_handoff`); ``None`` where only :meth:`export_weights` fits
        (LoRA: merged weights are computed; offloaded: the weights are not on the device)."""
        if self.lora is not None or getattr(self, "_offloaded", False):
            return None
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def export_adapter(self, *, with_base: bool = False):
        """The LoRA adapter as a weight-sync payload for engines serving adapters natively (vLLM)."""
        if self.lora is None:
            raise RollError("export_adapter: this hf_train model has no LoRA adapter (model_args.lora_target unset).")
        return adapter_payload(self.model, with_base=with_base)

    def save_checkpoint(self, path: str) -> None:
        """Collective with several ranks: rank 0 writes the model (with LoRA: the adapter, peft's
        format, and the merged model under ``merged/`` when ``save_merged``), every rank its trainer state."""
        from roll_core.distributed.process_group import rank

        os.makedirs(path, exist_ok=True)
        if rank() == 0:
            if self.lora is not None:
                save_adapter(self.model, path)
                if self.save_merged:
                    save_merged(self.model, self.tokenizer, os.path.join(path, "merged"))
            else:
                save_pretrained(self.model, path)
            self.tokenizer.save_pretrained(path)
        self._save_trainer_state(path)

    def save_model(self, path: str) -> None:
        """A standalone model directory other workers can start from (LoRA: the merged model)."""
        from roll_core.distributed.process_group import barrier, rank

        if self.lora is None:
            self.save_checkpoint(path)
            return
        if rank() == 0:
            save_merged(self.model, self.tokenizer, path)
        barrier()

    def load_checkpoint(self, path: str) -> None:
        if self.lora is not None:
            load_adapter_weights(self.model, path)
        else:
            load_state_dict_checked(self.model, read_safetensors_dir(path))
        self._load_trainer_state(path)

    # -- internals --------------------------------------------------------------------------
    def _forward_micro(self, micro: MicroBatch, with_entropy: bool):
        if micro.packed is not None:
            return self._forward_packed(micro.packed, with_entropy)
        mb = micro.mb
        keep = logits_to_keep(mb["response_mask"])
        logits = self._train_module()(input_ids=mb["input_ids"], attention_mask=mask_or_none(mb["attention_mask"]),
                                      position_ids=positions(mb["attention_mask"]), logits_to_keep=keep).logits
        return token_log_probs(logits, mb["input_ids"], mb["response_mask"], self.logits_temperature,
                               with_entropy)

    def _forward_packed(self, packed: PackedRows, with_entropy: bool):
        """One packed forward; the LM head runs on the positions that predict a response token only."""
        packed = packed.response_only()
        logits = self._train_module()(**packed.forward_kwargs(), logits_to_keep=packed.src).logits[0]
        lp, ent = label_log_probs(logits, packed.target, self.logits_temperature, with_entropy)
        return packed.unpack(lp), (packed.unpack(ent) if ent is not None else None)
