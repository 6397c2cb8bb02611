"""LoRA for the train strategies, with peft: ROLL's ``model_args`` fields -> a ``PeftModel``.

ROLL's names and rules (``roll/configs/model_args.py``): LoRA is on when ``lora_target`` is set
(or an adapter is loaded with ``adapter_name_or_path``); ``lora_target`` is comma-separated module
names, a regular expression (when it holds one of ``* $ | (``), or ``all`` / ``all-linear`` (every
linear layer but the LM head); ``lora_alpha`` defaults to ``2 * lora_rank``; ``additional_target``
names modules trained in full besides the adapters (peft's ``modules_to_save``).

What the strategies do with it, and why:

* only the adapter (and ``additional_target``) parameters require grad, so only they reach the
  optimizer; the base weights stay exactly the pretrained ones;
* the reference policy is the same base with the adapters disabled (:func:`adapters_disabled`),
  so a run with a KL term holds one copy of the model, not two;
* inference engines get :func:`merged_state_dict` (base + scaled ``B @ A``, HF names) computed
  without touching the trained model (peft's ``merge_adapter`` / ``unmerge_adapter`` would leave
  rounding residue in the base weights and break bit-exact resume), or, for engines that serve
  adapters natively (vLLM), :func:`adapter_payload`;
* checkpoints hold the adapter in peft's format (``adapter_config.json`` +
  ``adapter_model.safetensors``, loadable with ``PeftModel.from_pretrained``), and optionally the
  merged model (:func:`save_merged`, loadable with plain transformers).

Import-light: peft and torch are imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from roll_core.errors import ConfigError, RollError
from roll_core.strategies.hf_common import cfg_get

#: ``lora_target`` values that mean "every linear layer but the output head" (peft's keyword)
ALL_LINEAR = ("all", "all-linear")
#: characters that make ``lora_target`` a regular expression rather than a list (ROLL's rule)
REGEX_CHARS = ("*", "$", "|", "(")
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: where a checkpoint keeps the merged model when asked (``save_merged``)
MERGED_DIR = "merged"


@dataclasses.dataclass(frozen=True)
class LoraSettings:
    """One role's LoRA settings, ROLL's ``model_args`` names without the ``lora_`` prefix."""

    target: str | None = None
    rank: int = 8
    alpha: int | None = None
    dropout: float = 0.0
    additional_target: str | None = None
    autocast_adapter_dtype: bool = True
    adapter_name_or_path: str | None = None

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ConfigError(f"model_args.lora_rank must be >= 1, got {self.rank}.")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model_args.lora_dropout must be in [0, 1), got {self.dropout}.")
        if self.target is None and self.adapter_name_or_path is None:
            raise ConfigError("LoRA needs model_args.lora_target (e.g. all-linear, or q_proj,v_proj) or an adapter "
                              "to continue from (model_args.adapter_name_or_path).")

    @classmethod
    def from_worker_config(cls, worker_config: Any) -> LoraSettings | None:
        """The settings of a worker section, or None when it trains without LoRA (no ``lora_target``
        and no ``adapter_name_or_path``, as in ROLL)."""
        target = cfg_get(worker_config, "model_args.lora_target")
        adapter = cfg_get(worker_config, "model_args.adapter_name_or_path")
        if target is None and adapter is None:
            return None
        return cls(
            target=target, rank=int(cfg_get(worker_config, "model_args.lora_rank", 8)),
            alpha=cfg_get(worker_config, "model_args.lora_alpha"),
            dropout=float(cfg_get(worker_config, "model_args.lora_dropout", 0.0)),
            additional_target=cfg_get(worker_config, "model_args.additional_target"),
            autocast_adapter_dtype=bool(cfg_get(worker_config, "model_args.autocast_adapter_dtype", True)),
            adapter_name_or_path=adapter,
        )

    @property
    def scale_alpha(self) -> int:
        """``lora_alpha``, defaulting to ``2 * lora_rank`` (ROLL's default)."""
        return int(self.alpha) if self.alpha else 2 * self.rank

    def target_modules(self) -> str | list[str]:
        """peft's ``target_modules``: ``all-linear``, a regular expression, or a list of names."""
        target = str(self.target).strip()
        if target.lower() in ALL_LINEAR:
            return "all-linear"
        if any(c in target for c in REGEX_CHARS):
            return target
        return [part.strip() for part in target.split(",") if part.strip()]

    def modules_to_save(self) -> list[str] | None:
        if not self.additional_target:
            return None
        return [part.strip() for part in str(self.additional_target).split(",") if part.strip()]

    def describe(self) -> str:
        """One line for run headers: what is trained."""
        if self.target is None:
            return f"LoRA adapter from {self.adapter_name_or_path}"
        extra = f", plus {self.additional_target} in full" if self.additional_target else ""
        start = f", starting from {self.adapter_name_or_path}" if self.adapter_name_or_path else ""
        return (f"LoRA rank {self.rank}, alpha {self.scale_alpha}, dropout {self.dropout:g} on "
                f"{self.target}{extra}{start}")

    def peft_config(self, task_type: str | None) -> Any:
        from peft import LoraConfig

        return LoraConfig(r=self.rank, lora_alpha=self.scale_alpha, lora_dropout=self.dropout,
                          target_modules=self.target_modules(), modules_to_save=self.modules_to_save(),
                          bias="none", task_type=task_type)


def apply_lora(model: Any, settings: LoraSettings, *, task_type: str | None = "CAUSAL_LM") -> Any:
    """``model`` wrapped in a ``PeftModel`` whose adapters (only) require grad.

    A new adapter's ``lora_B`` starts at zero (peft's default), so the wrapped model computes
    exactly what the base model does until the first update. With ``adapter_name_or_path`` the
    adapter is loaded (trainable) instead; its own ``adapter_config.json`` decides its shape.
    """
    from peft import PeftModel, get_peft_model

    if settings.adapter_name_or_path:
        path = settings.adapter_name_or_path
        if not os.path.isfile(os.path.join(path, ADAPTER_CONFIG)):
            raise ConfigError(f"model_args.adapter_name_or_path: {path} holds no {ADAPTER_CONFIG}; point it at a "
                              "directory written by peft's save_pretrained (a roll LoRA checkpoint is one).")
        return PeftModel.from_pretrained(model, path, is_trainable=True,
                                         autocast_adapter_dtype=settings.autocast_adapter_dtype)
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    full = {name.rsplit(".", 1)[-1] for name in settings.modules_to_save() or ()}
    if tied and full & {"lm_head", "embed_tokens"}:
        raise ConfigError(f"model_args.additional_target {settings.additional_target!r}: this model ties lm_head to "
                          "embed_tokens, and training one of them in full unties them, which an inference engine "
                          "loading this model cannot serve; leave them out of additional_target (the LoRA "
                          "adapters and other modules, e.g. norm, still train).")
    try:
        return get_peft_model(model, settings.peft_config(task_type),
                              autocast_adapter_dtype=settings.autocast_adapter_dtype)
    except ValueError as exc:  # e.g. a target module name the model does not have
        names = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if _is_linear(m)})
        raise ConfigError(f"model_args.lora_target {settings.target!r}: {exc} The model's linear layers are "
                          f"named {', '.join(names)} (or use all-linear).") from None


