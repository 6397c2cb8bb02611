"""deepspeed_train for real on CPU (DS_ACCELERATOR=cpu, gloo): numerics against hf_train, two ranks
against one, checkpoints, offload, and the install hint.

Tolerances (fp32): log-probs equal hf_train's to 1e-5; after one AdamW step (lr 1e-3, eps 1e-6)
weights equal hf_train's / the single-rank run's to 5e-6 (measured: 1.2e-7 at ZeRO 0-2, 1.8e-6 at
ZeRO-3). Gradients differ only in summation order; Adam's first step, g / (|g| + eps), amplifies
those last bits where |g| is below eps, hence eps 1e-6 rather than 1e-8 in these tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install roll-strategy-deepspeed)")

import torch  # noqa: E402
from _deepspeed_helpers import STRATEGY_ARGS, make_batch, make_loss_fn, stale_jit_locks  # noqa: E402

# DeepSpeed JIT-builds its CPU ops (g++, minutes) on first use and waits on other builds' lock files:
# never let a test wait forever
pytestmark = pytest.mark.timeout(1800)

LOGPROB_ATOL = 1e-5
WEIGHT_ATOL = 5e-6
HERE = Path(__file__).parent


def _jit_build_root() -> str:
    from torch.utils.cpp_extension import _get_build_directory

    return os.path.dirname(_get_build_directory("cpu_adam", False))


@pytest.fixture(scope="module", autouse=True)
def no_stale_jit_locks():
    """Fail fast, naming the file, where a dead op build left a lock every load would wait on."""
    stale = stale_jit_locks(_jit_build_root())
    if stale:
        pytest.fail(f"stale torch/DeepSpeed JIT build lock(s), older than any build takes: {', '.join(stale)}. "
                    f"A killed build left them and every later op load waits forever; remove them "
                    f"(rm {' '.join(stale)}) and rerun.")


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def deepspeed_strategy(model_dir: str, **kwargs):
    from roll_strategy_deepspeed.strategy import DeepSpeedTrainStrategy

    return DeepSpeedTrainStrategy(model_dir, **{**STRATEGY_ARGS, **kwargs})


@pytest.fixture(scope="module")
def reference(ds_tiny_dir):
    """hf_train's log-probs and weights after one step on the shared batch."""
    from roll_core.strategies.hf_train import HFTrainStrategy

    batch = make_batch()
    hf = HFTrainStrategy(ds_tiny_dir, device="cuda" if torch.cuda.is_available() else "cpu", **STRATEGY_ARGS)
    log_probs, entropy = hf.compute_log_probs(batch, with_entropy=True)
    metrics = hf.train_step(batch, make_loss_fn(batch))
    return SimpleNamespace(log_probs=log_probs, entropy=entropy, metrics=metrics, weights=hf.export_weights())


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_matches_hf_train(ds_tiny_dir, reference, stage):
    batch = make_batch()
    strategy = deepspeed_strategy(ds_tiny_dir, zero_stage=stage)
    assert strategy.engine.zero_optimization_stage() == stage
    log_probs, entropy = strategy.compute_log_probs(batch, with_entropy=True)
    assert log_probs.shape == (8, 15)
    assert float((log_probs - reference.log_probs).abs().max()) <= LOGPROB_ATOL
    assert float((entropy - reference.entropy).abs().max()) <= LOGPROB_ATOL
    assert float(log_probs[batch["response_mask"][:, 1:] == 0].abs().max()) == 0.0

    metrics = strategy.train_step(batch, make_loss_fn(batch))
    assert metrics["loss"] == pytest.approx(reference.metrics["loss"], abs=1e-6)
    assert metrics["grad_norm"] == pytest.approx(reference.metrics["grad_norm"], rel=1e-4)
    assert metrics["tokens"] == pytest.approx(reference.metrics["tokens"])
    weights = strategy.export_weights()
    assert weights.keys() == reference.weights.keys()  # HF names, tied lm_head included
    assert max_diff(weights, reference.weights) <= WEIGHT_ATOL


def test_padded_rows_match_packed_ones(ds_tiny_dir, reference):
    """Packing is on by default on both sides of the test above; with it off (ZeRO-3) DeepSpeed pads
    every micro-batch and gets the packed hf_train's numbers."""
    from roll_core.strategies.packing import PackingSettings

    batch = make_batch()
    strategy = deepspeed_strategy(ds_tiny_dir, zero_stage=3, packing=PackingSettings(enabled=False))
    assert not strategy.packs and deepspeed_strategy(ds_tiny_dir, zero_stage=0).packs
    log_probs, entropy = strategy.compute_log_probs(batch, with_entropy=True)
    assert float((log_probs - reference.log_probs).abs().max()) <= LOGPROB_ATOL
    assert float((entropy - reference.entropy).abs().max()) <= LOGPROB_ATOL
    metrics = strategy.train_step(batch, make_loss_fn(batch))
    assert metrics["loss"] == pytest.approx(reference.metrics["loss"], abs=1e-6)
    assert metrics["grad_norm"] == pytest.approx(reference.metrics["grad_norm"], rel=1e-4)
    assert max_diff(strategy.export_weights(), reference.weights) <= WEIGHT_ATOL


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the two-rank test runs on CPU (gloo); with CUDA the "
                    "single-rank reference would run on the GPU")
