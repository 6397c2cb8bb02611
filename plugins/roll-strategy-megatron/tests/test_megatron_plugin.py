"""The plugin honours roll's strategy contract (roll_core.testing.check_strategy): registration,
import lightness, the install hint when megatron-core is missing; the run needs a GPU."""

from __future__ import annotations

import importlib.util


def test_honours_the_strategy_contract(roll_check_strategy, roll_registry):
    reg = roll_registry.get("strategy", "megatron_train")
    assert reg.options == {"role": "train", "needs_gpu": True} and reg.distribution == "roll-strategy-megatron"
    report = roll_check_strategy("megatron_train", missing=("megatron",))
    assert report.ok, str(report)
    if importlib.util.find_spec("megatron") is not None:
        assert "contract of its role" in report.passed  # megatron-core imports on CPU; it runs on CUDA only
