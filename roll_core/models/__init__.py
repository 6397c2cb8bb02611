"""Models: ``pretrain`` resolution, the built-in tiny models and tokenizer, GGUF conversion.

Import-light on purpose (config validation imports this): torch and transformers are imported
only inside the functions that build or load models.

* :func:`resolve_pretrain` -- ``pretrain`` (local dir, hub id, ``roll-tiny``, ``.gguf``,
  ``smollm2-135m-instruct``) -> a local Hugging Face directory.
* :data:`TINY_SPECS` / :func:`build_tiny_model` -- the built-in tiny Qwen2 models.
* :func:`build_tiny_tokenizer` -- the tiny byte-level BPE tokenizer with a ChatML template.
* :func:`load_tokenizer` -- ``AutoTokenizer`` with a pad token guaranteed.
"""

from __future__ import annotations

from typing import Any

from roll_core.models.gguf import GGUF_ALIASES, convert_gguf
from roll_core.models.resolve import default_cache_dir, resolve_pretrain
from roll_core.models.tiny import TINY_SPECS, TinySpec, build_tiny_model
from roll_core.models.tokenizer import build_tiny_tokenizer, chat_template


def load_tokenizer(model_dir: str) -> Any:
    """``AutoTokenizer.from_pretrained(model_dir)``; a missing pad token falls back to eos.

    Batching needs a pad id; what it is does not matter since padded positions are masked.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


__all__ = [
    "GGUF_ALIASES",
    "TINY_SPECS",
    "TinySpec",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "chat_template",
    "convert_gguf",
    "default_cache_dir",
    "load_tokenizer",
    "resolve_pretrain",
]
