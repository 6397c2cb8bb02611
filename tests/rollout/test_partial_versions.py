"""Partial rollout's accounting: per-token versions in the training rows, the staleness rule, the
version-mix metrics and the train-inference correction on a continued response (E17), by hand."""

from __future__ import annotations

import pytest
import torch

from roll_core.algorithms.corrections import is_weights, train_infer_ratio
from roll_core.chat.trajectory import Trajectory, Turn
from roll_core.data import PromptRow
from roll_core.rollout.engine.batch import build_batch
from roll_core.rollout.engine.metrics import token_version_metrics
from roll_core.rollout.rlvr.rlvr_rollout import Samples, drop_stale
from roll_core.strategies.base import GenerationOutput, GenerationRequest, SamplingParams
from roll_core.workers.generate_scheduler import _Pending


def trajectory() -> Trajectory:
    """Two turns on version 3; a sync to version 4 interrupted the second after its first token."""
    turns = [Turn(prompt_ids=[1, 2], response_ids=[10, 11], logprobs=[-0.1, -0.2], version=3, finish_reason="stop",
                  observation="a"),
             Turn(prompt_ids=[5], response_ids=[12, 13, 14], logprobs=[-0.3, -0.4, -0.5], version=3,
                  finish_reason="stop", observation="b", token_versions=[3, 4, 4])]
    return Trajectory(traj_id="t", traj_group_id="g", group_id=0, episode_id=0, member=0, tag="T", seed=1,
                      mode="train", turns=turns, incremental=True, terminated=True, truncated=False,
                      end_reason="terminated", episode_reward=1.0, metrics={}, messages=[])


def test_rows_carry_the_version_of_each_token():
    traj = trajectory()
    assert (traj.min_version, traj.max_version) == (3, 4)
    # stream [1, 2, 10, 11, 5, 12, 13, 14]; label-aligned: index j is token j + 1
    rows = build_batch([traj], granularity="trajectory", pad_id=0)
    assert rows["token_versions"].tolist() == [[-1, 3, 3, -1, 3, 4, 4]]
    steps = build_batch([traj], granularity="step", pad_id=0)
    assert steps["token_versions"].tolist() == [[-1, 3, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 3, 4, 4]]


def test_version_mix_metrics():
    # trained version 5; tokens of versions 3, 3 | 3, 4, 4: lags 2, 2, 2, 1, 1
    metrics = token_version_metrics([t.versions() for t in trajectory().turns], 5)
    assert metrics == pytest.approx({"rollout/token_staleness/mean": 1.6, "rollout/token_staleness/max": 2.0,
                                     "rollout/mixed_version_responses": 0.5, "rollout/token_staleness/lag_0": 0.0,
                                     "rollout/token_staleness/lag_1": 0.4, "rollout/token_staleness/lag_2": 0.6})


def test_the_staleness_bound_holds_for_every_token():
    """A response is as old as its first token (the version that started it; later tokens are newer),
    so keeping responses whose first token is within k versions keeps every token within k."""
    row = PromptRow(0, (1, 2), "1+1=", "2", "arithmetic")
    token_versions = [[2, 3], [3, 3], [1, 3, 3], [4]]
    samples = Samples(rows=[row] * 4, groups=["g"] * 4, response_ids=[[5] * len(v) for v in token_versions],
                      logprobs=[[-1.0] * len(v) for v in token_versions], versions=[v[0] for v in token_versions],
                      finish=["stop"] * 4, texts=["2"] * 4, rewards=[1.0] * 4, correct=[True] * 4,
                      token_versions=token_versions)
    kept, dropped = drop_stale(samples, version=4, max_lag=2)
    assert dropped == 1 and kept.token_versions == [[2, 3], [3, 3], [4]]
    assert all(v >= 4 - 2 for versions in kept.token_versions for v in versions)
    assert kept.to_batch(pad_id=0)["token_versions"].tolist() == [[-1, 2, 3], [-1, 3, 3], [-1, 4, -1]]


def test_e17_a_continued_response_is_corrected_with_each_tokens_own_behaviour_log_prob():
    """docs/algorithms.md E17: the scheduler's merge -> the RLVR row -> the train-inference IS weight."""
    pending = _Pending(GenerationRequest("r", [1, 2], SamplingParams(max_new_tokens=8)), None)
    pending.keep(GenerationOutput("r", [7, 8], [-1.0, -0.5], "abort", 0))
    assert pending.request.prompt_ids == [1, 2, 7, 8] and pending.request.sampling.max_new_tokens == 6
    out = pending.answer(GenerationOutput("r", [9, 3], [-0.2, -0.8], "stop", 1))
    assert (out.token_ids, out.versions(), out.policy_version) == ([7, 8, 9, 3], [0, 0, 1, 1], 0)

    row = PromptRow(0, (1, 2), "q", "a", "arithmetic")
    samples = Samples(rows=[row], groups=["g"], response_ids=[out.token_ids], logprobs=[out.logprobs],
                      versions=[out.policy_version], finish=["stop"], texts=["a"], rewards=[1.0], correct=[True],
                      token_versions=[out.versions()])
    data = samples.to_batch(pad_id=0)
    infer = data["infer_log_probs"]
    assert infer[0].tolist() == pytest.approx([0, -1.0, -0.5, -0.2, -0.8])
    assert data["token_versions"].tolist() == [[-1, 0, 0, 1, 1]]
    old = torch.tensor([[0, -1.2, -0.5, -0.2, -0.6]])  # the trainer's log pi_old
    mask = data["response_mask"][:, 1:].float()
    weights = is_weights(old, infer, mask, weight_type="token", upper_bound=1.2)
    assert weights[0].tolist() == pytest.approx([0, 0.818731, 1.0, 1.0, 1.2], abs=1e-6)
    assert train_infer_ratio(old, infer, mask, "geometric")[0].tolist() == pytest.approx([0, 1, 1, 1, 1], abs=1e-6)
