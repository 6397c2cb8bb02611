"""Built-in tiny Qwen2 models, built locally with no download (for CPU runs, tests and the demo).

A spec is selected by name in ``pretrain`` (``pretrain: roll-tiny``). The model is a
``Qwen2ForCausalLM`` with random weights that depend only on the spec and the seed, paired with
the tiny byte-level BPE tokenizer (:mod:`roll_core.models.tokenizer`). It is saved as an ordinary
Hugging Face directory (``save_pretrained``, safetensors), so everything downstream, including
plain ``AutoModelForCausalLM.from_pretrained``, treats it like any other checkpoint.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

#: Bump when the tokenizer corpus, settings or chat template change (it is part of the cache key).
#: 3: the chat template renders tools and tool calls (chats without them render as before).
TOKENIZER_VERSION = 3
#: Bump when the way a model is built from a spec changes (it is part of the cache key).
MODEL_BUILD_VERSION = 1
#: Written into every built directory, so a directory says what it is.
SPEC_FILE = "roll_tiny_spec.json"


@dataclass(frozen=True)
class TinySpec:
    """Shape of a tiny Qwen2 model; ``vocab_size`` is the tokenizer's target size."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int = 2048
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    initializer_range: float = 0.02

    @property
    def cache_key(self) -> str:
        return f"{self.name}-tok{TOKENIZER_VERSION}-build{MODEL_BUILD_VERSION}"


#: Tiny specs selectable by name in ``pretrain``.
TINY_SPECS: dict[str, TinySpec] = {
    spec.name: spec
    for spec in (
        # ~1.2M parameters: fwd+bwd of 32 x 256 tokens ~0.7 s on 2 CPU cores.
        TinySpec("roll-tiny", hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=512),
        # ~2.6M parameters: a train step ~1.6x roll-tiny's on 2 cores; measured on the FrozenLake
        # demo, its clone of the env's solver was no better within the demo's time (docs/learning.md).
        TinySpec("roll-tiny-3m", hidden_size=192, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=768),
        # ~10M parameters: slower (~6x), for runs that need more capacity.
        TinySpec("roll-tiny-10m", hidden_size=320, num_hidden_layers=6, num_attention_heads=5,
                 num_key_value_heads=5, intermediate_size=1280),
    )
}


def qwen2_config(spec: TinySpec, tokenizer: Any) -> Any:
    """The ``Qwen2Config`` of a spec, with the tokenizer's real vocabulary size and special ids."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


#: built-in tiny *reward* models (a score head on a tiny spec's body): name -> spec name
TINY_REWARD_MODELS: dict[str, str] = {"roll-tiny-rm": "roll-tiny"}


def build_tiny_reward_model(spec: TinySpec | str, seed: int, out_dir: str) -> str:
    """A seeded random ``Qwen2ForSequenceClassification`` (one label: a scalar reward) of ``spec``
    with the tiny tokenizer, saved like :func:`build_tiny_model` (``AutoModelForSequenceClassification``
    loads it)."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    from roll_core.models.tokenizer import build_tiny_tokenizer

    spec = TINY_SPECS[spec] if isinstance(spec, str) else spec
    tokenizer = build_tiny_tokenizer(spec.vocab_size)
    config = qwen2_config(spec, tokenizer)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForSequenceClassification(config).to(torch.float32)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump({**asdict(spec), "seed": seed, "head": "sequence_classification", "tokenizer_version":
                   TOKENIZER_VERSION, "model_build_version": MODEL_BUILD_VERSION}, f, indent=2, sort_keys=True)
    return out_dir


def build_tiny_model(spec: TinySpec | str, seed: int, out_dir: str) -> str:
    """Build the tokenizer and a seeded random model of ``spec``; save both into ``out_dir``.

    Deterministic: the same spec and seed give byte-identical ``tokenizer.json`` and weights.
    The global torch RNG is left untouched (the init runs under ``fork_rng``).
    """
    import torch
    from transformers import Qwen2ForCausalLM

    from roll_core.models.saving import save_pretrained
    from roll_core.models.tokenizer import build_tiny_tokenizer

    spec = TINY_SPECS[spec] if isinstance(spec, str) else spec
    tokenizer = build_tiny_tokenizer(spec.vocab_size)
    config = qwen2_config(spec, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    os.makedirs(out_dir, exist_ok=True)
    save_pretrained(model, out_dir)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump({**asdict(spec), "seed": seed, "tokenizer_version": TOKENIZER_VERSION,
                   "model_build_version": MODEL_BUILD_VERSION}, f, indent=2, sort_keys=True)
    return out_dir
