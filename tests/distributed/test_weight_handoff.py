"""Weight sync without the object store: the plan per engine (pure), and real Ray workers whose
engine after a shared-memory sync holds, bit for bit, what an object-store sync gives, over two
training steps (the second sync overwrites the same /dev/shm file in place)."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from roll_core.distributed.weight_files import (
    SHM_DIR,
    owned_file_name,
    process_start,
    remove_stale_weight_files,
)
from roll_core.workers.weight_handoff import (
    CUDA_IPC,
    OBJECT_STORE,
    SHARED_MEMORY,
    HandoffWriter,
    Layout,
    Locality,
    WeightHandoff,
    plan_weight_sync,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "frozen_lake" / "grpo.yaml"


def test_plan_per_engine():
    gpu0, gpu1 = "cuda:GPU-aaaa", "cuda:GPU-bbbb"
    trainer = Locality("node-a", gpu0)
    engines = [Locality("node-a", gpu0), Locality("node-a", gpu1), Locality("node-a", "cpu"),
               Locality("node-b", gpu0), Locality("node-b", "cpu")]
    assert plan_weight_sync(trainer, engines) == [CUDA_IPC, SHARED_MEMORY, SHARED_MEMORY, OBJECT_STORE,
                                                  OBJECT_STORE]
    cpu_trainer = Locality("node-a", "cpu")
    assert plan_weight_sync(cpu_trainer, [Locality("node-a", "cpu"), Locality("node-b", "cpu")]) == [
        SHARED_MEMORY, OBJECT_STORE]
    assert plan_weight_sync(cpu_trainer, []) == []


def test_layout_round_trips_every_dtype_bit_for_bit():
    import torch

    weights = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.arange(5),
               "d": torch.randn(2, 2, 3).half()}
    layout = Layout.of(weights)
    assert all(offset % 64 == 0 for _, _, _, offset, _ in layout.entries)
    flat = torch.zeros(layout.nbytes, dtype=torch.uint8)
    layout.write(flat, weights)
    views = layout.views(flat)
    assert all(torch.equal(views[k], v) and views[k].dtype == v.dtype for k, v in weights.items())


def test_an_engine_falls_back_to_what_the_handoff_holds(tmp_path):
    import torch

    weights = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    here = Locality("node-a", "cpu")
    no_forms = WeightHandoff(here, missing={SHARED_MEMORY: "OSError: no space left on device"})
    with pytest.raises(RuntimeError, match="no space left"):
        no_forms.open(here, {})
    layout = Layout.of(weights)
    path = tmp_path / "weights"
    path.write_bytes(b"\0" * layout.nbytes)
    flat = torch.from_file(str(path), shared=True, size=layout.nbytes, dtype=torch.uint8)
    layout.write(flat, weights)
    shm = WeightHandoff(here, layout=layout, shm_path=str(path))
    transport, state = shm.open(here, {})
    assert transport == SHARED_MEMORY and torch.equal(state["w"], weights["w"])
    with pytest.raises(RuntimeError, match=r"holds \['shared_memory'\], none usable"):
        shm.open(Locality("node-b", "cpu"), {})  # another node cannot map this node's file


def no_host_weights():
    raise AssertionError("a CUDA IPC handoff needs no host copy")


def test_the_device_buffer_is_freed_after_a_sync_and_made_again_at_the_next():
    """The CUDA IPC path's bookkeeping, with CPU tensors standing in for the GPU's (the same writer,
    layout and torch IPC reduction; the next test does it on a GPU)."""
    import torch

    gpu = Locality("node-a", "cuda:GPU-stand-in")
    writer = HandoffWriter()
    for step in (1, 2):
        weights = {"a": torch.randn(3, 5) * step, "b": torch.arange(7) + step, "c": torch.randn(4).half()}
        handoff = writer.build(gpu, [gpu], no_host_weights, lambda weights=weights: weights)
        layout = handoff.ipc[0]
        assert handoff.forms() == {CUDA_IPC} and not handoff.missing and writer.shm_path is None
        assert writer.device_bytes == layout.nbytes == 3 * 64  # made again after the release
        transport, state = handoff.open(gpu, {})
        assert transport == CUDA_IPC and all(torch.equal(state[k], v) for k, v in weights.items())
        del state  # the engine copied what it needs
        assert writer.release_device() == layout.nbytes and writer.device_bytes == 0
        assert writer.release_device() == 0
    writer.close()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cuda_ipc_buffer_goes_back_to_the_gpu_after_a_sync():
    import torch

    device = torch.device("cuda", 0)
    gpu = Locality("node-a", f"cuda:{torch.cuda.get_device_properties(0).uuid}")
    weights = {"w": torch.randn(64, 1024, 1024, device=device)}  # 256 MiB
    writer = HandoffWriter()
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    for _ in range(2):  # the second sync makes the buffer again
        handoff = writer.build(gpu, [gpu], no_host_weights, lambda: weights)
        assert handoff.forms() == {CUDA_IPC} and torch.cuda.memory_allocated(device) >= allocated + (256 << 20)
        transport, state = handoff.open(gpu, {})  # an engine loads (here: in this process) and lets go
        assert transport == CUDA_IPC and torch.equal(state["w"], weights["w"])
        del state
        assert writer.release_device() == handoff.ipc[0].nbytes == 256 << 20
        assert torch.cuda.memory_allocated(device) <= allocated  # freed, not kept for the next sync
        assert torch.cuda.memory_reserved(device) <= reserved  # and given back to the driver
    writer.close()


def dead_pid() -> int:
    """The pid of a process that ran and was reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_owners_weight_file_is_removed_and_a_live_ones_kept(tmp_path, caplog):
    me = process_start(os.getpid())
    files = {
        "dead": f"roll-weights-{dead_pid()}-{me}-aaaa",
        # our pid, but another start time: the pid of a dead run, reused by this process
        "reused": f"roll-weights-{os.getpid()}-{me - 500}-bbbb",
        "live": owned_file_name("cccc"),
        "parent": f"roll-weights-{os.getppid()}-{process_start(os.getppid())}-dddd",
        "unowned": "roll-weights-0123456789ab",  # no owner in the name: never removed
        "other": "something-else",
    }
    for name in files.values():
        (tmp_path / name).write_bytes(b"\0" * 1000)
    with caplog.at_level("WARNING", logger="roll_core.workers.weight_handoff"):
        removed = remove_stale_weight_files(str(tmp_path))
    assert sorted(removed) == sorted(str(tmp_path / files[k]) for k in ("dead", "reused"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files[k] for k in ("live", "parent", "unowned", "other"))
    assert [r.getMessage().split(" GB)")[0] for r in caplog.records] == [
        "weight sync: removed 2 weight file(s) left by dead runs (0.00"]
    assert remove_stale_weight_files(str(tmp_path)) == []
    assert remove_stale_weight_files(str(tmp_path / "missing")) == []
    # a dead pid, but the file locked as a writer locks it: a writer in another pid namespace lives
    locked = tmp_path / f"roll-weights-{dead_pid()}-{me}-eeee"
    locked.write_bytes(b"\0")
    fd = os.open(locked, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    assert remove_stale_weight_files(str(tmp_path)) == [] and locked.exists()
    os.close(fd)  # what its owner's death does
    assert remove_stale_weight_files(str(tmp_path)) == [str(locked)]


#: an engine's owner (the vLLM strategy) that makes an adapter directory and a weights file, says where,
#: and waits to be killed
_ENGINE = """
import os, sys, time
from roll_core.distributed.weight_files import OwnedPaths
paths = OwnedPaths(sys.argv[1])
adapter = paths.create("vllm-lora-v3-1", directory=True)
with open(os.path.join(adapter, "adapter_model.safetensors"), "wb") as f:
    f.write(bytes(1000))
print(adapter, paths.create("vllm-weights-ab12.safetensors"), flush=True)
time.sleep(120)
"""


def test_owned_paths_live_with_their_owner_and_are_swept_when_it_is_killed(tmp_path):
    engine = subprocess.Popen([sys.executable, "-c", _ENGINE, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        adapter, weights = engine.stdout.readline().split()
        for path in (adapter, weights):  # named for their owner, as the trainer's handoff file
            assert os.path.basename(path).startswith(f"roll-weights-{engine.pid}-")
        assert remove_stale_weight_files(str(tmp_path)) == []  # a live owner's stay
        assert os.path.isfile(os.path.join(adapter, "adapter_model.safetensors")) and os.path.isfile(weights)
        engine.kill()  # a killed actor: no cleanup of its own
        engine.wait()
        assert sorted(remove_stale_weight_files(str(tmp_path))) == sorted([adapter, weights])
        assert list(tmp_path.iterdir()) == []  # the directory with what it held
    finally:
        engine.kill()
        engine.wait()
    # in this process: remove takes one (with its contents), remove_all (a strategy's shutdown) the rest
    from roll_core.distributed.weight_files import OwnedPaths

    paths = OwnedPaths(str(tmp_path))
    made = [paths.create("lora-v1", directory=True), paths.create("lora-v2", directory=True),
            paths.create("w")]
    (tmp_path / made[0] / "adapter_config.json").write_text("{}")
    paths.remove(made[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(os.path.basename(p) for p in made[1:])
    paths.remove_all()
    assert list(tmp_path.iterdir()) == [] and paths.locks == {}
    paths.remove(made[1])  # gone already: fine
    # a file's size is reserved at creation: one that cannot be has nothing left behind, no lock held
    assert os.path.getsize(paths.create("sized", size=4096)) == 4096
    paths.remove_all()
    with pytest.raises(OSError):
        paths.create("too-large", size=1 << 62)
    assert list(tmp_path.iterdir()) == [] and paths.locks == {}


#: a trainer that writes its handoff file, says where, and waits to be killed
_TRAINER = """
import time, torch
from roll_core.workers.weight_handoff import HandoffWriter
writer = HandoffWriter()
writer._write_shm({"w": torch.ones(1000)})
print(writer.shm_path, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="no /dev/shm")
def test_the_reaper_removes_the_file_of_a_trainer_killed_with_sigkill():
    trainer = subprocess.Popen([sys.executable, "-c", _TRAINER], stdout=subprocess.PIPE, text=True)
    reaper = subprocess.Popen([sys.executable, "-m", "roll_core.distributed.reaper", str(trainer.pid)],
                              stdin=subprocess.PIPE)
    try:
        path = trainer.stdout.readline().strip()
        assert os.path.basename(path).startswith(f"roll-weights-{trainer.pid}-") and os.path.exists(path)
        assert path not in remove_stale_weight_files() and os.path.exists(path)  # a live owner's file stays
        trainer.kill()  # SIGKILL: no cleanup of its own
        trainer.wait()
        assert os.path.exists(path)
        reaper.stdin.close()  # what the driver's death does
        assert reaper.wait(timeout=60) == 0
        assert not os.path.exists(path)
    finally:
        trainer.kill()
        reaper.kill()


def make_run(tmp):
    from roll_core.config import load_config, resolve

    return resolve(load_config(str(DEMO), [
        f"logging_dir={tmp}/logs", f"output_dir={tmp}/ckpt", "actor_train.training_args.max_grad_norm=0",
        "actor_train.training_args.optim=sgd", "actor_train.training_args.learning_rate=1.0"]))


def make_batch(rows: int = 4, width: int = 12):
    import torch

    g = torch.Generator().manual_seed(0)
    attention = torch.ones(rows, width, dtype=torch.long)
    response = attention.clone()
    response[:, :5] = 0
    return {"input_ids": torch.randint(3, 200, (rows, width), generator=g), "attention_mask": attention,
            "response_mask": response, "advantages": torch.randn(rows, width - 1, generator=g),
            "scores": torch.randn(rows, generator=g)}


@pytest.mark.ray
def test_shared_memory_sync_equals_object_store_sync_over_two_steps(ray_session, tmp_path):
    import ray
    import torch

    from roll_core.distributed.layout import build_layout
    from roll_core.distributed.placement import Placement
    from roll_core.workers.infer_worker import InferWorker
    from roll_core.workers.train_group import TrainGroup

    class Engine(InferWorker):
        def weights(self):
            return {k: v.clone() for k, v in self.strategy.model.state_dict().items()}

    run = make_run(tmp_path)
    placement = Placement.create(build_layout(run.config, ["actor_train"], on_gpus=False))
    group = TrainGroup(run, "actor_train", placement, num_training_steps=4)
    engine = ray.remote(Engine).options(num_cpus=0)
    args = (run.strategy("actor_infer"), run.config.actor_infer, run.model_path("actor_infer"))
    shm_engine, store_engine = (engine.remote(*args, seed=int(run.config.seed), plugins=dict(run.plugins))
                                for _ in range(2))
    try:
        here = ray.get(shm_engine.locality.remote())
        assert here.node_id == ray.get_runtime_context().get_node_id() and here.device == "cpu"
        inodes, before = [], ray.get(shm_engine.weights.remote())
        for step in (1, 2):
            group.train_actor(make_batch(), epochs=1, shuffle_seed=step)
            handoff_ref = group.export_weights_ref(targets=[here])
            handoff = ray.get(handoff_ref[0])
            assert handoff.forms() == {SHARED_MEMORY} and handoff.ref is None  # nothing in the object store
            assert ray.get(shm_engine.load_weights.remote(handoff_ref[0], step)) == SHARED_MEMORY
            assert ray.get(store_engine.load_weights.remote(group.export_weights_ref()[0], step)) is None
            inodes.append(os.stat(handoff.shm_path).st_ino)
            assert re.match(r"roll-weights-\d+-\d+-[0-9a-f]+$", os.path.basename(handoff.shm_path))  # its owner
            assert group.release_handoff_device() == 0  # no GPU buffer on CPU; the file stays for the next sync
            via_shm, via_store = ray.get([shm_engine.weights.remote(), store_engine.weights.remote()])
            assert via_shm.keys() == via_store.keys()
            assert all(torch.equal(via_shm[k], via_store[k]) for k in via_store)
            assert not all(torch.equal(via_shm[k], before[k]) for k in before)  # the step changed them
            before = via_shm
            assert ray.get(shm_engine.policy_version.remote()) == step
        assert inodes[0] == inodes[1]  # one file, overwritten in place
        # an engine on another node: the handoff holds the object store's copy, and a same-node
        # engine given only that falls back to it
        remote_ref = group.export_weights_ref(targets=[Locality("another-node", "cpu")])
        assert ray.get(remote_ref[0]).forms() == {OBJECT_STORE}
        assert ray.get(shm_engine.load_weights.remote(remote_ref[0], 3)) == OBJECT_STORE
        path = handoff.shm_path
    finally:
        group.shutdown()
        placement.remove()
        for actor in (shm_engine, store_engine):
            ray.kill(actor)
    assert not os.path.exists(path)  # the group's shutdown removed the file
