"""GRPO on FrozenLake with the tiny model improves a real metric, with fixed seeds.

A short format warm start (random-policy demonstrations: valid answers less than half the time
afterwards) followed by RL steps: the share of valid answers and the episode reward (which
charges a format penalty for every invalid answer) must go up -- learnt from the reward alone. Deterministic (sync rollout, seeded
sampling), so the margin is not a matter of luck.
"""

from __future__ import annotations

import pytest
from pipeline_helpers import EXAMPLES, run, step_metrics, tiny_frozen_lake

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_grpo_improves_reward(ray_session, tmp_path):
    steps = 10
    code, out = run(EXAMPLES / "frozen_lake" / "grpo.yaml", tiny_frozen_lake(
        tmp_path, max_steps=str(steps), save_steps="0", rollout_batch_size="16",
        **{"train_env_manager.num_env_groups": "4", "actor_train.training_args.per_device_train_batch_size": "16",
           "actor_train.training_args.learning_rate": "2e-3", "warmup_sft.batch_size": "16"}))
    assert code == 0, out
    history = [step_metrics(tmp_path / "ckpt" / f"checkpoint-{steps}", s) for s in range(1, steps + 1)]
    first = sum(h["train/reward_mean"] for h in history[:3]) / 3
    last = sum(h["train/reward_mean"] for h in history[-3:]) / 3
    valid_first = sum(h["train/action_is_valid"] for h in history[:3]) / 3
    valid_last = sum(h["train/action_is_valid"] for h in history[-3:]) / 3
    print(f"reward {first:.3f} -> {last:.3f}; valid actions {valid_first:.2f} -> {valid_last:.2f}")
    assert valid_last > valid_first + 0.15
    assert last > first
