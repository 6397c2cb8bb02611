"""``roll rollout``: the seed config of async training, rolled out with a model-free policy."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from roll_core.cli import main

pytestmark = pytest.mark.ray

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
SEED_CONFIG = os.path.join(FIXTURES, "frozen_lake_async_with_env_managers.yaml")


@pytest.fixture
def no_ray():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    yield
    assert not ray.is_initialized()  # the command shuts down the Ray it started


def test_rollout_command_prints_batches_and_dumps_trajectories(no_ray, tokenizer, tmp_path, capsys):
    dump = tmp_path / "not" / "yet" / "trajs.jsonl"  # --dump creates its directory
    # the seed config (megatron + vLLM, a hub model) with fewer groups to keep the test short;
    # 128 groups x 8 envs go through the same code in test_rollout_engine.py
    code = main(["rollout", SEED_CONFIG, "train_env_manager.num_env_groups=16",
                 "train_env_manager.num_groups_partition=[16]", "rollout_batch_size=128",
                 "--policy", "random", "--batches", "2", "--dump", str(dump), "--timeout", "240",
                 "train_env_manager.max_env_num_per_worker=64"])  # overrides may follow the options
    out = capsys.readouterr().out
    assert code == 0
    assert "16 groups x 8 envs (128 envs on 2 workers), policy random" in out
    assert "batch 1/2: 128 trajectories (16 groups)" in out and "batch 2/2: 128 trajectories" in out
    assert "traj/s" in out and "env steps/s" in out and "env/FrozenLake: success" in out
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(records) == 256
    groups = defaultdict(list)
    for r in records:
        groups[(r["batch"], r["traj_group_id"])].append(r)
    assert len(groups) == 32 and all(len(g) == 8 for g in groups.values())
    for members in groups.values():
        assert len({r["seed"] for r in members}) == 1
        assert len({r["messages"][1]["content"] for r in members}) == 1  # same map in the group
    first = records[0]
    assert first["messages"][0]["role"] == "system" and first["turns"][0]["response"].startswith("<answer>")
    assert set(first["metrics"]) >= {"success", "action_is_valid", "action_is_effective", "num_steps"}


def test_rollout_command_reports_config_errors(no_ray, capsys):
    code = main(["rollout", SEED_CONFIG, "train_env_manager.tags=[NoSuchEnv]",
                 "train_env_manager.num_groups_partition=[128]", "--policy", "random"])
    assert code == 1
    assert "NoSuchEnv" in capsys.readouterr().err


def test_rollout_dump_that_cannot_be_written_fails_before_starting(no_ray, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    code = main(["rollout", SEED_CONFIG, "--policy", "random", "--dump", str(blocker / "trajs.jsonl")])
    err = capsys.readouterr().err
    assert code == 1 and "--dump" in err and "cannot write the trajectories there" in err
    assert "Traceback" not in err  # and no_ray checks that no Ray cluster was started
