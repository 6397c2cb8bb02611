"""Registration, import lightness, and the install command when vLLM is missing (runs without vLLM)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from roll_core.errors import PluginError


def test_registered_as_an_infer_strategy(roll_registry):
    reg = roll_registry.get("strategy", "vllm")
    assert reg.options["role"] == "infer" and reg.options["needs_gpu"] is False
    assert reg.distribution == "roll-strategy-vllm"


def test_entry_module_is_import_light():
    code = ("import sys, roll_strategy_vllm.plugin\n"
            "heavy = [m for m in ('torch', 'vllm', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_vllm_gives_the_install_command(roll_registry, monkeypatch):
    if importlib.util.find_spec("vllm") is not None:  # installed here: make it look missing
        monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_vllm.strategy", raising=False)
    with pytest.raises(PluginError) as info:
        roll_registry.load("strategy", "vllm")
    message = str(info.value)
    assert "pip install 'roll-strategy-vllm[gpu]'" in message
    assert "roll-strategy-vllm[cpu]" in message  # the CPU build is named too
    assert "Traceback" not in message
