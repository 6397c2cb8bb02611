"""``strategy_config`` + training args -> one complete DeepSpeed config (pure, import-light).

Two spellings are accepted, and may be mixed:

* **DeepSpeed's own sections**, as ROLL's ``deepspeed_zero*.yaml`` presets write them
  (``zero_optimization``, ``bf16``, ``fp16``, ``gradient_clipping``, ``train_batch_size``,
  ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``steps_per_print``,
  ``wall_clock_breakdown``), with ``"auto"`` wherever roll should fill the value in (the Hugging Face
  Trainer convention ROLL inherits), plus ``deepspeed_config`` for any other DeepSpeed section.
* **roll's shortcuts**: ``zero_stage: 0..3``, ``offload_optimizer: cpu``, ``offload_param: cpu``.

Values roll derives (precision from ``model_args.dtype``, batch sizes and clipping from
``training_args``, the optimizer from the learning-rate settings) must agree with explicit
DeepSpeed values: a contradiction is a :class:`~roll_core.errors.ConfigError` naming both, never a
silent choice of one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roll_core.errors import ConfigError
from roll_core.strategies.hf_common import DTYPES
from roll_core.strategies.settings import OptimizerSettings

AUTO = "auto"
WHERE = "actor_train.strategy_args.strategy_config"
#: keys roll writes itself; ``deepspeed_config`` may not set them
DERIVED = ("optimizer", "scheduler", "train_batch_size", "train_micro_batch_size_per_gpu",
           "gradient_accumulation_steps", "gradient_clipping", "bf16", "fp16", "zero_optimization")
#: ``zero_optimization`` sizes that "auto" derives from the model's hidden size (as HF does)
_AUTO_ZERO_SIZES = {
    "reduce_bucket_size": lambda h: h * h,
    "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
    "stage3_param_persistence_threshold": lambda h: 10 * h,
}
_OFFLOAD_DEVICES = ("cpu", "none", "nvme")


@dataclass(frozen=True)
class TrainingNumbers:
    """What roll knows from ``training_args`` / ``model_args`` and the process group."""

    dtype: str
    settings: OptimizerSettings
    world_size: int
    hidden_size: int
    on_cuda: bool
    trainable: bool = True


def build_deepspeed_config(sections: Mapping[str, Any], numbers: TrainingNumbers, *,
                           zero_stage: int | None = None, offload_optimizer: Any = None,
                           offload_param: Any = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The complete DeepSpeed config (no ``"auto"`` left); see the module docstring."""
    cfg: dict[str, Any] = {k: copy.deepcopy(v) for k, v in sections.items() if v is not None}
    clash = sorted(set(extra or {}) & set(DERIVED))
    if clash:
        raise ConfigError(f"{WHERE}.deepspeed_config.{clash[0]}: roll derives this section; set it as "
                          f"{WHERE}.{clash[0]} (or through training_args / model_args) instead.")
    cfg.update(copy.deepcopy(dict(extra or {})))

    precision = DTYPES.get(str(numbers.dtype).lower())
    if precision is None:
        raise ConfigError(f"model_args.dtype: unknown dtype {numbers.dtype!r}; use one of {', '.join(sorted(DTYPES))}.")
    for section, wanted in (("bf16", precision == "bfloat16"), ("fp16", precision == "float16")):
        cfg[section] = _precision_section(cfg.get(section), section, wanted, numbers.dtype)

    settings = numbers.settings
    micro, gas = settings.per_device_train_batch_size, settings.gradient_accumulation_steps
    _agree(cfg, "train_micro_batch_size_per_gpu", micro, "training_args.per_device_train_batch_size")
    _agree(cfg, "gradient_accumulation_steps", gas, "training_args.gradient_accumulation_steps")
    _agree(cfg, "train_batch_size", micro * gas * numbers.world_size,
           "per_device_train_batch_size x gradient_accumulation_steps x data-parallel ranks")
    clip = float(settings.max_grad_norm) if settings.max_grad_norm and settings.max_grad_norm > 0 else 0.0
    _agree(cfg, "gradient_clipping", clip, "training_args.max_grad_norm")

    cfg["zero_optimization"] = _zero_section(cfg.get("zero_optimization"), numbers, zero_stage,
                                             offload_optimizer, offload_param)
    stage = cfg["zero_optimization"]["stage"]
    offloads_optimizer = _offload_device(cfg["zero_optimization"].get("offload_optimizer")) not in (None, "none")
    if numbers.trainable:
        settings.require_adamw("deepspeed_train")
        cfg["optimizer"] = {"type": "AdamW", "params": {
            "lr": settings.learning_rate, "betas": list(settings.adam_betas), "eps": settings.adam_epsilon,
            "weight_decay": settings.weight_decay,
            # torch's AdamW unless offloading (which needs DeepSpeedCPUAdam): no op build needed
            "torch_adam": not offloads_optimizer,
        }}
    else:  # a frozen (reference) model: only ZeRO-3's parameter sharding means anything
        cfg.pop("optimizer", None)
        if stage != 3:
            cfg["zero_optimization"] = {"stage": 0}
    leftover = _find_auto(cfg)
    if leftover:
        raise ConfigError(f"{WHERE}.{leftover} is 'auto', which roll cannot fill in; give a value.")
    return cfg


