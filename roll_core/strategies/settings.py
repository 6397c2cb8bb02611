"""The optimiser, schedule and micro-batching settings every train strategy takes, read once.

``hf_train``, its critic, ``deepspeed_train`` and ``megatron_train`` all take the same Hugging Face
``TrainingArguments``-named settings; :class:`OptimizerSettings` holds them, and
:meth:`OptimizerSettings.from_worker_config` is the one place that reads them from a worker config.
Strategies accept either ``settings=OptimizerSettings(...)`` or the fields as keywords
(``HFTrainStrategy(path, learning_rate=1e-3)``); :func:`resolve_settings` merges the two.
Import-light (no torch).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from collections.abc import Mapping
from typing import Any

from roll_core.errors import ConfigError, did_you_mean
from roll_core.strategies.hf_common import cfg_get

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """AdamW, LR schedule, clipping, micro-batch sizes and torch threads of one train strategy.

    ``warmup_steps`` < 1 is a fraction of ``num_training_steps``, as is ``warmup_ratio`` (HF's
    conventions); ``max_grad_norm`` None or <= 0 disables clipping (the norm is still reported);
    ``per_device_train_batch_size`` rows go into one micro-batch, and ``gradient_accumulation_steps``
    only sets :attr:`mini_batch_size`; ``infer_batch_size`` (default: the train one) is the
    micro-batch of forward-only passes; ``num_threads`` sets torch's intra-op threads (None: torch's
    default).
    """

    learning_rate: float = 1e-6
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_epsilon: float = 1e-8
    max_grad_norm: float | None = 1.0
    warmup_steps: int | float = 0
    warmup_ratio: float = 0.0
    lr_scheduler_type: str = "constant"
    lr_scheduler_kwargs: Mapping[str, Any] | None = None
    num_training_steps: int | None = None
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    infer_batch_size: int | None = None
    num_threads: int | None = None
    optim: str = "adamw_torch"

    def __post_init__(self) -> None:
        object.__setattr__(self, "adam_betas", tuple(self.adam_betas))
        object.__setattr__(self, "per_device_train_batch_size", int(self.per_device_train_batch_size))
        object.__setattr__(self, "gradient_accumulation_steps", int(self.gradient_accumulation_steps))
        if self.per_device_train_batch_size < 1 or self.gradient_accumulation_steps < 1:
            raise ConfigError("training_args: per_device_train_batch_size and gradient_accumulation_steps "
                              "must be >= 1.")

    @classmethod
    def from_worker_config(cls, worker_config: Any) -> OptimizerSettings:
        """Read ROLL's ``training_args`` (``max_steps`` > 0 as ``num_training_steps``), ``infer_batch_size``,
        and any of these fields given in ``strategy_args.strategy_config`` (which wins)."""
        targs = "training_args."
        values: dict[str, Any] = {
            "learning_rate": cfg_get(worker_config, targs + "learning_rate", 1e-6),
            "weight_decay": cfg_get(worker_config, targs + "weight_decay", 0.0),
            "adam_betas": (cfg_get(worker_config, targs + "adam_beta1", 0.9),
                           cfg_get(worker_config, targs + "adam_beta2", 0.999)),
            "adam_epsilon": cfg_get(worker_config, targs + "adam_epsilon", 1e-8),
            "max_grad_norm": cfg_get(worker_config, targs + "max_grad_norm", 1.0),
            "warmup_steps": cfg_get(worker_config, targs + "warmup_steps", 0),
            "warmup_ratio": cfg_get(worker_config, targs + "warmup_ratio", 0.0),
            "lr_scheduler_type": str(cfg_get(worker_config, targs + "lr_scheduler_type", "constant")),
            "lr_scheduler_kwargs": cfg_get(worker_config, targs + "lr_scheduler_kwargs"),
            "per_device_train_batch_size": cfg_get(worker_config, targs + "per_device_train_batch_size", 1),
            "gradient_accumulation_steps": cfg_get(worker_config, targs + "gradient_accumulation_steps", 1),
            "infer_batch_size": cfg_get(worker_config, "infer_batch_size"),
            "optim": str(cfg_get(worker_config, targs + "optim", "adamw_torch")),
        }
        max_steps = cfg_get(worker_config, targs + "max_steps", -1)
        if max_steps and max_steps > 0:
            values["num_training_steps"] = int(max_steps)
        strategy_config = cfg_get(worker_config, "strategy_args.strategy_config") or {}
        values.update({k: v for k, v in dict(strategy_config).items() if k in FIELDS})
        return cls(**values)

    @property
    def mini_batch_size(self) -> int:
        """Rows one optimiser step should get (per data-parallel rank)."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps

    @property
    def forward_batch_size(self) -> int:
        """Rows per micro-batch of forward-only passes (log-probs, values)."""
        return int(self.infer_batch_size or self.per_device_train_batch_size)

    def warmup_step_count(self) -> int:
        """Warm-up length in optimiser steps, with HF's conventions (a value < 1 is a fraction of training)."""
        steps, ratio = self.warmup_steps, self.warmup_ratio
        fraction = steps if 0 < steps < 1 else (ratio if not steps else 0.0)
        if fraction:
            if not self.num_training_steps:
                raise ConfigError("training_args: a fractional warm-up (warmup_ratio, or warmup_steps < 1) needs "
                                  "num_training_steps (the pipeline derives it from max_steps).")
            return math.ceil(fraction * self.num_training_steps)
        return int(steps)


    def optimizer(self, param_groups: list[dict[str, Any]]) -> Any:
        """The torch optimizer ``optim`` names (Hugging Face's names) over ``param_groups``."""
        build = OPTIMIZERS.get(self.optim)
        if build is None:
            raise ConfigError(f"training_args.optim: {self.optim!r} is not available; use one of "
                              f"{', '.join(OPTIMIZERS)}.{did_you_mean(self.optim, OPTIMIZERS)}")
        return build(param_groups, self)

    def require_adamw(self, backend: str) -> None:
        """For backends that build their own AdamW: refuse any other ``optim`` instead of ignoring it."""
        if self.optim not in ADAMW:
            raise ConfigError(f"training_args.optim: {backend} trains with its own AdamW; {self.optim!r} is not "
                              f"available there (use {' or '.join(ADAMW)}, or hf_train).")

    def lr_scheduler(self, optimizer: Any) -> Any:
        """transformers' ``get_scheduler(lr_scheduler_type, ...)`` on ``optimizer`` (stepped once per step)."""
        from transformers import SchedulerType, get_scheduler

        kind = self.lr_scheduler_type
        choices = [t.value for t in SchedulerType]
        if kind not in choices:
            raise ConfigError(f"training_args.lr_scheduler_type: unknown {kind!r}; use one of {', '.join(choices)}.")
        warmup = self.warmup_step_count()
        try:
            return get_scheduler(kind, optimizer, num_warmup_steps=warmup, num_training_steps=self.num_training_steps,
                                 scheduler_specific_kwargs=dict(self.lr_scheduler_kwargs or {}))
        except ValueError as exc:
            raise ConfigError(f"training_args.lr_scheduler_type {kind!r}: {exc} (the pipeline passes "
                              "num_training_steps from max_steps).") from exc


