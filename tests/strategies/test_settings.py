"""OptimizerSettings: the one reading of the train strategies' training arguments (no model needed)."""

from __future__ import annotations

import pytest

from roll_core.errors import ConfigError
from roll_core.strategies.settings import OptimizerSettings, resolve_settings, train_worker_kwargs

WORKER = {
    "model_args": {"dtype": "bf16", "disable_gradient_checkpointing": False},
    "training_args": {"learning_rate": 2e-5, "adam_beta1": 0.8, "adam_beta2": 0.95, "max_steps": 12,
                      "per_device_train_batch_size": 2, "gradient_accumulation_steps": 3, "warmup_ratio": 0.25},
    "infer_batch_size": 5,
    "strategy_args": {"strategy_name": "x", "strategy_config": {"num_threads": 1, "learning_rate": 3e-5,
                                                                "logits_temperature": 0.7}},
}


class Strategy:
    """A constructor shaped like the train strategies'."""

    def __init__(self, pretrain, *, seed=0, dtype=None, attn_implementation=None, gradient_checkpointing=False,
                 logits_temperature=1.0, trainable=True, settings=None, **training):
        self.settings = resolve_settings("Strategy", settings, training)


def test_from_worker_config_reads_training_args_and_strategy_config():
    s = OptimizerSettings.from_worker_config(WORKER)
    assert s.learning_rate == 3e-5  # strategy_config wins over training_args
    assert (s.adam_betas, s.num_training_steps, s.num_threads) == ((0.8, 0.95), 12, 1)
    assert (s.mini_batch_size, s.forward_batch_size, s.warmup_step_count()) == (6, 5, 3)
    assert OptimizerSettings.from_worker_config({}) == OptimizerSettings()  # ROLL's defaults


def test_train_worker_kwargs_split_settings_from_model_keywords():
    kwargs = train_worker_kwargs(Strategy, WORKER, 4, "actor_train", {"num_training_steps": 20, "trainable": False})
    settings = kwargs.pop("settings")
    assert kwargs == {"seed": 4, "dtype": "bf16", "attn_implementation": None, "gradient_checkpointing": True,
                      "logits_temperature": 0.7, "trainable": False}
    assert settings.num_training_steps == 20 and settings.learning_rate == 3e-5
    bad = {**WORKER, "strategy_args": {"strategy_config": {"learning_rat": 1.0}}}
    with pytest.raises(ConfigError, match=r"actor_train\.strategy_args\.strategy_config: unknown key "
                                          r"'learning_rat'.*learning_rate"):
        train_worker_kwargs(Strategy, bad, 0, "actor_train", {})


def test_keywords_apply_over_settings_and_typos_are_type_errors():
    base = OptimizerSettings(learning_rate=1e-3, per_device_train_batch_size=4)
    s = Strategy("m", settings=base, weight_decay=0.1).settings
    assert (s.learning_rate, s.per_device_train_batch_size, s.weight_decay) == (1e-3, 4, 0.1)
    assert Strategy("m").settings == OptimizerSettings()
    assert resolve_settings("C", None, {}, OptimizerSettings(learning_rate=1e-5)).learning_rate == 1e-5
    with pytest.raises(TypeError, match="Strategy.*'learnig_rate'.*learning_rate"):
        Strategy("m", learnig_rate=1.0)


def test_invalid_and_fractional_settings():
    with pytest.raises(ConfigError, match="per_device_train_batch_size"):
        OptimizerSettings(per_device_train_batch_size=0)
    assert OptimizerSettings(warmup_steps=0.5, num_training_steps=5).warmup_step_count() == 3
    assert OptimizerSettings(warmup_steps=2, warmup_ratio=0.5, num_training_steps=10).warmup_step_count() == 2
    with pytest.raises(ConfigError, match="num_training_steps"):
        OptimizerSettings(warmup_ratio=0.1).warmup_step_count()
