"""An env plugin with its own Python environment: its requirement clashes with the trainer's
(another idna), its env managers run in the environment roll builds for it, and it trains; the
first start builds the environment and later starts reuse it."""

from __future__ import annotations

import io
import math
import os
from importlib.metadata import version
from pathlib import Path

import pytest
from pipeline_helpers import EXAMPLES, tiny_frozen_lake

pytestmark = [pytest.mark.ray]

HERE = Path(__file__).resolve().parent


def pinned_run(tmp_path):
    from roll_core.config import load_config, resolve
    from roll_core.plugins import PluginManager

    overrides = tiny_frozen_lake(tmp_path, **{
        "max_steps": "2", "save_steps": "0", "warmup_sft.steps": "0",
        "train_env_manager.tags": "[Pinned]", "val_env_manager.tags": "[Pinned]",
        "+custom_envs.Pinned.env_type": "pinned_idna", "+custom_envs.Pinned.max_steps": "3",
        "+system_envs.PYTHONPATH": str(HERE),  # the test env's module, for the Ray workers
    })
    registry = PluginManager(extra_modules=["roll_pinned_env"]).registry
    return resolve(load_config(str(EXAMPLES / "frozen_lake" / "grpo.yaml"), overrides), registry=registry)


def test_an_env_with_a_conflicting_requirement_trains_in_its_own_python(ray_session, tmp_path, monkeypatch):
    from roll_core.pipeline.agentic_pipeline import AgenticPipeline
    from roll_core.rollout.engine.scheduler import RolloutScheduler

    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("ROLL_ENV_PYTHON_CACHE", str(tmp_path / "env-python"))
    from roll_pinned_env import PIN

    assert version("idna") != PIN  # the trainer has another idna: PinnedEnv cannot run here
    with pytest.raises(RuntimeError, match=f"needs idna {PIN}"):
        __import__("roll_pinned_env").PinnedEnv()

    run = pinned_run(tmp_path)
    pipeline = AgenticPipeline(run, stream=io.StringIO())
    try:
        pipeline.start_rollouts()
        scheduler = pipeline.train_rollout.scheduler
        (first,) = scheduler.env_pythons.values()
        # the first start builds it; the env managers started, so they import idna PIN (PinnedEnv refuses
        # any other version, and every env is built in its env manager's constructor)
        assert first.built and first.spec.requirements == (f"idna=={PIN}",)
        pipeline.prepare()
        metrics = [pipeline.train_step() for _ in range(2)]
    finally:
        pipeline.shutdown()
    assert pipeline.step == 2
    for m in metrics:
        assert m["rollout/trajectories"] == 8 and m.get("rollout/dropped_trajectories", 0) == 0
        assert m["env/Pinned/num_steps"] >= 1 and math.isfinite(m["actor/pg_loss"])

    again = RolloutScheduler.from_run(run, "train", policy="random")  # a later start reuses it
    try:
        (reused,) = again.env_pythons.values()
        assert not reused.built and reused.root == first.root
        assert again.get_batch().metrics["rollout/trajectories"] == 8
    finally:
        again.shutdown()
    assert sorted(os.listdir(tmp_path / "env-python")) == [first.root.name, f"{first.root.name}.lock"]
