"""A real multi-node Ray cluster on this machine (three raylets bound to 127.0.0.1, each with its own
custom resource): training with ranks on two nodes, a lost env-manager node survived, a lost trainer
node stopping the run with a clear message, and resume from the last checkpoint on a replacement
node; a lost inference node failed over and its worker replaced once a node joins again.

Node roles are pinned with roll's ``ray_resources``:
* head: the driver, the inference worker (``roll_infer``), trainer rank 0 and env managers;
* ``trainers``: trainer rank 1 (``roll_trainer``);
* ``envs``: env managers only (``roll_env``).
"""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "frozen_lake" / "grpo.yaml"


#: a lost node is declared dead after ~3 s (Ray's default health check: ~15 s), so failover tests stay short
HEAD = {"num_cpus": 2, "resources": {"roll_infer": 1, "roll_trainer": 1, "roll_env": 4},
        "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}}


def loopback_cluster(**nodes: dict):
    """A head (``HEAD``) and ``nodes`` (name -> add_node arguments), every raylet, the GCS and the driver
    on 127.0.0.1 (roll's private-cluster switch, as ``roll run`` uses for its own cluster): nothing
    of the test cluster is reachable from the network. Returns (cluster, name -> node)."""
    import ray
    from ray.cluster_utils import Cluster

    from roll_core.distributed.cluster import private_cluster_environment

    if ray.is_initialized():
        ray.shutdown()
    private_cluster_environment()
    c = Cluster(initialize_head=True, head_node_args=HEAD)
    added = {name: c.add_node(**args) for name, args in nodes.items()}
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    return c, added


#: one training and one inference rank (each bundle needs one unit; the head has one of each)
TRAINERS_NODE = {"num_cpus": 1, "resources": {"roll_trainer": 1, "roll_infer": 1}}


@pytest.fixture
def cluster():
    import ray

    c, nodes = loopback_cluster(trainers=TRAINERS_NODE, envs={"num_cpus": 1, "resources": {"roll_env": 4}})
    yield c, nodes
    ray.shutdown()
    c.shutdown()


def overrides(tmp: Path, steps: int, **extra: str) -> list[str]:
    values = {
        "logging_dir": str(tmp / "logs"), "output_dir": str(tmp / "ckpt"), "render_save_dir": "null",
        "max_steps": str(steps), "save_steps": "1", "eval_steps": "0", "warmup_sft.steps": "0",
        "rollout_batch_size": "8", "train_env_manager.num_env_groups": "4", "train_env_manager.group_size": "2",
        "train_env_manager.max_env_num_per_worker": "2",  # 4 env-manager actors, spread over head and envs
        "+train_env_manager.ray_resources": "{roll_env: 1}",
        "val_env_manager.num_env_groups": "2", "val_batch_size": "2",
        "custom_envs.FrozenLake4x4.max_steps": "3", "custom_envs.FrozenLake4x4.env_config.max_steps": "3",
        "+actor_train.world_size": "2", "+actor_train.ray_resources": "{roll_trainer: 1}",
        "actor_train.training_args.per_device_train_batch_size": "4",
        "+actor_infer.ray_resources": "{roll_infer: 1}",
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def start(tmp: Path, steps: int, **extra: str):
    """The pipeline running in a thread: (pipeline, thread, outcome dict)."""
    from roll_core.config import load_config, resolve
    from roll_core.pipeline import pipeline_class

    run = resolve(load_config(str(DEMO), overrides(tmp, steps, **extra)))
    pipeline = pipeline_class(run.pipeline_type)(run, stream=io.StringIO())
    outcome: dict = {}

    def target():
        try:
            outcome["code"] = pipeline.run()
        except Exception as exc:  # noqa: BLE001  # the test asserts on it
            import traceback

            outcome["error"] = exc
            outcome["traceback"] = traceback.format_exc()
        finally:
            pipeline.shutdown()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return pipeline, thread, outcome


def wait_for_step(pipeline, step: int, thread, outcome: dict, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while pipeline.step < step:
        assert thread.is_alive(), f"the run ended before step {step}: {outcome}"
        assert time.monotonic() < deadline, f"no step {step} within {timeout}s"
        time.sleep(0.2)


def env_manager_nodes(pipeline) -> list[str]:
    import ray

    return [ray.get(w.ready.remote(), timeout=60)["node_id"] for w in pipeline.train_rollout.scheduler.workers]


def test_ranks_on_two_nodes_survive_a_lost_env_node_and_stop_cleanly_on_a_lost_trainer(cluster, tmp_path):
    c, nodes = cluster
    pipeline, thread, outcome = start(tmp_path, steps=5, **{"+actor_infer.world_size": "2"})
    wait_for_step(pipeline, 1, thread, outcome)
    placement = json.loads((tmp_path / "logs" / "placement.json").read_text())
    train_nodes = {r["node_id"] for r in placement["actor_train"]}
    assert len(train_nodes) == 2  # rank 0 on the head, rank 1 on the trainers node
    assert placement["actor_train"][1]["node_id"] == nodes["trainers"].node_id
    # one inference rank there too (which one is Ray's choice): the stop must name both lost ranks
    infer_there = [r["rank"] for r in placement["actor_infer"] if r["node_id"] == nodes["trainers"].node_id]
    assert len(infer_there) == 1
    assert nodes["envs"].node_id in env_manager_nodes(pipeline)

    # 1. the env node goes: its env managers are recreated on the head and training goes on
    before = pipeline.step
    c.remove_node(nodes["envs"], allow_graceful=False)
    wait_for_step(pipeline, before + 2, thread, outcome)
    assert "error" not in outcome, outcome.get("error")
    assert nodes["envs"].node_id not in env_manager_nodes(pipeline)

    # 2. the trainers node goes: the run stops with a message naming the rank and how to resume
    reached = pipeline.step
    c.remove_node(nodes["trainers"], allow_graceful=False)
    thread.join(timeout=300)
    assert not thread.is_alive()
    message = str(outcome.get("error"))
    # one message: every lost rank with its node id and IP, the step, the last checkpoint, the command
    node = f"on node {nodes['trainers'].node_id[:12]} (127.0.0.1)"
    assert "the run lost 2 ranks" in message and f"actor_train rank 1 {node}" in message, message
    assert f"actor_infer rank {infer_there[0]} {node}" in message, message
    assert "a lost training rank cannot be replaced mid-step" in message and ".." not in message
    assert "resume_from_checkpoint=" in message and "\x1b" not in message and pipeline.step <= 5
    last = pipeline.step

    # 3. a replacement node joins; the run continues from its last checkpoint and finishes
    c.add_node(**TRAINERS_NODE)
    c.wait_for_nodes()
    resumed, thread, outcome = start(tmp_path, steps=last + 2, resume_from_checkpoint="true",
                                     **{"+actor_infer.world_size": "2"})
    thread.join(timeout=600)
    assert outcome.get("code") == 0, outcome.get("error")
    assert resumed.step == last + 2 and reached <= last


INFER_NODE = {"num_cpus": 1, "resources": {"roll_infer": 1}}


@pytest.fixture(scope="module")
def infer_cluster():
    """The head holds the driver, trainer, env managers and one inference rank; node ``infer`` only the
    other one. Shared by the inference tests (the first one replaces the node)."""
    import ray

    c, nodes = loopback_cluster(infer=INFER_NODE)
    yield c, nodes["infer"]
    ray.shutdown()
    c.shutdown()


def wait_for(what: str, condition, thread, outcome: dict, timeout: float = 300.0) -> None:
    """Poll ``condition`` while the run goes on; fail naming ``what`` when the run ends first."""
    deadline = time.monotonic() + timeout
    while True:
        assert thread.is_alive(), f"the run ended before {what}: {outcome}"
        try:
            if condition():
                return
        except Exception:  # the run shut its actors down meanwhile: say how it ended
            thread.join(timeout=60)
            assert thread.is_alive(), f"the run ended before {what}: {outcome}"
            raise
        assert time.monotonic() < deadline, f"not {what} within {timeout}s"
        time.sleep(0.5)


#: a bound only: the run is ended one step after the replacement served (a fast machine makes many steps
#: while the replacement starts)
FAILOVER_STEPS = 200


def test_a_lost_inference_node_is_failed_over_and_replaced_when_a_node_joins(infer_cluster, tmp_path):
    import ray

    c, infer_node = infer_cluster
    # arrival batching with sticky routes: both workers serve every step (a lock-step round of 8
    # requests is one chunk, all on worker 0, so the lost worker would only be found at the weight sync)
    pipeline, thread, outcome = start(tmp_path, steps=FAILOVER_STEPS, **{
        "+actor_train.world_size": "1", "+actor_infer.world_size": "2", "reproducible_generation": "false"})

    def stats() -> dict:
        return ray.get(pipeline.generation.scheduler.stats.remote(), timeout=60)

    try:
        wait_for_step(pipeline, 1, thread, outcome)
        placement = json.loads((tmp_path / "logs" / "placement.json").read_text())
        on_node = [r["node_id"] == infer_node.node_id for r in placement["actor_infer"]]
        assert sorted(on_node) == [False, True]
        assert infer_node.node_id not in {r["node_id"] for r in placement["actor_train"]}
        rank = on_node.index(True)  # which rank landed on the node is Ray's choice

        # 1. the node holding only that inference rank goes mid-run: the survivor serves, training goes on
        c.remove_node(infer_node, allow_graceful=False)
        wait_for("the lost worker was failed over", lambda: stats()["workers_lost"] == 1, thread, outcome)
        lost_at = pipeline.step
        # 2. a node with room joins: Ray re-places the rank's bundle there; at a weight sync roll starts
        # a replacement in it, and at the first sync that finds it up it loads the weights and rejoins
        new_node = c.add_node(**INFER_NODE)
        wait_for("the replacement rejoined", lambda: stats()["workers_rejoined"] == 1, thread, outcome)
        rejoined_at = pipeline.step
        wait_for("the replacement served", lambda: stats()["served"][rank] > 0, thread, outcome)
        served = stats()["served"]
        pipeline.max_steps = end = pipeline.step + 1  # the run's last step: one more with both workers
        thread.join(timeout=600)
    finally:  # never leave the run's thread calling Ray after the fixture shut it down
        pipeline._stop_requested = True
        thread.join(timeout=120)
    assert outcome.get("code") == 0, outcome.get("traceback")
    assert pipeline.step == end and 1 <= lost_at <= rejoined_at < end
    history = [h for h in pipeline.tracker.history if "rollout/inference_workers" in h]
    workers = [h["rollout/inference_workers"] for h in history]
    # two workers, then one (the loss is found by a rollout or by the weight sync after it), then two again
    assert workers[0] == 2.0 and 1.0 in workers and workers[-1] == 2.0, workers
    assert history[-1]["rollout/inference_workers_rejoined"] == 1.0
    assert not any(k.endswith("generation_error") and v for h in history for k, v in h.items())
    # placement.json says where the rank runs now
    placement = json.loads((tmp_path / "logs" / "placement.json").read_text())
    assert placement["actor_infer"][rank]["node_id"] == new_node.node_id
    print(f"lost at step {lost_at}, rejoined at step {rejoined_at}; requests served per worker {served}; "
          f"requeued requests of the lost worker: {history[-1]['rollout/requeued_lost_requests']}")


def test_losing_the_last_inference_worker_stops_the_run_with_the_one_message(infer_cluster, tmp_path):
    import ray

    pipeline, thread, outcome = start(tmp_path, steps=4, **{"+actor_train.world_size": "1"})
    try:
        wait_for_step(pipeline, 1, thread, outcome)
        ray.kill(pipeline.generation.workers[0], no_restart=True)
        thread.join(timeout=300)
    finally:
        pipeline._stop_requested = True
        thread.join(timeout=120)
    message = str(outcome.get("error"))
    assert "stops at step" in message and "(none of the 1 actor_infer workers is left)" in message, message
    assert "Lost: actor_infer rank 0 on node " in message and "env tag" not in message
    assert "Continue from the last checkpoint (step " in message and "resume_from_checkpoint=" in message
