"""Registration, import lightness and the install hint (runs without SGLang, which CPU machines cannot have)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from roll_core.errors import PluginError


def test_registered_as_a_gpu_infer_strategy(roll_registry):
    reg = roll_registry.get("strategy", "sglang")
    assert reg.options["role"] == "infer" and reg.options["needs_gpu"] is True
    assert reg.distribution == "roll-strategy-sglang"


def test_entry_module_is_import_light():
    code = ("import sys, roll_strategy_sglang.plugin\n"
            "heavy = [m for m in ('torch', 'sglang', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_sglang_gives_the_install_command(roll_registry, monkeypatch):
    if importlib.util.find_spec("sglang") is not None:  # installed here: make it look missing
        monkeypatch.setitem(sys.modules, "sglang", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_sglang.strategy", raising=False)
    with pytest.raises(PluginError) as info:
        roll_registry.load("strategy", "sglang")
    assert "pip install 'roll-strategy-sglang[gpu]'" in str(info.value)
    assert "CUDA" in str(info.value)