def _is_linear(module: Any) -> bool:
    import torch

    return isinstance(module, torch.nn.Linear)


def is_peft(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a roll-core dependency
        return False
    return isinstance(model, PeftModel)


def parameter_counts(model: Any) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts of ``model`` (tied weights counted once)."""
    trainable = total = 0
    for p in model.parameters():
        n = int(getattr(p, "ds_numel", p.numel()))  # ZeRO-3 shards report their full size
        total += n
        if p.requires_grad:
            trainable += n
    return trainable, total


def adapters_disabled(model: Any):
    """Context in which ``model`` (a ``PeftModel``) computes the base model: the reference policy."""
    if not is_peft(model):
        raise NotImplementedError("reference log-probs from the actor need LoRA adapters to disable; this model "
                                  "has none (the pipeline builds a reference worker for it).")
    return model.disable_adapter()


def merged_state_dict(model: Any) -> dict[str, Any]:
    """HF-named CPU tensors of the merged model: ``W + scale * B @ A`` for every adapted layer,
    the trained copy of each ``additional_target`` module, every other weight as it is.

    The model is not modified (see the module docstring); the names are the base model's, so any
    inference engine loads them like a plain ``state_dict``.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    adapter = model.active_adapter
    deltas: dict[str, Any] = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and adapter in getattr(module, "lora_A", {}):
                deltas[f"{name}.weight"] = module.get_delta_weight(adapter)
        out: dict[str, Any] = {}
        for key, value in base.state_dict().items():
            hf = hf_name(key, adapter)
            if hf is None:
                continue
            tensor = value.detach()
            if hf in deltas:
                tensor = tensor + deltas[hf].to(tensor.dtype)
            out[hf] = tensor.to("cpu", copy=True)
    return out


def hf_name(key: str, adapter: str = "default") -> str | None:
    """The base model's name of a peft-wrapped model's state-dict key; None for adapter tensors and
    for the frozen original of a ``modules_to_save`` module."""
    parts = key.split(".")
    if any(p.startswith("lora_") for p in parts) or "original_module" in parts:
        return None
    if "modules_to_save" in parts:
        i = parts.index("modules_to_save")
        if parts[i + 1] != adapter:
            return None
        parts = parts[:i] + parts[i + 2:]
    return ".".join(p for p in parts if p != "base_layer")


@dataclasses.dataclass
class LoraAdapter:
    """An adapter as a weight-sync payload for engines that serve LoRA natively (vLLM).

    ``tensors`` are peft's adapter state dict (what ``adapter_model.safetensors`` holds), ``config``
    its ``adapter_config.json``; ``base_weights`` (HF names), when set, replace the engine's base
    model first (after a warm start changed the base the adapters sit on).
    """

    tensors: dict[str, Any]
    config: dict[str, Any]
    base_weights: dict[str, Any] | None = None

    def save(self, path: str) -> str:
        """Write the adapter as a peft directory (what ``PeftModel.from_pretrained`` and vLLM read)."""
        import json

        from safetensors.torch import save_file

        os.makedirs(path, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.tensors.items()}, os.path.join(path, ADAPTER_WEIGHTS))
        with open(os.path.join(path, ADAPTER_CONFIG), "w") as f:
            json.dump(self.config, f, indent=2, default=str)
        return path


