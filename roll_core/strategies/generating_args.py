"""ROLL's ``generating_args`` -> :class:`SamplingParams`: the one converter every path uses.

The agentic rollout (training and validation), the RLVR rollout (training and validation),
``hf_infer`` and the vLLM and SGLang plugins all turn ``generating_args`` into sampling settings
here, so a field means the same thing on every path: ``do_sample: false`` is greedy everywhere
(two converters used to disagree, and agentic rollouts kept sampling at their temperature).

Read duck-typed (a validated config section, a plain mapping from a plugin's tests, or None) and
import-light (no torch, no config schema), so that the rollout and the strategies, which both sit
below the config, can share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roll_core.errors import ConfigError
from roll_core.strategies.base import SamplingParams

#: the ``generating_args`` fields roll supports with one value only (the schema's ``fixed(...)``
#: fields; a test keeps the two in step). A plain mapping skips the schema, so they are checked here too.
FIXED: dict[str, Any] = {"num_beams": 1, "repetition_penalty": 1.0, "length_penalty": 1.0}
#: why they are fixed
FIXED_WHY = ("roll samples token by token and trains on the sampled tokens' log-probs, so beam search and "
             "repetition / length penalties (which would make those log-probs differ from the policy's) "
             "are not supported.")


def _get(args: Any, name: str, default: Any) -> Any:
    value = args.get(name) if isinstance(args, Mapping) else getattr(args, name, None)
    return default if value is None else value


def sampling_from_generating_args(generating_args: Any, *, greedy: bool = False, **overrides: Any) -> SamplingParams:
    """``generating_args`` (missing or null fields keep :class:`SamplingParams`' defaults) as params.

    ``do_sample: false`` (as in ROLL and Hugging Face) or ``greedy=True`` (validation) means
    greedy decoding, temperature 0, whatever ``temperature`` says; ``top_k`` 0 or -1 means no
    top-k filtering (stored as 0). ``overrides`` set :class:`SamplingParams` fields last.
    """
    args = generating_args if generating_args is not None else {}
    for name, value in FIXED.items():
        given = _get(args, name, value)
        if given != value:
            raise ConfigError(f"generating_args.{name} is {given!r}, but roll supports only {value!r}: {FIXED_WHY}")
    defaults = SamplingParams()
    top_k = int(_get(args, "top_k", defaults.top_k))
    fields: dict[str, Any] = {
        "max_new_tokens": int(_get(args, "max_new_tokens", defaults.max_new_tokens)),
        "temperature": float(_get(args, "temperature", defaults.temperature)),
        "top_p": float(_get(args, "top_p", defaults.top_p)),
        "top_k": top_k if top_k > 0 else 0,
        "stop_strings": tuple(_get(args, "stop_strings", ())),
        "stop_token_ids": tuple(int(t) for t in _get(args, "stop_token_ids", ())),
    }
    if greedy or not _get(args, "do_sample", True):
        fields["temperature"] = 0.0
    return SamplingParams(**{**fields, **overrides})
