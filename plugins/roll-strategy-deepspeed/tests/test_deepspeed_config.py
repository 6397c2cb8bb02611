"""``strategy_config`` -> DeepSpeed config: ROLL presets, shortcuts, "auto", contradictions (no DeepSpeed needed)."""

from __future__ import annotations

import pytest
from roll_strategy_deepspeed.config import TrainingNumbers, build_deepspeed_config

from roll_core.errors import ConfigError
from roll_core.strategies.settings import OptimizerSettings


def numbers(**changes) -> TrainingNumbers:
    settings = OptimizerSettings(per_device_train_batch_size=2, gradient_accumulation_steps=4, max_grad_norm=1.0,
                                 learning_rate=1e-6, adam_betas=(0.9, 0.95), adam_epsilon=1e-8, weight_decay=0.0)
    base = dict(dtype="bf16", settings=settings, world_size=2, hidden_size=64, on_cuda=False)
    return TrainingNumbers(**{**base, **changes})


# ROLL's deepspeed_zero3 preset (Hugging Face's "auto" convention), as a YAML loads it
ROLL_ZERO3 = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                          "stage3_gather_16bit_weights_on_model_save": True},
}


def test_roll_preset_autos_are_filled_from_training_args():
    cfg = build_deepspeed_config(ROLL_ZERO3, numbers())
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["gradient_accumulation_steps"] == 4
    assert cfg["train_batch_size"] == 2 * 4 * 2
    assert cfg["gradient_clipping"] == 1.0
    assert cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False}
    zero = cfg["zero_optimization"]
    assert zero["stage"] == 3 and zero["reduce_bucket_size"] == 64 * 64
    assert zero["stage3_param_persistence_threshold"] == 640
    assert cfg["optimizer"]["type"] == "AdamW" and cfg["optimizer"]["params"]["betas"] == [0.9, 0.95]
    assert cfg["optimizer"]["params"]["torch_adam"] is True  # nothing offloaded: torch's AdamW


def test_shortcuts_build_offload_sections():
    cfg = build_deepspeed_config({}, numbers(dtype="fp32"), zero_stage=3, offload_optimizer="cpu",
                                 offload_param="cpu")
    zero = cfg["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": False}  # no pinning without CUDA
    assert zero["offload_param"]["device"] == "cpu"
    assert cfg["optimizer"]["params"]["torch_adam"] is False  # offload needs DeepSpeedCPUAdam
    assert not cfg["bf16"]["enabled"] and not cfg["fp16"]["enabled"]


@pytest.mark.parametrize(("sections", "shortcuts", "message"), [
    ({"fp16": {"enabled": True}}, {}, "model_args.dtype"),
    ({"train_micro_batch_size_per_gpu": 4}, {}, "per_device_train_batch_size"),
    ({"gradient_clipping": 0.5}, {}, "max_grad_norm"),
    ({"zero_optimization": {"stage": 2}}, {"zero_stage": 3}, "contradicts"),
    ({}, {"zero_stage": 4}, "0, 1, 2 or 3"),
    ({}, {"zero_stage": 0, "offload_optimizer": "cpu"}, "stage 1, 2 or 3"),
    ({}, {"zero_stage": 2, "offload_param": "cpu"}, "stage 3"),
    ({}, {"zero_stage": 1, "offload_optimizer": "gpu"}, "unknown offload device"),
    ({"zero_optimization": {"stage": 1, "sub_group_size": "auto"}}, {}, "zero_optimization.sub_group_size"),
])
def test_contradictions_are_config_errors(sections, shortcuts, message):
    with pytest.raises(ConfigError, match=message):
        build_deepspeed_config(sections, numbers(), **shortcuts)


def test_extra_sections_pass_through_but_cannot_override_derived_ones():
    cfg = build_deepspeed_config({}, numbers(), extra={"communication_data_type": "fp32"})
    assert cfg["communication_data_type"] == "fp32"
    with pytest.raises(ConfigError, match="roll derives"):
        build_deepspeed_config({}, numbers(), extra={"optimizer": {"type": "SGD"}})


def test_frozen_reference_model_has_no_optimizer():
    cfg = build_deepspeed_config({}, numbers(trainable=False), zero_stage=2)
    assert "optimizer" not in cfg and cfg["zero_optimization"] == {"stage": 0}
    cfg = build_deepspeed_config({}, numbers(trainable=False), zero_stage=3)
    assert cfg["zero_optimization"]["stage"] == 3  # ZeRO-3 still shards a frozen model


def test_an_optimizer_other_than_adamw_is_refused_not_ignored():
    import dataclasses

    sgd = dataclasses.replace(numbers().settings, optim="sgd")
    with pytest.raises(ConfigError, match="training_args.optim: deepspeed_train trains with its own AdamW; 'sgd'"):
        build_deepspeed_config({}, numbers(settings=sgd))
    fused = dataclasses.replace(numbers().settings, optim="adamw_torch_fused")
    assert build_deepspeed_config({}, numbers(settings=fused))["optimizer"]["type"] == "AdamW"
