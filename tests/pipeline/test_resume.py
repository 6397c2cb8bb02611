"""Checkpoints: a resumed run reproduces the uninterrupted run's next step; HF-loadable weights."""

from __future__ import annotations

import math

import pytest
from pipeline_helpers import EXAMPLES, run, step_metrics, tiny_frozen_lake

pytestmark = [pytest.mark.slow, pytest.mark.ray]

CONFIG = EXAMPLES / "frozen_lake" / "grpo.yaml"
#: wall-clock measurements, which differ between any two runs
TIMING = ("time/", "rollout/trajectories_per_s", "rollout/env_steps_per_s")


def comparable(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith(TIMING) and "per_s" not in k}


def test_resume_reproduces_next_step_and_checkpoint_loads(ray_session, tmp_path):
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    code, out = run(CONFIG, tiny_frozen_lake(full, max_steps="3", save_steps="2"))
    assert code == 0
    assert sorted(p.name for p in (full / "ckpt").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    # what a run leaves besides checkpoints: progress lines, the resolved config, tensorboard, the curve
    assert "step 3/3" in out
    logs = full / "logs"
    assert (logs / "config.yaml").is_file() and list(logs.glob("events.out.tfevents.*"))
    assert (logs / "learning_curve.png").stat().st_size > 1000

    # what a run killed after step 2 leaves behind is checkpoint-2; continue it in a new directory
    code, out = run(CONFIG, tiny_frozen_lake(resumed, max_steps="3", save_steps="2",
                                             resume_from_checkpoint=str(full / "ckpt" / "checkpoint-2")))
    assert code == 0
    assert "resumed from" in out
    expected = comparable(step_metrics(full / "ckpt" / "checkpoint-3", 3))
    got = comparable(step_metrics(resumed / "ckpt" / "checkpoint-3", 3))
    assert set(got) == set(expected)
    mismatched = {k: (expected[k], got[k]) for k in expected
                  if not math.isclose(expected[k], got[k], rel_tol=0, abs_tol=1e-6)}
    assert not mismatched, f"step 3 differs after resume: {mismatched}"
    assert expected["actor/grad_norm"] > 0  # the step really trained (the warm start produced valid moves)

    # the saved actor is a plain Hugging Face checkpoint
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = full / "ckpt" / "checkpoint-3"
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        assert model(ids).logits.shape[-1] == len(tokenizer)


def test_lora_run_with_kl_resumes_exactly_and_saves_the_adapter(ray_session, tmp_path):
    """LoRA end to end: a KL loss whose reference is actor_train with its adapters disabled (no
    reference worker), adapter checkpoints, and a run resumed from checkpoint-2 takes step 3 exactly
    like the full run. No warm start: with the random tiny model's fixed logit scale an adapter does
    not learn the move format in a few steps; an entropy bonus moves the adapters from step 1 on."""
    lora = {"actor_train.model_args.lora_target": "all-linear", "actor_train.model_args.lora_rank": "8",
            "actor_train.training_args.learning_rate": "1e-2", "use_kl_loss": "true", "kl_loss_coef": "0.1",
            "entropy_loss_coef": "0.05", "warmup_sft.steps": "0"}
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    code, out = run(CONFIG, tiny_frozen_lake(full, max_steps="3", save_steps="2", **lora))
    assert code == 0
    assert "parameters trainable" in out and "LoRA rank 8, alpha 16" in out
    assert "reference log-probs from actor_train with adapters disabled (no reference workers)" in out
    checkpoint = full / "ckpt" / "checkpoint-3"
    assert (checkpoint / "adapter_model.safetensors").is_file() and (checkpoint / "adapter_config.json").is_file()
    assert not list(checkpoint.glob("model*.safetensors"))  # the adapter, not a copy of the base model

    code, out = run(CONFIG, tiny_frozen_lake(resumed, max_steps="3", save_steps="2", **lora,
                                             resume_from_checkpoint=str(full / "ckpt" / "checkpoint-2")))
    assert code == 0 and "resumed from" in out
    expected = comparable(step_metrics(checkpoint, 3))
    got = comparable(step_metrics(resumed / "ckpt" / "checkpoint-3", 3))
    mismatched = {k: (expected[k], got[k]) for k in expected
                  if not math.isclose(expected[k], got.get(k, math.nan), rel_tol=0, abs_tol=1e-6)}
    assert not mismatched, f"step 3 differs after resume: {mismatched}"
    # the adapters trained, and by step 3 the policy has left the reference: the KL term is live
    assert expected["actor/grad_norm"] > 0 and expected["actor/kl_loss"] > 0

    from safetensors.torch import load_file

    first, last = (load_file(full / "ckpt" / f"checkpoint-{s}" / "adapter_model.safetensors") for s in (2, 3))
    resumed_last = load_file(resumed / "ckpt" / "checkpoint-3" / "adapter_model.safetensors")
    assert any(not (first[k] == last[k]).all() for k in last)  # step 3 moved the adapter ...
    assert all((resumed_last[k] == last[k]).all() for k in last)  # ... to the same weights after resume


def test_async_run_killed_after_a_checkpoint_resumes_without_losing_or_repeating_an_episode(request, tmp_path):
    """``kill -9`` of an asynchronous run (k = 1) after checkpoint-2, while it trains step 3; then
    ``resume_from_checkpoint: true`` in the same directories. What was in flight at the checkpoint
    (the episodes generated ahead for step 3, with tokens of version 1, possibly a partial response
    kept across the sync) is not saved: it is played again from the same env seeds by the resumed
    weights (docs/architecture.md, "Resume"). Across both runs every admitted episode is trained
    exactly once, every trained token is within k versions of the step, and the step counter,
    episode counters and metric history continue."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from roll_core.pipeline import trained_record
    from roll_core.pipeline.checkpoint import load_state

    k, steps, groups = 1, 4, 2
    overrides = tiny_frozen_lake(tmp_path, max_steps=str(steps), save_steps="2", async_generation_ratio=str(k),
                                 **{"warmup_sft.steps": "0",  # invalid answers: every episode plays 4 turns
                                    "+actor_train.strategy_args.strategy_config.num_threads": "1",
                                    "+actor_infer.strategy_args.strategy_config.num_threads": "1"})
    logs, ckpts = tmp_path / "logs", tmp_path / "ckpt"
    record = logs / trained_record.TRAINED_FILE

    def trained_steps() -> list[int]:
        lines = record.read_text().splitlines() if record.is_file() else []
        return [json.loads(line)["step"] for line in lines if line.endswith("}")]

    with open(tmp_path / "killed.log", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "roll_core", "run", str(CONFIG), *overrides],
                                stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
        deadline = time.monotonic() + 300
        while 3 not in trained_steps() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is None:  # (a run that ended on its own fails below, with its output)
            os.kill(proc.pid, signal.SIGKILL)  # during step 4, after checkpoint-2 and step 3
        proc.wait()
    print(f"killed after {time.monotonic() - deadline + 300:.1f} s")
    assert trained_steps() == [1, 2, 3], (tmp_path / "killed.log").read_text()[-3000:]
    assert (ckpts / "checkpoint-2").is_dir() and not (ckpts / "checkpoint-4").exists()
    killed = {line["step"]: line for line in trained_record.read(str(logs))}
    at_checkpoint = load_state(str(ckpts / "checkpoint-2"))["rollout"]
    # in flight at the checkpoint: the next episode of each group, generated ahead for step 3
    assert at_checkpoint["returned"] == [[2]] * groups and at_checkpoint["next_episode"] == [3] * groups

    request.getfixturevalue("ray_session")  # this process's Ray only now: one cluster at a time
    code, out = run(CONFIG, [*overrides, "resume_from_checkpoint=true"])
    print(f"resumed run done after {time.monotonic() - deadline + 300:.1f} s")
    assert code == 0 and "at step 2" in out and f"step {steps}/{steps}" in out

    lines = trained_record.read(str(logs))
    assert [line["step"] for line in lines] == list(range(1, steps + 1))  # the killed run's step 3 is gone
    assert lines[:2] == [killed[1], killed[2]]
    trained = [(e["group"], e["episode"]) for line in lines for e in line["episodes"]]
    assert len(trained) == len(set(trained)), f"an episode was trained twice: {trained}"
    # none lost: with as many env groups as a batch needs nothing can go stale, so the episodes are
    # exactly each group's first `steps`
    assert sorted(trained) == [(g, e) for g in range(groups) for e in range(steps)]
    assert all(e["rows"] == 4 for line in lines for e in line["episodes"])
    # the episodes in flight at the checkpoint were trained by step 3 again, with the same env seeds
    # (the killed run's step 3 shows them with tokens of version 1; now the resumed version 2 made them)
    again = {(e["group"], e["episode"]): e for e in lines[2]["episodes"]}
    assert set(again) == {(g, 2) for g in range(groups)}
    assert {(e["group"], e["episode"], e["seed"]) for e in killed[3]["episodes"]} == \
        {(g, e, again[(g, e)]["seed"]) for g, e in again}
    assert all(e["oldest_token"] == 2 for e in again.values())
    # the staleness bound holds across the resume, per token; and asynchrony really happened
    lags = [line["version"] - e["oldest_token"] for line in [*lines, killed[3]] for e in line["episodes"]]
    assert all(0 <= lag <= k for lag in lags) and max(lags) == 1, lags

    final = load_state(str(ckpts / f"checkpoint-{steps}"))
    assert final["step"] == steps
    history = [entry for entry in final["tracker"]["history"] if entry["step"] >= 1]
    assert [entry["step"] for entry in history] == list(range(1, steps + 1))
    assert history[:2] == [e for e in load_state(str(ckpts / "checkpoint-2"))["tracker"]["history"] if e["step"] >= 1]
    assert all(entry.get("rollout/dropped_trajectories/stale", 0) == 0 for entry in history)
    # every episode admitted by the end is trained or in flight at the final checkpoint
    rollout = final["rollout"]
    for g in range(groups):
        assert sorted({e for gg, e in trained if gg == g} | set(rollout["returned"][g])) == \
            list(range(rollout["next_episode"][g]))