def _adamw(groups: list[dict[str, Any]], s: OptimizerSettings, **extra: Any) -> Any:
    """torch's AdamW; unless fused, its multi-tensor (``foreach``) update, which torch picks by itself
    on CUDA only: on CPU it gives the same weights bit for bit as the per-tensor loop, in fewer,
    larger kernels (tests/strategies/test_settings.py; docs/benchmarks.md section 18)."""
    import torch

    if not extra.get("fused"):
        extra.setdefault("foreach", True)
    return torch.optim.AdamW(groups, lr=s.learning_rate, betas=s.adam_betas, eps=s.adam_epsilon, **extra)


def _sgd(groups: list[dict[str, Any]], s: OptimizerSettings) -> Any:
    import torch

    return torch.optim.SGD(groups, lr=s.learning_rate)


def _adafactor(groups: list[dict[str, Any]], s: OptimizerSettings) -> Any:
    from transformers.optimization import Adafactor

    # a fixed learning rate (the schedule is roll's), as HF's Trainer configures it
    return Adafactor(groups, lr=s.learning_rate, scale_parameter=False, relative_step=False, warmup_init=False)


#: ``training_args.optim`` (HF TrainingArguments names) -> builder(param_groups, settings); each
#: param group carries its own ``weight_decay``
OPTIMIZERS: dict[str, Any] = {
    "adamw_torch": _adamw,
    "adamw_hf": _adamw,  # HF's own AdamW is deprecated in favour of torch's
    "adamw_torch_fused": lambda groups, s: _adamw(groups, s, fused=True),
    "sgd": _sgd,
    "adafactor": _adafactor,
}
#: the names that mean AdamW, which DeepSpeed and Megatron build themselves
ADAMW = ("adamw_torch", "adamw_hf", "adamw_torch_fused")

