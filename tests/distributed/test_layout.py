"""Roles -> ranks -> device slots -> bundles, computed from configs without Ray."""

from __future__ import annotations

import pytest

from roll_core.config import validate_config
from roll_core.distributed.layout import build_layout
from roll_core.errors import ConfigError


def config(**sections):
    data = {"sequence_length": 64, "pretrain": "tiny", "adv_estimator": "grpo", "rollout_batch_size": 8,
            "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4},
            "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2}, **sections}
    return validate_config(data)


def test_seed_layout_separate_training_and_inference_devices():
    """The async-training seed: megatron on devices 0-3, vLLM on 4-7."""
    c = config(actor_train={"device_mapping": "list(range(0,4))"}, actor_infer={"device_mapping": "list(range(4,8))"})
    layout = build_layout(c, ["actor_train", "actor_infer"], on_gpus=True)
    train, infer = layout.roles["actor_train"], layout.roles["actor_infer"]
    assert (train.world_size, infer.world_size) == (4, 4)
    assert [r.devices for r in train.ranks] == [(0,), (1,), (2,), (3,)]
    assert [b.devices for b in layout.bundles] == [(d,) for d in range(8)] and all(b.gpu for b in layout.bundles)
    assert not layout.colocated("actor_train", "actor_infer")
    assert layout.describe() == ["actor_train: 4 ranks x 1 GPU on devices 0-3",
                                 "actor_infer: 4 ranks x 1 GPU on devices 4-7"]


def test_overlapping_mappings_share_bundles():
    """ROLL's colocation: actor_train and actor_infer on the same 4 GPUs take turns on them."""
    c = config(actor_train={"device_mapping": [0, 1, 2, 3]}, actor_infer={"device_mapping": [0, 1, 2, 3]},
               reference={"device_mapping": [0, 1, 2, 3]}, init_kl_coef=0.1)
    layout = build_layout(c, ["actor_train", "reference", "actor_infer"], on_gpus=True)
    assert len(layout.bundles) == 4
    assert all(b.roles == ("actor_train", "reference", "actor_infer") for b in layout.bundles)
    assert layout.colocated("actor_train", "actor_infer")
    assert "shared with actor_infer, reference" in layout.describe()[0]


def test_tensor_parallel_ranks_and_multi_gpu_workers_pack_into_one_bundle():
    c = config(actor_train={"device_mapping": "list(range(0,4))",
                            "strategy_args": {"strategy_name": "megatron_train",
                                              "strategy_config": {"tensor_model_parallel_size": 2}}},
               actor_infer={"device_mapping": "list(range(4,8))", "num_gpus_per_worker": 2})
    layout = build_layout(c, ["actor_train", "actor_infer"], on_gpus=True)
    assert [b.devices for b in layout.bundles] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [r.bundle for r in layout.roles["actor_train"].ranks] == [0, 0, 1, 1]
    assert [r.devices for r in layout.roles["actor_infer"].ranks] == [(4, 5), (6, 7)]
    assert layout.roles["actor_train"].tensor_parallel == 2


def test_on_cpu_device_ids_are_cpu_slots_and_unmapped_roles_get_their_own():
    c = config(actor_train={"world_size": 2}, actor_infer={"device_mapping": "list(range(0,3))"},
               critic={"world_size": 1}, adv_estimator="gae")
    layout = build_layout(c, ["actor_train", "critic", "actor_infer"], on_gpus=False)
    assert [r.devices for r in layout.roles["actor_train"].ranks] == [("actor_train:0",), ("actor_train:1",)]
    assert layout.roles["actor_infer"].world_size == 3 and not any(b.gpu for b in layout.bundles)
    assert len(layout.bundles) == 3 + 2 + 1  # mapped slots first, then each unmapped rank its own
    assert layout.describe()[0] == "actor_train: 2 ranks x 1 CPU slot on its own slots"


def test_ray_resources_go_into_the_bundles():
    c = config(actor_train={"world_size": 2, "ray_resources": {"trainer_node": 1}})
    layout = build_layout(c, ["actor_train", "actor_infer"], on_gpus=False)
    assert [dict(b.resources) for b in layout.bundles] == [{"trainer_node": 1.0}, {"trainer_node": 1.0}, {}]


@pytest.mark.parametrize("sections, message", [
    ({"actor_train": {"device_mapping": [0, 1, 2, 3], "world_size": 3}},
     r"actor_train.world_size is 3, but device_mapping has 4 devices .* makes 4 ranks"),
    ({"actor_train": {"device_mapping": [0, 1, 2], "strategy_args": {
        "strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": 2}}}},
     "3 ranks do not split into tensor-parallel groups of 2"),
])
def test_inconsistent_sizes_are_config_errors(sections, message):
    with pytest.raises(ConfigError, match=message):
        build_layout(config(**sections), ["actor_train", "actor_infer"], on_gpus=True)


def test_placement_json_keeps_the_runs_a_resumed_run_continues(tmp_path):
    import json

    from roll_core.distributed.placement import write_placement

    path = str(tmp_path / "placement.json")
    first = {"actor_train": [{"rank": 0, "node_id": "n1"}]}
    write_placement(path, first, {}, run_id="a", resumed=False)
    write_placement(path, first, {"train_env_managers": [{"worker": 0, "node_id": "n2", "groups": [0]}]},
                    run_id="a", resumed=False)  # the same run adds its actors: one entry
    doc = json.load(open(path))
    assert doc["earlier"] == [] and doc["actors"]["train_env_managers"][0]["node_id"] == "n2"
    second = {"actor_train": [{"rank": 0, "node_id": "n3"}]}
    write_placement(path, second, {"generate_scheduler": [{"node_id": "n3"}]}, run_id="b", resumed=True)
    doc = json.load(open(path))
    assert doc["actor_train"][0]["node_id"] == "n3" and doc["run_id"] == "b"
    assert [(e["run_id"], e["actor_train"][0]["node_id"], list(e["actors"])) for e in doc["earlier"]] == [
        ("a", "n1", ["train_env_managers"])]
    write_placement(path, first, {}, run_id="c", resumed=False)  # a new run starts afresh
    assert json.load(open(path))["earlier"] == []
