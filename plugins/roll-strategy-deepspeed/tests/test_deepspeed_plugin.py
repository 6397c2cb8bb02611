"""Registration, import lightness and the install hint when DeepSpeed is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from roll_core.errors import PluginError


def test_registered_as_a_train_strategy(roll_registry):
    reg = roll_registry.get("strategy", "deepspeed_train")
    assert reg.options["role"] == "train" and reg.options["needs_gpu"] is False
    assert reg.distribution == "roll-strategy-deepspeed"


def test_entry_module_is_import_light():
    code = ("import sys, roll_strategy_deepspeed.plugin\n"
            "heavy = [m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_deepspeed_gives_the_install_command(roll_registry, monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError
    monkeypatch.delitem(sys.modules, "roll_strategy_deepspeed.strategy", raising=False)
    with pytest.raises(PluginError, match=r"pip install 'deepspeed==0\.19\.8'"):
        roll_registry.load("strategy", "deepspeed_train")


def test_takes_every_argument_the_pipeline_passes():
    """``from_worker_config`` passes the shared ``train_worker_kwargs``: each must be a named parameter."""
    pytest.importorskip("deepspeed", reason="deepspeed is not installed")
    import inspect

    from roll_strategy_deepspeed.strategy import DeepSpeedTrainStrategy

    from roll_core.strategies.settings import OptimizerSettings, train_worker_kwargs

    kwargs = train_worker_kwargs(DeepSpeedTrainStrategy, {"training_args": {"max_steps": 3}}, 0, "actor_train",
                                 {"trainable": False})
    named = {n for n, p in inspect.signature(DeepSpeedTrainStrategy).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert set(kwargs) <= named and "settings" in kwargs
    assert kwargs["settings"] == OptimizerSettings(num_training_steps=3) and kwargs["trainable"] is False
