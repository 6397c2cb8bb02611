"""The plugin honours roll's strategy contract (roll_core.testing.check_strategy): registration,
import lightness, the install hint when DeepSpeed is missing, and a real run on the tiny model."""

from __future__ import annotations


def test_honours_the_strategy_contract(roll_check_strategy, roll_registry, tmp_path):
    reg = roll_registry.get("strategy", "deepspeed_train")
    assert reg.options == {"role": "train", "needs_gpu": False} and reg.distribution == "roll-strategy-deepspeed"
    report = roll_check_strategy("deepspeed_train", missing=("deepspeed",), cache_dir=str(tmp_path))
    assert report.ok and not report.notes, str(report)
    assert "works on the tiny model" in report.passed
