"""A synchronous run is a function of its config and seed (issue 33; docs/architecture.md,
"Reproducible runs"): the same sampled tokens, the same metrics at every step and the same final
weights, to the bit, whatever the timing of env calls, the load on the cores, and the number of
inference workers.

The env is the counting walk of ``roll_core.testing.faults``: its ``hang_prob`` / ``hang_s`` sleep
in a random share of env calls (drawn unseeded, so every run differs) without touching the game.
The first run is calm, with one inference worker; the second has half of its env calls delayed
by 50 ms while another process keeps a core busy, which reorders when requests reach the
generation scheduler and which of them could share a batch, and serves generation with two
inference workers. Without lock-step rounds (workers/generate_scheduler.py), on the code before them, the
second run's inference log-probs differed from the first's (at step 3, by 1e-8 in
``train_infer/logprob_abs_diff``), and with them its metrics and weights.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_helpers import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "reproducible_run.yaml"
#: wall-clock measurements, which differ between any two runs
TIMING = ("time/", "rollout/trajectories_per_s", "rollout/env_steps_per_s", "rollout/turns_during_training")
#: what the second run changes on purpose: it has 2 inference workers, the first 1
SETUP = ("rollout/inference_workers",)
JITTER = ["custom_envs.Faulty.env_config.hang_prob=0.5", "custom_envs.Faulty.env_config.hang_s=0.05"]


def comparable(history: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{k: v for k, v in entry.items() if not k.startswith(TIMING + SETUP) and "per_s" not in k}
            for entry in history]


def roll_run(tmp: Path, *overrides: str, busy_core: bool = False) -> tuple[list[dict[str, float]], dict]:
    """The run's metric history and final actor weights."""
    from safetensors.torch import load_file

    from roll_core.pipeline.checkpoint import load_state

    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy_core else None
    try:
        code, out = run(CONFIG, [f"output_dir={tmp / 'ckpt'}", f"logging_dir={tmp / 'logs'}", *overrides])
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    assert code == 0, out
    checkpoint = tmp / "ckpt" / "checkpoint-5"
    return load_state(str(checkpoint))["tracker"]["history"], load_file(checkpoint / "model.safetensors")


def assert_same(expected: tuple, got: tuple, what: str) -> None:
    (history, weights), (other_history, other_weights) = expected, got
    history, other_history = comparable(history), comparable(other_history)
    assert [e["step"] for e in history] == [e["step"] for e in other_history]
    for entry, other in zip(history, other_history):
        assert set(entry) == set(other), f"{what}: step {entry['step']} logs other metrics"
        differ = {k: (entry[k], other[k]) for k in entry
                  if not (entry[k] == other[k] or (math.isnan(entry[k]) and math.isnan(other[k])))}
        assert not differ, f"{what}: step {entry['step']} differs: {differ}"
    assert set(weights) == set(other_weights)
    moved = [k for k in weights if not (weights[k] == other_weights[k]).all()]
    assert not moved, f"{what}: final weights differ in {moved}"


@pytest.fixture
def fault_env(monkeypatch):
    """The registry with ``roll_core.testing.faults`` loaded, for this test only."""
    from roll_core.plugins import reset_plugin_manager

    monkeypatch.setenv("ROLL_PLUGINS", "roll_core.testing.faults")
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_a_synchronous_run_is_the_same_under_timing_jitter_and_with_two_inference_workers(
        ray_session, fault_env, tmp_path):
    calm = roll_run(tmp_path / "calm")
    trained = [e for e in comparable(calm[0]) if e["step"] >= 1]
    assert len(trained) == 5 and trained[0]["actor/grad_norm"] > 0  # RL moved the weights
    assert 0 < trained[0]["train/success"] < 1  # groups with different rewards: something to learn from
    assert "val/success" in trained[-1]  # validation (greedy) generated in rounds too

    jittered = roll_run(tmp_path / "jittered", *JITTER, "actor_infer.world_size=2", busy_core=True)
    assert_same(calm, jittered, "env calls delayed at random, a core busy, two inference workers")