def _precision_section(section: Any, name: str, wanted: bool, dtype: str) -> dict[str, Any]:
    section = dict(section or {})
    enabled = section.get("enabled", AUTO)
    if enabled != AUTO and bool(enabled) != wanted:
        raise ConfigError(f"{WHERE}.{name}.enabled is {enabled!r} but model_args.dtype is {dtype!r}; set "
                          f"model_args.dtype to choose the precision (and {name}.enabled: auto).")
    section["enabled"] = wanted
    return section


def _agree(cfg: dict[str, Any], key: str, value: Any, source: str) -> None:
    given = cfg.get(key, AUTO)
    if given != AUTO and float(given) != float(value):
        raise ConfigError(f"{WHERE}.{key} is {given!r} but {source} gives {value!r}; set it to 'auto' "
                          "(roll fills it in) or make them agree.")
    cfg[key] = value


def _offload_device(value: Any) -> str | None:
    if value is None:
        return None
    device = value.get("device", "none") if isinstance(value, Mapping) else value
    return str(device).lower()


def _offload_section(value: Any, key: str, on_cuda: bool) -> dict[str, Any] | None:
    device = _offload_device(value)
    if device is None:
        return None
    if device not in _OFFLOAD_DEVICES:
        raise ConfigError(f"{WHERE}.{key}: unknown offload device {device!r}; use one of {', '.join(_OFFLOAD_DEVICES)}.")
    section = dict(value) if isinstance(value, Mapping) else {"device": device}
    section.setdefault("pin_memory", on_cuda)  # pinning needs an accelerator
    return section


def _zero_section(section: Any, numbers: TrainingNumbers, zero_stage: int | None, offload_optimizer: Any,
                  offload_param: Any) -> dict[str, Any]:
    zero = dict(section or {})
    for key, shortcut in (("stage", zero_stage), ("offload_optimizer", offload_optimizer),
                          ("offload_param", offload_param)):
        if shortcut is None:
            continue
        if key in zero and zero[key] != shortcut:
            raise ConfigError(f"{WHERE}: the shortcut {'zero_stage' if key == 'stage' else key}={shortcut!r} "
                              f"contradicts zero_optimization.{key}={zero[key]!r}; keep one of them.")
        zero[key] = shortcut
    stage = zero.setdefault("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"{WHERE}.zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}.")
    for key in ("offload_optimizer", "offload_param"):
        value = _offload_section(zero.get(key), key, numbers.on_cuda)
        if value is None:
            zero.pop(key, None)
        else:
            zero[key] = value
    if _offload_device(zero.get("offload_optimizer")) not in (None, "none") and stage == 0:
        raise ConfigError(f"{WHERE}: offload_optimizer needs ZeRO stage 1, 2 or 3 (zero_stage is 0).")
    if _offload_device(zero.get("offload_param")) not in (None, "none") and stage != 3:
        raise ConfigError(f"{WHERE}: offload_param needs ZeRO stage 3 (zero_stage is {stage}).")
    for key, rule in _AUTO_ZERO_SIZES.items():
        if zero.get(key) == AUTO:
            zero[key] = rule(numbers.hidden_size)
    return zero


def _find_auto(value: Any, path: str = "") -> str | None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _find_auto(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    return path if value == AUTO else None
