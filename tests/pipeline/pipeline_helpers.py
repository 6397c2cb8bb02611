"""Helpers of the pipeline tests: in-process runs of example configs with tiny overrides."""

from __future__ import annotations

import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def tiny_frozen_lake(tmp: Path, **extra: str) -> list[str]:
    """Overrides shrinking the FrozenLake demo to seconds per step (2 groups x 4 envs, 4 turns)."""
    values = {
        "logging_dir": str(tmp / "logs"),
        "output_dir": str(tmp / "ckpt"),
        "render_save_dir": "null",
        "rollout_batch_size": "8",
        "train_env_manager.num_env_groups": "2",
        "train_env_manager.group_size": "4",
        "val_batch_size": "8",
        "val_env_manager.num_env_groups": "8",
        "custom_envs.FrozenLake4x4.max_steps": "4",
        "custom_envs.FrozenLake4x4.env_config.max_steps": "4",
        "actor_train.training_args.per_device_train_batch_size": "8",
        "actor_train.training_args.gradient_accumulation_steps": "1",
        "warmup_sft.steps": "20",  # enough for some valid answers: rewards differ, updates are non-zero
        "warmup_sft.policy": "random",  # the format only: what the model learns beyond it is RL's
        "warmup_sft.batch_size": "8",
        "warmup_sft.learning_rate": "5e-3",
        "warmup_sft.lr_scheduler_type": "constant",  # the settings these tests were written for,
        "actor_train.training_args.learning_rate": "3e-4",  # not the demo's longer-run ones
        # the grid these tests were written for: with the demo's " -" ice (2026-11-28) the 10 steps
        # of test_grpo_improves_reward from this format-only warm start leave valid answers at 0.24
        "custom_envs.FrozenLake4x4.env_config.grid_lookup": '{0: " P", 1: " _", 2: " O", 3: " G", 4: " X", 5: " √"}',
        "custom_envs.FrozenLake4x4.env_config.grid_vocab": '{P: you, _: ice, O: hole, G: goal}',
        "eval_steps": "0",
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def run(config_path: Path, overrides: list[str]) -> tuple[int, str]:
    """``roll run`` in-process (joins the session's Ray); returns (exit code, progress output)."""
    from roll_core.config import load_config, resolve
    from roll_core.pipeline import launch

    out = io.StringIO()
    code = launch(resolve(load_config(str(config_path), overrides)), stream=out)
    return code, out.getvalue()


def step_metrics(checkpoint: Path, step: int) -> dict[str, float]:
    """The metrics of ``step`` as the run's tracker recorded them (kept in every checkpoint)."""
    from roll_core.pipeline.checkpoint import load_state

    history = load_state(str(checkpoint))["tracker"]["history"]
    return next(entry for entry in history if entry["step"] == step)
