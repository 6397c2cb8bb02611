"""What ``hf_train``, ``hf_infer`` and the critic share: config reading, device/dtype, loading.

Worker configs are read duck-typed (attributes or mapping keys, ROLL's names), so the strategies
work with the pydantic config models, plain dicts or ``SimpleNamespace`` in tests alike.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from roll_core.errors import ConfigError, did_you_mean

logger = logging.getLogger(__name__)

#: ``model_args.dtype`` spellings (ROLL uses bf16 / fp16 / fp32) -> torch dtype name.
DTYPES: dict[str, str] = {
    "fp32": "float32", "float32": "float32", "float": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16", "half": "float16",
}
#: ``model_args.attn_implementation`` spellings (ROLL uses fa2) -> transformers' names.
ATTN_IMPLEMENTATIONS: dict[str, str] = {
    "fa2": "flash_attention_2", "flash_attention_2": "flash_attention_2",
    "sdpa": "sdpa", "eager": "eager", "flex_attention": "flex_attention", "auto": "sdpa",
}


def cfg_get(obj: Any, path: str, default: Any = None) -> Any:
    """``obj.a.b`` (or ``obj["a"]["b"]``) for ``path="a.b"``; ``default`` when any link is missing/None."""
    for part in path.split("."):
        if obj is None:
            return default
        obj = obj.get(part) if isinstance(obj, Mapping) else getattr(obj, part, None)
    return default if obj is None else obj


def apply_strategy_config(factory: Callable[..., Any], kwargs: dict[str, Any], strategy_config: Any,
                          where: str) -> dict[str, Any]:
    """Merge ``strategy_args.strategy_config`` into constructor kwargs; unknown keys are errors."""
    if not strategy_config:
        return kwargs
    accepted = set(inspect.signature(factory).parameters)
    extra = dict(strategy_config)
    unknown = sorted(set(extra) - accepted)
    if unknown:
        raise ConfigError(
            f"{where}.strategy_args.strategy_config: unknown key {unknown[0]!r}."
            f"{did_you_mean(unknown[0], accepted)} Accepted: {', '.join(sorted(accepted))}."
        )
    return {**kwargs, **extra}


def torch_dtype(name: str | None, device: Any = None) -> Any:
    """The torch dtype for ``model_args.dtype``; ``None`` means fp32 on CPU and bf16 on CUDA.

    An explicit value is honoured everywhere (bf16 runs on CPU, slower and coarser than fp32).
    """
    import torch

    if name is None:
        return torch.bfloat16 if device is not None and device.type == "cuda" else torch.float32
    key = str(name).lower()
    if key not in DTYPES:
        raise ConfigError(f"model_args.dtype: unknown dtype {name!r}; use one of {', '.join(sorted(DTYPES))}.")
    return getattr(torch, DTYPES[key])


def resolve_device(device: str | None = None) -> Any:
    """CUDA when available, else CPU (an explicit ``device`` wins)."""
    import torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_attn_implementation(name: str | None, device: Any) -> str:
    """transformers' attention name; flash-attention falls back to sdpa where it cannot run."""
    import importlib.util

    key = str(name or "sdpa").lower()
    if key not in ATTN_IMPLEMENTATIONS:
        raise ConfigError(
            f"model_args.attn_implementation: unknown {name!r}; use one of {', '.join(sorted(ATTN_IMPLEMENTATIONS))}."
        )
    impl = ATTN_IMPLEMENTATIONS[key]
    if impl == "flash_attention_2" and (device.type != "cuda" or importlib.util.find_spec("flash_attn") is None):
        logger.info("attn_implementation %s is unavailable here (needs CUDA and flash_attn); using sdpa", name)
        impl = "sdpa"
    return impl


def load_causal_lm(model_dir: str, dtype: Any, attn: str, device: Any,
                   config_overrides: Mapping[str, Any] | None = None) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` on ``device`` in ``dtype``; ``config_overrides``
    (``model_args.model_config_kwargs``) change the model's HF config as it is loaded."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation=attn,
                                                 **checked_config_overrides(model_dir, config_overrides))
    return model.to(device)


def checked_config_overrides(model_dir: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``model_config_kwargs`` that name fields of the model's config (a typo would be dropped by HF)."""
    if not overrides:
        return {}
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    known = set(config.to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"model_args.model_config_kwargs.{unknown[0]}: the {config.model_type} config has no "
                          f"such field.{did_you_mean(unknown[0], known)}")
    return dict(overrides)


def freeze_prefixes(model: Any, prefixes: str | None) -> int:
    """``model_args.freeze_module_prefix``: stop training the parameters whose names start with one
    of the comma-separated prefixes; returns how many were frozen. A prefix that matches nothing
    is an error (a typo would silently train everything)."""
    if not prefixes:
        return 0
    wanted = [p.strip() for p in str(prefixes).split(",") if p.strip()]
    names = [name for name, _ in model.named_parameters()]
    frozen = 0
    for prefix in wanted:
        hits = [name for name in names if name.startswith(prefix)]
        if not hits:
            raise ConfigError(f"model_args.freeze_module_prefix: no parameter starts with {prefix!r} "
                              f"(the model's parameters start like {', '.join(names[:3])}, ...).")
        for name, param in model.named_parameters():
            if name.startswith(prefix) and param.requires_grad:
                param.requires_grad_(False)
                frozen += 1
    return frozen


def load_state_dict_checked(model: Any, weights: Mapping[str, Any]) -> None:
    """``load_state_dict`` that tolerates absent tied copies only (``lm_head`` = embeddings).

    Weights are copied in place (cast to the model's dtype/device), so any aliasing with the
    sender's tensors ends here.
    """
    import torch

    with torch.no_grad():
        result = model.load_state_dict(dict(weights), strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded = {params[k].data_ptr() for k in weights if k in params}
    untied_missing = [k for k in result.missing_keys if k not in params or params[k].data_ptr() not in loaded]
    if untied_missing or result.unexpected_keys:
        from roll_core.errors import RollError

        raise RollError(
            f"weights do not match the model: missing {untied_missing[:5]}, unexpected "
            f"{list(result.unexpected_keys)[:5]} (is the train strategy on the same pretrain?)"
        )


def set_num_threads(num_threads: int | None) -> None:
    """Set torch's intra-op threads for this process (``None``: leave torch's default).

    Why it matters: on a small shared machine, several worker processes each running torch's
    default (one thread per core) oversubscribe the cores, and OpenMP's spin-waiting then makes
    tiny-model steps 10-50x slower (measured on 2 cores); one thread per worker avoids that.
    """
    if num_threads is not None:
        import torch

        if num_threads < 1:
            raise ConfigError(f"strategy_config.num_threads must be >= 1, got {num_threads}.")
        torch.set_num_threads(int(num_threads))


def tensor_parallel_from_devices(worker_config: Any, strategy_config: Mapping[str, Any], key: str) -> dict[str, int]:
    """``{key: num_gpus_per_worker}`` for an inference engine with tensor parallelism (vLLM's
    ``tensor_parallel_size``, SGLang's ``tp_size``): each worker spreads its model over the GPUs of
    its bundle unless ``strategy_config`` says otherwise; a value that disagrees is an error."""
    gpus = int(cfg_get(worker_config, "num_gpus_per_worker", 1) or 1)
    given = strategy_config.get(key)
    if given is None:
        return {key: gpus} if gpus > 1 else {}
    if gpus > 1 and int(given) != gpus:
        raise ConfigError(f"actor_infer.strategy_args.strategy_config.{key} is {given}, but each worker has "
                          f"num_gpus_per_worker={gpus} GPUs; make them agree (or drop {key}).")
    return {}