def adapter_payload(model: Any, *, with_base: bool = False) -> LoraAdapter:
    """The active adapter of ``model`` as a :class:`LoraAdapter` (CPU copies)."""
    from peft import get_peft_model_state_dict

    tensors = {k: v.detach().to("cpu", copy=True) for k, v in get_peft_model_state_dict(model).items()}
    config = model.peft_config[model.active_adapter].to_dict()
    config["target_modules"] = sorted(config["target_modules"]) if isinstance(
        config.get("target_modules"), (set, frozenset)) else config.get("target_modules")
    base = None
    if with_base:
        with adapters_disabled(model):
            base = {hf: v for hf, v in _base_state_dict(model).items()}
    return LoraAdapter(tensors, config, base)


def _base_state_dict(model: Any) -> dict[str, Any]:
    """The base weights (adapters and modules_to_save copies left out), HF names, CPU copies."""
    out = {}
    for key, value in model.get_base_model().state_dict().items():
        parts = key.split(".")
        if any(p.startswith("lora_") for p in parts) or "modules_to_save" in parts:
            continue
        hf = ".".join(p for p in parts if p not in ("base_layer", "original_module"))
        out[hf] = value.detach().to("cpu", copy=True)
    return out


def save_adapter(model: Any, path: str) -> None:
    """The adapter in peft's format (``PeftModel.from_pretrained(base, path)`` loads it)."""
    model.save_pretrained(path)


def load_adapter_weights(model: Any, path: str) -> None:
    """Restore the adapter (and ``additional_target`` modules) saved by :func:`save_adapter`."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    if not os.path.isfile(os.path.join(path, ADAPTER_WEIGHTS)):
        raise RollError(f"{path} holds no LoRA adapter ({ADAPTER_WEIGHTS} is missing): was it saved by a run "
                        "without LoRA? Resume with the same model_args.lora_* settings it was saved with.")
    try:
        result = set_peft_model_state_dict(model, load_peft_weights(path, device="cpu"))
    except RuntimeError as exc:  # shapes that do not fit: another lora_rank / lora_target
        raise RollError(f"the adapter in {path} does not fit this model (was it trained with other lora_rank / "
                        f"lora_target settings?): {str(exc).splitlines()[-1].strip()}") from None
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise RollError(f"the adapter in {path} does not fit this model: unexpected {unexpected[:5]} (was it "
                        "trained with other lora_target / lora_rank settings?)")


def save_merged(model: Any, tokenizer: Any, path: str, weights: Mapping[str, Any] | None = None) -> str:
    """The merged model as a plain transformers directory (``AutoModelForCausalLM.from_pretrained``)."""
    import copy

    import torch
    from safetensors.torch import save_file

    weights = dict(weights if weights is not None else merged_state_dict(model))
    base = model.get_base_model()
    os.makedirs(path, exist_ok=True)
    config = base.config
    tied = bool(getattr(config, "tie_word_embeddings", False))
    head, embedding = weights.get("lm_head.weight"), weights.get("model.embed_tokens.weight")
    if tied and head is not None and embedding is not None and not torch.equal(head, embedding):
        # the head was trained apart (additional_target: lm_head): it is not the embedding any more
        config = copy.deepcopy(config)
        config.tie_word_embeddings = False
        tied = False
    seen: set[int] = set()
    tensors = {}
    for name, tensor in weights.items():
        if tied and name == "lm_head.weight":
            continue  # the tied head is the embedding; transformers ties it again on load
        tensor = tensor.contiguous()
        if tensor.data_ptr() in seen:
            tensor = tensor.clone()
        seen.add(tensor.data_ptr())
        tensors[name] = tensor
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(path)
    generation = getattr(base, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path
