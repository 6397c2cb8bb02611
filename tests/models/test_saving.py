"""Saving a model imports no DeepSpeed (issue 35: its "Setting accelerator to CPU" warning in every run)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

SCRIPT = """
import sys, torch, transformers
from roll_core.models.saving import save_pretrained
config = transformers.Qwen2Config(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1)
model = transformers.AutoModelForCausalLM.from_config(config)
save_pretrained(model, sys.argv[1])
print("deepspeed" in sys.modules, sorted(__import__("os").listdir(sys.argv[1])))
"""


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_save_pretrained_does_not_import_deepspeed(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "False ['config.json', 'generation_config.json', 'model.safetensors']"
    assert "Setting accelerator" not in out.stderr
