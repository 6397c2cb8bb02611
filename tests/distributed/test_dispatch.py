"""Rows over data-parallel ranks: balanced shares, the single-process schedule kept, metrics reduced."""

from __future__ import annotations

import pytest
import torch

from roll_core.distributed.dispatch import (
    adjust_rows,
    forward_shares,
    plan_training,
    reduce_metrics,
    split_rows,
)
from roll_core.errors import ConfigError


def test_split_is_balanced_by_tokens_with_equal_counts_and_keeps_row_order():
    lengths = [100, 10, 10, 90, 50, 50, 5, 5]
    shares = split_rows(range(8), lengths, 2)
    assert [len(s) for s in shares] == [4, 4]
    assert sorted(shares[0] + shares[1]) == list(range(8))
    loads = [sum(lengths[r] for r in s) for s in shares]
    assert loads == [165, 155]  # longest first to the lighter rank (a contiguous split: 210 / 110)
    assert all(s == sorted(s) for s in shares)  # rows keep their batch order within a rank
    assert split_rows([3, 1, 2], lengths, 1) == [[3, 1, 2]]  # one rank: untouched
    with pytest.raises(ConfigError, match="7 rows cannot be split equally over 2 data-parallel ranks"):
        split_rows(range(7), lengths, 2)


def test_forward_shares_pad_with_a_repeated_row():
    shares = forward_shares([5, 6, 7], 2)
    assert sorted(r for s in shares for r in s) == [0, 1, 2, 2] and [len(s) for s in shares] == [2, 2]


def test_one_rank_plan_is_exactly_the_single_process_schedule():
    """Same permutations (seeded by the step), same mini-batches, same order as TrainWorker had."""
    lengths = [3] * 10
    plan = plan_training(lengths, parts=1, mini_batch_size=4, epochs=2, shuffle_seed=7)[0]
    expected = []
    for epoch in range(2):
        order = torch.randperm(10, generator=torch.Generator().manual_seed(7 * 1000 + epoch)).tolist()
        expected += [order[i:i + 4] for i in range(0, 10, 4)]
    assert plan == expected
    assert plan_training(lengths, parts=1, mini_batch_size=0, epochs=1, shuffle_seed=7) == [[list(range(10))]]


def test_two_rank_plan_splits_every_global_mini_batch():
    lengths = list(range(1, 17))
    plans = plan_training(lengths, parts=2, mini_batch_size=4, epochs=1, shuffle_seed=3)
    assert [len(p) for p in plans] == [2, 2]  # 16 rows / (4 per rank x 2 ranks) = 2 steps each
    for step in range(2):
        assert len(plans[0][step]) == len(plans[1][step]) == 4
        assert not set(plans[0][step]) & set(plans[1][step])
    assert sorted(r for p in plans for s in p for r in s) == list(range(16))


@pytest.mark.parametrize("mode, n, parts, expected_len", [
    ("copy", 7, 2, 8), ("delete", 7, 2, 6), ("auto", 7, 4, 8), ("auto", 9, 4, 8), ("random_sample", 7, 2, 8),
    ("copy", 8, 2, 8), ("delete", 1, 2, 2)])
def test_batch_adjust_mode_makes_the_rows_divisible(mode, n, parts, expected_len):
    rows = adjust_rows(n, parts, mode, seed=1)
    assert len(rows) == expected_len and all(0 <= r < n for r in rows)
    assert adjust_rows(n, parts, mode, 1) == rows  # seeded
    if mode == "copy":
        assert rows[:n] == list(range(n))
    if mode == "delete" and n > parts:
        assert len(set(rows)) == len(rows) == n - n % parts


def test_metrics_step_values_from_rank_0_others_weighted():
    ranks = [{"actor/loss": 2.0, "actor/grad_norm": 1.5, "actor/pg_clipfrac": 0.1, "actor/optimizer_steps": 2},
             {"actor/loss": 2.0, "actor/grad_norm": 1.5, "actor/pg_clipfrac": 0.4, "actor/optimizer_steps": 2}]
    out = reduce_metrics(ranks, [3, 1])
    assert out == {"actor/loss": 2.0, "actor/grad_norm": 1.5, "actor/pg_clipfrac": pytest.approx(0.175),
                   "actor/optimizer_steps": 2.0}
