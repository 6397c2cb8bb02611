"""roll's :class:`SamplingParams` -> SGLang's ``sampling_params`` dictionary.

Import-light (no SGLang), so that the conversion is tested where SGLang is not installed. The
worker's ``generating_args`` reach it through roll's one converter
(:func:`roll_core.strategies.generating_args.sampling_from_generating_args`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roll_core.strategies.base import SamplingParams


def sglang_sampling_params(params: SamplingParams, extra_stop_token_ids: Iterable[int] = ()) -> dict[str, Any]:
    """Greedy params (temperature <= 0) give SGLang temperature 0 (its greedy mode); no top-k is -1
    in SGLang; a generated stop string stays in the output (``no_stop_trim``: roll trains on it)."""
    sampling: dict[str, Any] = {
        "max_new_tokens": int(params.max_new_tokens),
        "temperature": 0.0 if params.greedy else float(params.temperature),
        "top_p": float(params.top_p),
        "top_k": int(params.top_k) if params.top_k and params.top_k > 0 else -1,
        "stop_token_ids": sorted(set(params.stop_token_ids) | set(extra_stop_token_ids)) or None,
        "stop": list(params.stop_strings) or None,
        "no_stop_trim": True,
    }
    if params.seed is not None:
        sampling["sampling_seed"] = int(params.seed)
    return sampling
