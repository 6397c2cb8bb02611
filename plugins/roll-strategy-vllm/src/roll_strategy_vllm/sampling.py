"""roll's :class:`SamplingParams` -> the keyword arguments of vLLM's ``SamplingParams``.

Import-light (no vLLM), so that the conversion is tested where vLLM is not installed. The
worker's ``generating_args`` reach it through roll's one converter
(:func:`roll_core.strategies.generating_args.sampling_from_generating_args`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roll_core.strategies.base import SamplingParams


def vllm_sampling_kwargs(params: SamplingParams, extra_stop_token_ids: Iterable[int] = ()) -> dict[str, Any]:
    """Greedy params (temperature <= 0) give vLLM temperature 0 (its greedy mode); top_k 0 means none;
    one log-prob per sampled token; text is detokenised only where a stop string must be found."""
    return {
        "max_tokens": int(params.max_new_tokens),
        "temperature": 0.0 if params.greedy else float(params.temperature),
        "top_p": float(params.top_p),
        "top_k": int(params.top_k) if params.top_k and params.top_k > 0 else 0,
        "seed": params.seed,
        "stop": list(params.stop_strings) or None,
        "stop_token_ids": sorted(set(params.stop_token_ids) | set(extra_stop_token_ids)) or None,
        "logprobs": 0,
        "detokenize": bool(params.stop_strings),
    }