#: the field names, i.e. the keywords a train strategy takes on top of its own
FIELDS = frozenset(f.name for f in dataclasses.fields(OptimizerSettings))


def resolve_settings(owner: str, settings: OptimizerSettings | None, updates: Mapping[str, Any],
                     default: OptimizerSettings | None = None) -> OptimizerSettings:
    """``settings`` (else ``default``, else the defaults) with ``updates`` (field keywords) applied.

    ``owner`` names the constructor in the ``TypeError`` an unknown keyword raises.
    """
    unknown = sorted(set(updates) - FIELDS)
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}."
                        f"{did_you_mean(unknown[0], FIELDS)}")
    base = settings or default or OptimizerSettings()
    return dataclasses.replace(base, **updates) if updates else base


#: model_args fields a train strategy takes as keywords of the same name, when the config sets them
OPTIONAL_MODEL_ARGS = ("model_config_kwargs", "freeze_module_prefix", "gradient_checkpointing_use_reentrant")


def train_worker_kwargs(cls: Any, worker_config: Any, seed: int, where: str,
                        overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor kwargs of a train strategy from a worker config: ``settings`` plus the model fields.

    Reads ``model_args.{dtype, attn_implementation, disable_gradient_checkpointing}`` and, when set,
    :data:`OPTIONAL_MODEL_ARGS` (a :class:`ConfigError` where ``cls`` does not take one) and the LoRA
    fields (as ``lora=``:class:`~roll_core.strategies.lora.LoraSettings`, likewise), and
    ``packing=``:class:`~roll_core.strategies.packing.PackingSettings` where ``cls`` takes it; every other
    ``strategy_args.strategy_config`` key must be a field or a keyword of ``cls`` (a
    :class:`ConfigError` otherwise). ``overrides`` (fields or keywords, e.g. ``num_training_steps``
    or ``trainable``) win over the config.
    """
    accepted = {name for name, p in inspect.signature(cls).parameters.items()
                if p.kind is not inspect.Parameter.VAR_KEYWORD} - {"pretrain", "settings"}
    strategy_config = dict(cfg_get(worker_config, "strategy_args.strategy_config") or {})
    unknown = sorted(set(strategy_config) - accepted - FIELDS)
    if unknown:
        raise ConfigError(f"{where}.strategy_args.strategy_config: unknown key {unknown[0]!r}."
                          f"{did_you_mean(unknown[0], accepted | FIELDS)} Accepted: "
                          f"{', '.join(sorted(accepted | FIELDS))}.")
    settings = OptimizerSettings.from_worker_config(worker_config)
    kwargs: dict[str, Any] = {
        "seed": seed,
        "dtype": cfg_get(worker_config, "model_args.dtype"),
        "attn_implementation": cfg_get(worker_config, "model_args.attn_implementation"),
        "gradient_checkpointing": not cfg_get(worker_config, "model_args.disable_gradient_checkpointing", True),
    }
    for field in OPTIONAL_MODEL_ARGS:  # passed only when set: a backend that cannot honour one says so
        value = cfg_get(worker_config, f"model_args.{field}")
        if value in (None, {}, ""):
            continue
        if field not in accepted:
            raise ConfigError(f"{where}.model_args.{field} is not supported by {getattr(cls, '__name__', cls)}; "
                              "unset it or choose a backend that supports it (hf_train does).")
        kwargs[field] = value
    from roll_core.strategies.lora import LoraSettings

    lora = LoraSettings.from_worker_config(worker_config)
    if lora is not None:  # passed only when on: a backend without LoRA says so rather than training in full
        if "lora" not in accepted:
            raise ConfigError(f"{where}.model_args.lora_target: {getattr(cls, '__name__', cls)} does not train LoRA "
                              "adapters; unset the lora_* fields or choose a backend that does (hf_train, "
                              "deepspeed_train).")
        kwargs["lora"] = lora
    from roll_core.strategies.packing import PackingSettings

    packing = PackingSettings.from_worker_config(worker_config)
    if "packing" in accepted:
        kwargs["packing"] = packing
    elif packing.enabled:  # padded rows give the same numbers, only slower: say so, do not refuse
        logger.warning("%s.use_sequence_packing: %s does not pack sequences; it trains on padded rows.",
                       where, getattr(cls, "__name__", cls))
    kwargs.update({k: v for k, v in strategy_config.items() if k not in FIELDS})
    kwargs.update({k: v for k, v in overrides.items() if k not in FIELDS})
    kwargs["settings"] = resolve_settings(
        getattr(cls, "__name__", str(cls)), settings, {k: v for k, v in overrides.items() if k in FIELDS})
    return kwargs