def test_two_ranks_match_one(ds_tiny_dir, tmp_path):
    """torchrun, 2 gloo ranks, each half the batch with the global normalisers == one rank, whole batch."""
    out, stages = tmp_path / "dp", (2, 3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(port), str(HERE / "_deepspeed_dp_worker.py"), ds_tiny_dir, str(out),
           ",".join(map(str, stages))]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]

    batch = make_batch()
    for stage in stages:
        single = deepspeed_strategy(ds_tiny_dir, zero_stage=stage)
        log_probs, _ = single.compute_log_probs(batch)
        metrics = single.train_step(batch, make_loss_fn(batch))
        weights = single.export_weights()

        ranks = [torch.load(f"{out}.zero{stage}.rank{r}.pt") for r in (0, 1)]
        infos = [json.loads(Path(f"{out}.zero{stage}.rank{r}.json").read_text()) for r in (0, 1)]
        assert [i["world_size"] for i in infos] == [2, 2]
        dp_log_probs = torch.cat([r["log_probs"] for r in ranks])
        assert float((dp_log_probs - log_probs).abs().max()) <= LOGPROB_ATOL
        for info in infos:  # every rank reports the global-batch loss
            assert info["metrics"]["loss"] == pytest.approx(metrics["loss"], abs=1e-6)
            assert info["metrics"]["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=1e-4)
        assert max_diff(ranks[0]["weights"], ranks[1]["weights"]) == 0.0  # replicas agree exactly
        print(f"ZeRO-{stage}: max |w(2 ranks) - w(1 rank)| = {max_diff(ranks[0]['weights'], weights):.2e}")
        assert max_diff(ranks[0]["weights"], weights) <= WEIGHT_ATOL


@pytest.mark.parametrize("stage", [2, 3])
def test_checkpoint_round_trip(ds_tiny_dir, tmp_path, stage):
    """Save after one step; a fresh strategy that loads it continues exactly like the original."""
    from transformers import AutoModelForCausalLM

    batch = make_batch()
    loss_fn = make_loss_fn(batch)
    kwargs = {"zero_stage": stage, "lr_scheduler_type": "linear", "warmup_steps": 1, "num_training_steps": 4}
    first = deepspeed_strategy(ds_tiny_dir, **kwargs)
    first.train_step(batch, loss_fn)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    saved = first.export_weights()
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"), dtype=torch.float32)
    assert max_diff({k: v for k, v in hf.state_dict().items()}, saved) == 0.0

    rng_files = sorted((tmp_path / "ckpt").glob("rng_state_rank*.pt"))
    assert rng_files and all(torch.load(f, weights_only=True)["numpy"]["keys"] for f in rng_files)  # no pickled code

    second = deepspeed_strategy(ds_tiny_dir, **kwargs)
    second.load_checkpoint(str(tmp_path / "ckpt"))
    assert second.global_step == 1 and max_diff(second.export_weights(), saved) == 0.0
    a, b = first.train_step(batch, loss_fn), second.train_step(batch, loss_fn)
    assert a["lr"] == b["lr"] > 0  # the scheduler state came back (warm-up is over)
    assert max_diff(first.export_weights(), second.export_weights()) == 0.0


def test_reference_model_zero3_is_frozen(ds_tiny_dir, reference):
    strategy = deepspeed_strategy(ds_tiny_dir, zero_stage=3, trainable=False)
    log_probs, _ = strategy.compute_log_probs(make_batch())
    assert float((log_probs - reference.log_probs).abs().max()) <= LOGPROB_ATOL
    with pytest.raises(Exception, match="trainable=False"):
        strategy.train_step(make_batch(), make_loss_fn(make_batch()))


def _cpu_adam_built() -> bool:
    return os.path.isfile(os.path.join(_jit_build_root(), "cpu_adam", "cpu_adam.so"))


@pytest.mark.slow
@pytest.mark.skipif(not (os.environ.get("ROLL_TEST_BUILD_OPS") or _cpu_adam_built()),
                    reason="offload_optimizer uses DeepSpeedCPUAdam, a one-time g++ build (2-7 min on 2 cores); "
                           "set ROLL_TEST_BUILD_OPS=1 to build it")
def test_offload_optimizer_to_cpu(ds_tiny_dir, reference):
    strategy = deepspeed_strategy(ds_tiny_dir, zero_stage=2, offload_optimizer="cpu")
    assert type(strategy.engine.optimizer.optimizer).__name__ == "DeepSpeedCPUAdam"
    batch = make_batch()
    strategy.train_step(batch, make_loss_fn(batch))
    assert max_diff(strategy.export_weights(), reference.weights) <= WEIGHT_ATOL


def test_from_worker_config_reads_a_roll_preset(ds_tiny_dir):
    from roll_strategy_deepspeed.strategy import DeepSpeedTrainStrategy

    worker = {
        "model_args": {"dtype": "fp32"},
        "training_args": {"learning_rate": 2e-5, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2},
        "strategy_args": {"strategy_name": "deepspeed_train", "strategy_config": {
            "zero_optimization": {"stage": 1}, "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto", "bf16": {"enabled": "auto"}}},
    }
    strategy = DeepSpeedTrainStrategy.from_worker_config(worker, ds_tiny_dir, seed=0)
    assert strategy.ds_config["gradient_accumulation_steps"] == 2 and strategy.mini_batch_size == 4
    assert strategy.engine.zero_optimization_stage() == 1 and strategy.engine.get_lr()[0] == 2e-5
    worker["strategy_args"]["strategy_config"]["gradient_accumulation_steps"] = 8
    with pytest.raises(Exception, match="gradient_accumulation_steps"):
        DeepSpeedTrainStrategy.from_worker_config(worker, ds_tiny_dir, seed=0)


def test_stale_jit_locks_are_found_by_age(tmp_path):
    now = time.time()
    for op, age in (("cpu_adam", 3600), ("deepspeed_shm_comm", 60)):
        (tmp_path / op).mkdir()
        (tmp_path / op / "lock").touch()
        os.utime(tmp_path / op / "lock", (now - age, now - age))
    (tmp_path / "built_op").mkdir()  # no lock: nothing building
    assert stale_jit_locks(str(tmp_path), max_age=600, now=now) == [str(tmp_path / "cpu_adam" / "lock")]
    assert stale_jit_locks(str(tmp_path), max_age=7200, now=now) == []


@pytest.mark.parametrize("stage", [3])
def test_lora_step_matches_hf_train_and_checkpoints_the_adapter(ds_tiny_dir, tmp_path, stage):
    """LoRA on DeepSpeed (CPU): the same adapter step as hf_train, the reference is the base with adapters
    disabled, merged weights export, the adapter saves in peft's format and resumes. ZeRO-3 (stage 2 passes
    too, measured): the stage where every LoRA path has to gather the partitioned parameters first."""
    from roll_core.strategies.hf_train import HFTrainStrategy
    from roll_core.strategies.lora import LoraSettings

    lora = LoraSettings(target="all-linear", rank=4)
    batch = make_batch()
    loss_fn = make_loss_fn(batch)
    hf = HFTrainStrategy(ds_tiny_dir, lora=lora, **STRATEGY_ARGS)
    ds = deepspeed_strategy(ds_tiny_dir, zero_stage=stage, lora=lora)
    trainable, total = ds.parameter_counts()
    assert (trainable, total) == hf.parameter_counts() and trainable < total / 5
    base = ds.export_weights()
    for _ in range(2):  # the second step moves lora_A too
        expected, got = hf.train_step(batch, loss_fn), ds.train_step(batch, loss_fn)
        assert got["loss"] == pytest.approx(expected["loss"], abs=1e-6)
    torch.testing.assert_close(ds.compute_log_probs(batch)[0], hf.compute_log_probs(batch)[0], atol=LOGPROB_ATOL,
                               rtol=0)
    torch.testing.assert_close(ds.compute_reference_log_probs(batch), hf.compute_reference_log_probs(batch),
                               atol=LOGPROB_ATOL, rtol=0)
    merged = ds.export_weights()
    assert merged.keys() == base.keys() and max_diff(merged, hf.export_weights()) <= WEIGHT_ATOL
    assert max_diff(merged, base) > 1e-4  # the adapters moved the merged weights

    ds.save_checkpoint(str(tmp_path / "ckpt"))
    assert (tmp_path / "ckpt" / "adapter_model.safetensors").is_file()
    again = deepspeed_strategy(ds_tiny_dir, zero_stage=stage, lora=lora)
    again.load_checkpoint(str(tmp_path / "ckpt"))
    a, b = ds.train_step(batch, loss_fn), again.train_step(batch, loss_fn)
    assert a["loss"] == b["loss"]
    assert max_diff(ds.export_weights(), again.export_weights()) == 0.0
