"""A step whose rewards are equal within every group says why its loss is +0.0000."""

from __future__ import annotations

import torch

from roll_core.algorithms.advantages import compute_advantages, grpo
from roll_core.pipeline.tracking import ZERO_ADVANTAGE_NOTE, MetricsTracker


def progress(make_config, scores, loss):
    config = make_config(adv_estimator="grpo", num_return_sequences_in_group=4)
    data = {"scores": torch.tensor(scores, dtype=torch.float32), "response_mask": torch.tensor([[0, 1, 1]] * 8)}
    _, metrics = compute_advantages(data, config, pipeline="rlvr", estimator=grpo)
    return MetricsTracker(None).progress_line(3, 10, {**metrics, "actor/pg_loss": loss}, {"step": 1.0})


def test_constant_rewards_within_every_group_are_named_in_the_progress_line(make_config):
    line = progress(make_config, [1, 1, 1, 1, 0, 0, 0, 0], 0.0)
    assert "loss +0.0000 | " + ZERO_ADVANTAGE_NOTE in line
    assert "rewards within each group are all equal" in line


def test_a_group_with_different_rewards_has_no_note(make_config):
    line = progress(make_config, [1, 0, 1, 1, 0, 0, 0, 0], -0.12)
    assert "loss -0.1200" in line and ZERO_ADVANTAGE_NOTE not in line
