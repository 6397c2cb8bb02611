"""The plugin honours roll's strategy contract (roll_core.testing.check_strategy) as far as a CPU
machine allows: registration, import lightness and the install hint (SGLang needs CUDA)."""

from __future__ import annotations

import importlib.util


def test_honours_the_strategy_contract(roll_check_strategy, roll_registry):
    reg = roll_registry.get("strategy", "sglang")
    assert reg.options == {"role": "infer", "needs_gpu": True} and reg.distribution == "roll-strategy-sglang"
    report = roll_check_strategy("sglang", missing=("sglang",))
    assert report.ok, str(report)
    assert {"registration", "entry module stays import-light", "install hint without sglang"} <= set(report.passed)


def test_the_install_hint_names_cuda(roll_registry, monkeypatch):
    import sys

    import pytest

    from roll_core.errors import PluginError

    if importlib.util.find_spec("sglang") is not None:  # installed here: make it look missing
        monkeypatch.setitem(sys.modules, "sglang", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_sglang.strategy", raising=False)
    with pytest.raises(PluginError, match="CUDA"):
        roll_registry.load("strategy", "sglang")
