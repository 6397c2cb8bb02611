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
