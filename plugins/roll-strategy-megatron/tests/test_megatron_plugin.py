"""Registration, import lightness and the install hint when megatron-core is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from roll_core.errors import PluginError


def test_registered_as_a_gpu_train_strategy(roll_registry):
    reg = roll_registry.get("strategy", "megatron_train")
    assert reg.options["role"] == "train" and reg.options["needs_gpu"] is True
    assert reg.distribution == "roll-strategy-megatron"


def test_entry_module_is_import_light():
    code = ("import sys, roll_strategy_megatron.plugin\n"
            "heavy = [m for m in ('torch', 'megatron', 'transformers') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_megatron_gives_the_install_command(roll_registry, monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron", None)
    monkeypatch.setitem(sys.modules, "megatron.core", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_megatron.strategy", raising=False)
    with pytest.raises(PluginError, match=r"pip install 'megatron-core>=0\.16\.1,<0\.17'"):
        roll_registry.load("strategy", "megatron_train")


def test_takes_every_argument_the_pipeline_passes():
    """``from_worker_config`` passes the shared ``train_worker_kwargs``: each must be a named parameter."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    import inspect

    from roll_strategy_megatron.strategy import MegatronTrainStrategy

    from roll_core.strategies.settings import OptimizerSettings, train_worker_kwargs

    kwargs = train_worker_kwargs(MegatronTrainStrategy, {"training_args": {"max_steps": 3}}, 0, "actor_train",
                                 {"trainable": False})
    named = {n for n, p in inspect.signature(MegatronTrainStrategy).parameters.items() if p.kind is p.KEYWORD_ONLY}
    assert set(kwargs) <= named and "settings" in kwargs
    assert kwargs["settings"] == OptimizerSettings(num_training_steps=3) and kwargs["trainable"] is False
