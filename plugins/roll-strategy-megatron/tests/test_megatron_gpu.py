"""megatron_train for real on CUDA (skipped without a GPU): numerics against hf_train on the tiny
model, export / checkpoint round trips, and tensor parallelism when two GPUs are present.

Ran on one H200 on 2026-11-26 (docs/gpu.md); the two-GPU test has not run yet (one GPU was lent).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _megatron_helpers import make_batch, make_loss_fn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="megatron_train needs a CUDA GPU (none here)"),
]
megatron = pytest.importorskip("megatron.core", reason="megatron-core is not installed")

ARGS = {"dtype": "fp32", "learning_rate": 1e-3, "per_device_train_batch_size": 2, "adam_epsilon": 1e-6,
        "use_transformer_engine": False}


def batch_and_loss():
    batch = make_batch()
    return batch, make_loss_fn(batch)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from roll_core.models import resolve_pretrain

    return resolve_pretrain("roll-tiny", str(tmp_path_factory.mktemp("mg-cache")), seed=0)


def test_matches_hf_train_and_round_trips(tiny, tmp_path):
    from roll_strategy_megatron.strategy import MegatronTrainStrategy

    from roll_core.strategies.hf_train import HFTrainStrategy
    from roll_core.strategies.tensors import read_safetensors_dir

    batch, loss_fn = batch_and_loss()
    ours = MegatronTrainStrategy(tiny, **ARGS)
    exported = ours.export_weights()
    original = read_safetensors_dir(tiny)
    assert all(torch.equal(exported[k], original[k]) for k in original)
    hf = HFTrainStrategy(tiny, device="cuda", **{k: v for k, v in ARGS.items() if k != "use_transformer_engine"})
    lp, ent = ours.compute_log_probs(batch, with_entropy=True)
    ref_lp, ref_ent = hf.compute_log_probs(batch, with_entropy=True)
    assert torch.allclose(lp, ref_lp, atol=1e-4) and torch.allclose(ent, ref_ent, atol=1e-4)
    metrics, ref = ours.train_step(batch, loss_fn), hf.train_step(batch, loss_fn)
    assert metrics["loss"] == pytest.approx(ref["loss"], abs=1e-5)
    assert metrics["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-3)
    after, ref_after = ours.export_weights(), hf.export_weights()
    assert max(float((after[k].cpu() - ref_after[k].cpu()).abs().max()) for k in ref_after) <= 1e-4

    ours.save_checkpoint(str(tmp_path / "ckpt"))
    again = MegatronTrainStrategy(tiny, **ARGS)
    again.load_checkpoint(str(tmp_path / "ckpt"))
    assert again.global_step == 1
    a, b = ours.train_step(batch, loss_fn), again.train_step(batch, loss_fn)
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="tensor parallelism needs two GPUs")
def test_two_way_tensor_parallel_matches_one_gpu(tiny, tmp_path):
    script = Path(__file__).with_name("_megatron_tp_worker.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script), tiny, str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    from roll_strategy_megatron.strategy import MegatronTrainStrategy

    single = MegatronTrainStrategy(tiny, **ARGS)
    batch, _ = batch_and_loss()
    lp, _ = single.compute_log_probs(batch)
    assert torch.allclose(torch.load(tmp_path / "tp_log_probs.pt"), lp, atol=1e-4)
