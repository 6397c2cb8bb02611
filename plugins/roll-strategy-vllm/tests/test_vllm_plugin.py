"""The plugin honours roll's strategy contract (roll_core.testing.check_strategy): registration,
import lightness and the install hint; the engine itself is exercised in test_vllm_strategy.py."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from roll_core.errors import PluginError


def test_honours_the_strategy_contract(roll_check_strategy, roll_registry):
    reg = roll_registry.get("strategy", "vllm")
    assert reg.options == {"role": "infer", "serves_lora": True, "needs_gpu": False} and reg.distribution == "roll-strategy-vllm"
    report = roll_check_strategy("vllm", missing=("vllm",), build=False)
    assert report.ok, str(report)


def test_the_install_hint_names_the_cpu_build_too(roll_registry, monkeypatch):
    if importlib.util.find_spec("vllm") is not None:  # installed here: make it look missing
        monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_vllm.strategy", raising=False)
    with pytest.raises(PluginError, match=r"roll-strategy-vllm\[cpu\]"):
        roll_registry.load("strategy", "vllm")
