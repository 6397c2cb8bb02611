"""Async training (``async_generation_ratio``): every trained turn is within k policy versions of
the weights it trains, generation overlaps training, and stale work is dropped and counted."""

from __future__ import annotations

import io

import pytest
from pipeline_helpers import EXAMPLES, tiny_frozen_lake

pytestmark = [pytest.mark.slow, pytest.mark.ray]

CONFIG = EXAMPLES / "frozen_lake" / "grpo.yaml"


def make_pipeline(tmp, k: int, steps: int, **extra: str):
    from roll_core.config import load_config, resolve
    from roll_core.pipeline.agentic_pipeline import AgenticPipeline

    overrides = tiny_frozen_lake(tmp, **{
        "async_generation_ratio": str(k), "max_steps": str(steps), "save_steps": "0",
        "warmup_sft.steps": "0",  # untrained answers are invalid: every episode plays all 4 turns
        "+actor_train.strategy_args.strategy_config.num_threads": "1",
        "+actor_infer.strategy_args.strategy_config.num_threads": "1",
        **extra})
    pipeline = AgenticPipeline(resolve(load_config(str(CONFIG), overrides)), stream=io.StringIO())
    pipeline.start_rollouts()
    pipeline.prepare()
    return pipeline


def train(pipeline, steps: int) -> list[dict]:
    """Run ``steps`` steps; per step the version trained, its rows' oldest/newest turn, its metrics."""
    records = []
    for _ in range(steps):
        version = pipeline.step  # the weights the step trains (and the inference workers serve)
        metrics = pipeline.train_step()
        batch = pipeline.last_batch
        lags = [version - v for v in batch["policy_version_min"].tolist()]
        tokens = batch["token_versions"][batch["response_mask"][:, 1:].bool()]  # each trained token's version
        records.append({"version": version, "lags": lags, "newest": batch["policy_version_max"].tolist(),
                        "token_lags": (version - tokens).tolist(), "metrics": metrics})
    return records


def test_sync_pipeline_trains_only_current_version_turns(ray_session, tmp_path):
    pipeline = make_pipeline(tmp_path, k=0, steps=3)
    try:
        records = train(pipeline, 3)
    finally:
        pipeline.shutdown()
    for r in records:
        assert set(r["lags"]) == {0} and set(r["newest"]) == {r["version"]}
        m = r["metrics"]
        assert m["rollout/staleness/max"] == 0 and m["rollout/staleness/lag_0"] == 1.0
        assert m["rollout/turns_during_training"] == 0  # nothing is generated while the trainer trains
        assert m.get("rollout/dropped_trajectories/stale", 0) == 0
    assert [r["version"] for r in records] == [0, 1, 2]


@pytest.mark.parametrize("k,groups", [(1, 2), (2, 4)])
def test_async_pipeline_keeps_every_trained_turn_within_k_versions(ray_session, tmp_path, k, groups):
    steps = 5
    pipeline = make_pipeline(tmp_path, k=k, steps=steps, **{"train_env_manager.num_env_groups": str(groups)})
    try:
        records = train(pipeline, steps)
    finally:
        pipeline.shutdown()
    for r in records:
        assert all(0 <= lag <= k for lag in r["lags"]), (r["version"], r["lags"])
        assert all(0 <= lag <= k for lag in r["token_lags"])  # partial rollout: per token too
        assert len(r["lags"]) == 8 and max(r["newest"]) <= r["version"]
        assert r["metrics"]["rollout/staleness/max"] == max(r["lags"])  # the metric is the batch's truth
        assert r["metrics"]["rollout/staleness/max"] <= k
    # async really happened: older turns were trained on, and turns were generated while training ran
    assert max(max(r["lags"]) for r in records) >= 1
    assert sum(r["metrics"]["rollout/turns_during_training"] for r in records) > 0
    assert sum(r["metrics"]["time/generation_overlap"] for r in records) > 0


def test_stale_work_is_dropped_counted_and_never_trained(ray_session, tmp_path):
    pipeline = make_pipeline(tmp_path, k=1, steps=6)
    try:
        first = train(pipeline, 2)
        assert first[-1]["metrics"]["rollout/turns_during_training"] > 0  # work on version 0 ran ahead
        # force staleness: the trainer publishes one more version than it consumed batches
        # (like a trainer that updates twice per step); what ran ahead on version 1 is now 2 behind
        pipeline.sync_weights(version=pipeline.step + 1)
        pipeline.step += 1
        later = train(pipeline, 2)
    finally:
        pipeline.shutdown()
    dropped = sum(r["metrics"].get("rollout/dropped_trajectories/stale", 0) for r in later)
    assert dropped >= 4 and dropped % 4 == 0  # whole groups of 4 are dropped
    assert sum(r["metrics"].get("rollout/dropped_trajectories/stale", 0) for r in first) == 0
    for r in later:
        assert all(0 <= lag <= 1 for lag in r["lags"])
    assert later[0]["version"] == 3
