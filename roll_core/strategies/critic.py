"""The critic of ``hf_train`` (for ``adv_estimator: gae``): a transformer backbone + a value head.

Registered as the ``critic`` option of the ``hf_train`` strategy: a config selects the critic's
backend by ``critic.strategy_args.strategy_name: hf_train`` like ROLL does, and the pipeline
builds this class for the critic role.

* Model: ``AutoModel.from_pretrained(pretrain)`` (the causal LM minus its LM head) and a
  ``Linear(hidden, 1)`` head, zero-initialised so the first values are 0 (a neutral baseline)
  whatever the backbone.
* Values are label-aligned like every per-token quantity: ``values[:, j]`` is the head's output
  at position ``j`` (docs/algorithms.md §6.6: "the value head at positions [:-1]"), masked by
  ``response_mask[:, 1:]``.
* ``train_step(batch, value_loss_fn)`` with ``value_loss_fn(micro_batch, values) -> (loss,
  metrics)``, the loss pre-scaled to global normalisers as for the actor.
* Checkpoint: the backbone as a ``save_pretrained`` directory (loads with ``AutoModel``), the
  head as ``value_head.safetensors``, and the same ``trainer_state.pt`` as the actor.
* LoRA (``critic.model_args.lora_*``): adapters on the backbone (peft), the value head trained in
  full; the checkpoint then holds the backbone's adapter in peft's format instead of the backbone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from roll_core.errors import RollError
from roll_core.models import load_tokenizer, resolve_pretrain
from roll_core.models.saving import save_pretrained
from roll_core.strategies.base import CriticStrategy
from roll_core.strategies.hf_common import (
    checked_config_overrides,
    freeze_prefixes,
    load_state_dict_checked,
    resolve_attn_implementation,
    resolve_device,
    set_num_threads,
    torch_dtype,
)
from roll_core.strategies.hf_train import OptimizedModel
from roll_core.strategies.lora import (
    LoraSettings,
    apply_lora,
    load_adapter_weights,
    parameter_counts,
    save_adapter,
)
from roll_core.strategies.packing import MicroBatch, PackingSettings, packed_attention
from roll_core.strategies.settings import OptimizerSettings, resolve_settings, train_worker_kwargs
from roll_core.strategies.tensors import (
    mask_or_none,
    positions,
    read_safetensors_dir,
    validate_batch,
)

VALUE_HEAD_FILE = "value_head.safetensors"
#: ``value_loss_fn(micro_batch, values) -> (loss, metrics)``
ValueLossFn = Callable[[Mapping[str, Any], torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


class ValueModel(torch.nn.Module):
    """Backbone (``AutoModel``) + scalar head: ``[b, l]`` ids -> ``[b, l]`` values."""

    def __init__(self, backbone: Any):
        super().__init__()
        self.backbone = backbone
        self.value_head = torch.nn.Linear(backbone.config.hidden_size, 1, dtype=backbone.dtype)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kwargs):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               position_ids=position_ids, **kwargs).last_hidden_state
        return self.value_head(hidden).squeeze(-1)


class HFCriticStrategy(OptimizedModel, CriticStrategy):
    """Value model training for GAE (see the module docstring); same arguments as ``hf_train``'s actor.

    Args:
        pretrain, seed, dtype, attn_implementation, device, cache_dir, gradient_checkpointing,
        settings, **training: as for :class:`roll_core.strategies.hf_train.HFTrainStrategy`; built
        directly, the learning rate defaults to :data:`DEFAULT_SETTINGS`' 1e-5.
    """

    trainable = True
    DEFAULT_SETTINGS = OptimizerSettings(learning_rate=1e-5)

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
        lora: LoraSettings | None = None,
        packing: PackingSettings | None = None,
        settings: OptimizerSettings | None = None,
        **training: Any,
    ):
        self.settings = resolve_settings(type(self).__name__, settings, training, self.DEFAULT_SETTINGS)
        self.lora = lora
        set_num_threads(self.settings.num_threads)
        from transformers import AutoModel

        torch.manual_seed(seed)
        self.device = resolve_device(device)
        self.model_dir = resolve_pretrain(pretrain, cache_dir, seed=seed)
        self.tokenizer = load_tokenizer(self.model_dir)
        attn = resolve_attn_implementation(attn_implementation, self.device)
        backbone = AutoModel.from_pretrained(
            self.model_dir, dtype=torch_dtype(dtype, self.device),
            attn_implementation=packed_attention(attn) if packing is None or packing.enabled is not False else attn,
            **checked_config_overrides(self.model_dir, model_config_kwargs),
        )
        backbone.config.use_cache = False
        if gradient_checkpointing:
            backbone.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": bool(gradient_checkpointing_use_reentrant)})
        if lora is not None:  # adapters on the backbone; the value head (built below) trains in full
            backbone = apply_lora(backbone, lora, task_type=None)
        self.model = ValueModel(backbone).to(self.device)
        self._resolve_packing(packing, lambda p: self.model.backbone(**p.forward_kwargs()).last_hidden_state)
        self.frozen_parameters = freeze_prefixes(self.model.backbone, freeze_module_prefix)
        self._wrap_data_parallel()
        self._setup_optimizer()

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int, **overrides: Any) -> HFCriticStrategy:
        """Build from a ``critic`` worker config (the same ROLL fields as the actor's)."""
        return cls(pretrain, **train_worker_kwargs(cls, worker_config, seed, "critic", overrides))

    def parameter_counts(self) -> tuple[int, int]:
        return parameter_counts(self.model)

    def compute_values(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Label-aligned values ``[B, L-1]`` (masked by ``response_mask[:, 1:]``), on CPU."""
        validate_batch(batch)
        batch_size, length = batch["input_ids"].shape
        values = torch.zeros(batch_size, length - 1)
        self.model.eval()
        with torch.no_grad():
            for micro in self._micro_batches(batch, train=False):
                values[micro.index, : micro.width - 1] = self._values(micro).float().cpu()
        return values

    def train_step(self, batch: Mapping[str, Any], loss_fn: ValueLossFn) -> dict[str, float]:
        """One optimiser step over ``batch`` with ``loss_fn(micro_batch, values)``."""
        validate_batch(batch)
        return self._optimizer_step(batch, lambda micro: loss_fn(micro.mb, self._values(micro)))

    def save_checkpoint(self, path: str) -> None:
        from safetensors.torch import save_file

        from roll_core.distributed.process_group import rank

        os.makedirs(path, exist_ok=True)
        if rank() == 0:
            if self.lora is not None:
                save_adapter(self.model.backbone, path)
            else:
                save_pretrained(self.model.backbone, path)
            self.tokenizer.save_pretrained(path)
            head = {k: v.detach().cpu().contiguous() for k, v in self.model.value_head.state_dict().items()}
            save_file(head, os.path.join(path, VALUE_HEAD_FILE))
        self._save_trainer_state(path)

    def load_checkpoint(self, path: str) -> None:
        from safetensors.torch import load_file

        head_file = os.path.join(path, VALUE_HEAD_FILE)
        if not os.path.isfile(head_file):
            raise RollError(f"{path} is not a critic checkpoint: {VALUE_HEAD_FILE} is missing.")
        if self.lora is not None:
            load_adapter_weights(self.model.backbone, path)
        else:
            load_state_dict_checked(self.model.backbone, read_safetensors_dir(path))
        with torch.no_grad():
            self.model.value_head.load_state_dict(load_file(head_file))
        self._load_trainer_state(path)

    def _values(self, micro: MicroBatch) -> torch.Tensor:
        if micro.packed is not None:  # the head's outputs at the packed label positions
            packed = micro.packed.response_only()
            values = self._train_module()(**packed.forward_kwargs())[0]
            return packed.unpack(values[packed.src].float())
        mb = micro.mb
        mask = mb["attention_mask"]
        values = self._train_module()(mb["input_ids"], attention_mask=mask_or_none(mask), position_ids=positions(mask))
        return values[:, :-1].float() * mb["response_mask"][:, 1:].float()
