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
