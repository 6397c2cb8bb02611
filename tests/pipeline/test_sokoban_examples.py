"""The Sokoban examples (StarPO trajectory-wise, GiGPO step-wise) train on CPU."""

from __future__ import annotations

import pytest
from pipeline_helpers import EXAMPLES, run, step_metrics

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def tiny_sokoban(tmp) -> list[str]:
    """2 steps of 2 groups x 2 envs, 3 turns, no validation: seconds per step on 2 cores."""
    values = {
        "logging_dir": tmp / "logs", "output_dir": tmp / "ckpt", "render_save_dir": "null",
        "max_steps": 2, "save_steps": 2, "eval_steps": 0,
        "rollout_batch_size": 4, "train_env_manager.num_env_groups": 2, "train_env_manager.group_size": 2,
        "custom_envs.SimpleSokoban.max_steps": 3, "custom_envs.SimpleSokoban.env_config.max_steps": 3,
        "warmup_sft.steps": 1, "warmup_sft.batch_size": 4,
    }
    return [f"{k}={v}" for k, v in values.items()]


@pytest.mark.parametrize("example, samples", [("starpo", "rollout/trajectories"), ("gigpo", "rollout/env_steps")])
def test_sokoban_example_trains(ray_session, tmp_path, example, samples):
    code, out = run(EXAMPLES / "sokoban" / f"{example}.yaml", tiny_sokoban(tmp_path))
    assert code == 0, out
    metrics = step_metrics(tmp_path / "ckpt" / "checkpoint-2", 2)
    assert metrics["actor/optimizer_steps"] >= 1
    assert metrics["rollout/trajectories"] == 4
    assert metrics["train/samples"] == metrics[samples]  # StarPO: a sample per episode; GiGPO: per turn
