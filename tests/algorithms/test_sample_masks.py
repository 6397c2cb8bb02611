"""RLVR's response masks and weights (docs/algorithms.md §5, §6.4), on hand-computed batches."""

from __future__ import annotations

import pytest
import torch

from roll_core.algorithms.sample_masks import SampleMaskSettings, sample_masks

# two prompts of three responses: p (scores 1, 0, 0 -> mean 1/3) and q (1, 1, 1 -> mean 1)
SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
GROUPS = ["p", "p", "p", "q", "q", "q"]
LENGTHS = torch.tensor([4.0, 10.0, 2.0, 8.0, 6.0, 4.0])
TRUNCATED = torch.tensor([False, True, False, False, False, False])


def run(**settings):
    return sample_masks(SCORES, GROUPS, LENGTHS, TRUNCATED, SampleMaskSettings(**settings))


def test_nothing_is_masked_or_weighted_by_default():
    keep, weights, metrics = run()
    assert keep.all() and weights is None and metrics == {}


def test_each_mask():
    assert run(max_len_mask=True)[0].tolist() == [True, False, True, True, True, True]
    keep, _, metrics = run(difficulty_mask=True, difficulty_low_threshold=0.0, difficulty_high_threshold=1.0)
    assert keep.tolist() == [True] * 3 + [False] * 3  # q is always right: mean 1 is not < 1
    assert metrics == {"train/difficulty_mask_kept": 0.5, "train/rows_trained": 0.5}
    keep, _, _ = run(error_max_len_clip=True, error_max_len_threshold=5)
    assert keep.tolist() == [True, False, True, True, True, True]  # only the long failure (10 tokens) goes
    both, _, metrics = run(max_len_mask=True, difficulty_mask=True)
    assert both.tolist() == [True, False, True, False, False, False] and metrics["train/rows_trained"] == pytest.approx(2 / 6)


def test_weights_are_the_documented_formulas_rescaled_to_mean_one():
    _, weights, _ = run(difficulty_loss_weight=True)
    raw = torch.tensor([0.5 + 1.5 * (2 / 3)] * 3 + [0.5] * 3)  # d = 1 - group mean
    torch.testing.assert_close(weights, raw / raw.mean())
    assert float(weights.mean()) == pytest.approx(1.0)
    _, by_length, _ = run(length_loss_weight=True)
    raw = 1.5 - LENGTHS / 10.0
    torch.testing.assert_close(by_length, raw / raw.mean())
    _, product, _ = run(difficulty_loss_weight=True, length_loss_weight=True)
    torch.testing.assert_close(product, weights * by_length / (weights * by_length).mean())


def test_settings_come_from_the_rlvr_config():
    from roll_core.config import validate_config

    config = validate_config({"sequence_length": 64, "prompt_length": 32, "rewards": {"math": {}},
                              "difficulty_mask": True, "difficulty_low_threshold": 0.1, "length_loss_weight": True})
    settings = SampleMaskSettings.from_config(config)
    assert settings.difficulty_mask and settings.difficulty_low_threshold == 0.1 and settings.length_loss_weight
    assert settings.masks and settings.weights and not settings.max_len_mask
