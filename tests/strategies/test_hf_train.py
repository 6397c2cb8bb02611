"""hf_train and its critic: log-probs agree with hf_infer, training lowers a loss, the update does
not depend on the micro-batch split, checkpoints resume bit-for-bit, schedules / clipping /
reference / worker-config plumbing."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from roll_core.errors import ConfigError, RollError
from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.critic import VALUE_HEAD_FILE, HFCriticStrategy
from roll_core.strategies.hf_infer import HFInferStrategy
from roll_core.strategies.hf_train import HFTrainStrategy
from roll_core.strategies.tensors import micro_batches


def make_batch(prompts, responses, pad_id=0):
    """Right-padded rows prompt ⊕ response; response_mask is 1 on response tokens only."""
    rows = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    resp = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : len(p) + len(r)] = torch.tensor(list(p) + list(r))
        attn[i, : len(p) + len(r)] = 1
        resp[i, len(p) : len(p) + len(r)] = 1
    return {"input_ids": ids, "attention_mask": attn, "response_mask": resp}


def random_batch(seed=0, rows=4, vocab=2048):
    gen = torch.Generator().manual_seed(seed)
    lengths = [(3 + i, 4 + 2 * i) for i in range(rows)]
    prompts = [torch.randint(3, vocab, (p,), generator=gen).tolist() for p, _ in lengths]
    responses = [torch.randint(3, vocab, (r,), generator=gen).tolist() for _, r in lengths]
    batch = make_batch(prompts, responses)
    batch["advantages"] = torch.randn(batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1, generator=gen)
    return batch


def pg_loss(batch):
    """A policy-gradient-like loss with a global token normaliser (docs/algorithms.md §6.5)."""
    n_tokens = batch["response_mask"][:, 1:].sum()

    def loss_fn(mb, log_probs, entropy):
        mask = mb["response_mask"][:, 1:].float()
        loss = -(log_probs * mb["advantages"] * mask).sum() / n_tokens
        return loss, {"tokens": float(mask.sum())}

    return loss_fn


def nll_loss(batch):
    n_tokens = batch["response_mask"][:, 1:].sum()
    return lambda mb, log_probs, entropy: (-log_probs.sum() / n_tokens, {})


def test_log_probs_match_hf_infer(peaked_dir):
    infer = HFInferStrategy(peaked_dir, seed=0)
    train = HFTrainStrategy(peaked_dir, infer_batch_size=3)
    tok = infer.tokenizer
    prompts = [tok(f"<|im_start|>user\nGo {'left ' * i}<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
               for i in range(5)]
    outs = infer.generate([GenerationRequest(str(i), p, SamplingParams(max_new_tokens=4 + i, seed=i))
                           for i, p in enumerate(prompts)])
    batch = make_batch(prompts, [o.token_ids for o in outs], tok.pad_token_id)
    log_probs, entropy = train.compute_log_probs(batch, with_entropy=True)
    assert log_probs.shape == entropy.shape == (5, batch["input_ids"].shape[1] - 1)
    mask = batch["response_mask"][:, 1:].bool()
    for i, (p, o) in enumerate(zip(prompts, outs)):
        got = log_probs[i, len(p) - 1 : len(p) - 1 + len(o.token_ids)]
        assert torch.allclose(got, torch.tensor(o.logprobs), atol=1e-4)
    assert (log_probs[~mask] == 0).all() and (entropy[~mask] == 0).all()
    with torch.no_grad():  # entropy of row 0's first response position, by hand
        logits = train.model(batch["input_ids"][:1].to(train.device)).logits[0, len(prompts[0]) - 1].float().cpu()
    probs = torch.softmax(logits, -1)
    assert torch.isclose(entropy[0, len(prompts[0]) - 1], -(probs * probs.log()).sum(), atol=1e-4)
    assert train.compute_log_probs(batch)[1] is None


def test_train_step_lowers_the_loss(tiny_dir):
    train = HFTrainStrategy(tiny_dir, learning_rate=3e-3, per_device_train_batch_size=2)
    batch = random_batch()
    losses = [train.train_step(batch, nll_loss(batch))["loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 0.1
    metrics = train.train_step(batch, pg_loss(batch))
    assert {"loss", "grad_norm", "lr", "skipped", "tokens"} <= set(metrics)
    assert metrics["tokens"] == pytest.approx(float(batch["response_mask"][:, 1:].sum()) / 2, rel=0.5)


def test_update_does_not_depend_on_the_micro_batch_split(tiny_dir):
    """Gradients agree to ~1e-8 whatever the split. Adam's first step is ~lr * g / (|g| + eps), which
    turns rounding noise on gradients near eps=1e-8 into lr-sized differences, so the weight check
    uses eps=1e-3: the update stays large (lr * g / (|g| + 1e-3)) but smooth in g."""
    batch = random_batch(seed=1)
    weights = []
    for micro, checkpointing in ((4, False), (2, False), (1, True)):
        train = HFTrainStrategy(tiny_dir, learning_rate=1e-2, per_device_train_batch_size=micro,
                                gradient_checkpointing=checkpointing, adam_epsilon=1e-3)
        train.train_step(batch, pg_loss(batch))
        weights.append(train.export_weights())
    for other in weights[1:]:
        for name, value in weights[0].items():
            assert torch.allclose(value, other[name], atol=1e-5), name
    assert not torch.equal(weights[0]["model.embed_tokens.weight"],
                           HFTrainStrategy(tiny_dir).export_weights()["model.embed_tokens.weight"])


def test_checkpoint_resume_is_exact(tiny_dir, tmp_path):
    kwargs = dict(learning_rate=1e-2, per_device_train_batch_size=2, warmup_steps=1,
                  lr_scheduler_type="linear", num_training_steps=6, weight_decay=0.1)
    batches = [random_batch(seed=s) for s in range(3)]
    first = HFTrainStrategy(tiny_dir, **kwargs)
    for b in batches[:2]:
        first.train_step(b, pg_loss(b))
    first.save_checkpoint(str(tmp_path / "ckpt"))
    rng_after_save = torch.rand(3)
    expected = first.train_step(batches[2], pg_loss(batches[2]))

    resumed = HFTrainStrategy(tiny_dir, **kwargs)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert torch.equal(torch.rand(3), rng_after_save)
    assert resumed.global_step == 2
    got = resumed.train_step(batches[2], pg_loss(batches[2]))
    assert got == expected
    for name, value in first.export_weights().items():
        assert torch.equal(value, resumed.export_weights()[name]), name
    assert os.path.isfile(tmp_path / "ckpt" / "model.safetensors")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    with pytest.raises(RollError, match="not a roll checkpoint"):
        resumed.load_checkpoint(tiny_dir)


class _RunsCode:
    """Unpickling this would run code (what a tampered checkpoint file would hold)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_checkpoint_state_loads_without_unpickling_code(tiny_dir, tmp_path):
    from roll_core.pipeline import checkpoint as ckpt
    from roll_core.strategies.hf_train import TRAINER_STATE

    first = HFTrainStrategy(tiny_dir, learning_rate=1e-2, per_device_train_batch_size=2)
    batch = random_batch()
    first.train_step(batch, pg_loss(batch))
    first.save_checkpoint(str(tmp_path / "ckpt"))
    state = torch.load(tmp_path / "ckpt" / TRAINER_STATE, weights_only=True)  # tensors and plain values only
    assert state["global_step"] == 1 and isinstance(state["rng"]["numpy"]["keys"], list)

    tmp = ckpt.begin(str(tmp_path / "out"), 3)
    path = ckpt.commit(tmp, {"step": 3, "tracker": {"history": [{"step": 1.0, "x": np.float64(0.5)}]}})
    assert ckpt.load_state(path)["tracker"]["history"][0]["x"] == 0.5

    marker = tmp_path / "pwned"
    torch.save({"global_step": 1, "rng": _RunsCode(marker)}, tmp_path / "ckpt" / TRAINER_STATE)
    torch.save({"step": 3, "x": _RunsCode(marker)}, os.path.join(path, ckpt.PIPELINE_STATE))
    with pytest.raises(RollError, match="weights_only=True"):
        HFTrainStrategy(tiny_dir, learning_rate=1e-2).load_checkpoint(str(tmp_path / "ckpt"))
    with pytest.raises(RollError, match="weights_only=True"):
        ckpt.load_state(path)
    assert not marker.exists()


def test_exported_weights_drive_hf_infer(tiny_dir):
    train = HFTrainStrategy(tiny_dir, learning_rate=1e-2, per_device_train_batch_size=4)
    batch = random_batch(seed=2)
    train.train_step(batch, nll_loss(batch))
    infer = HFInferStrategy(tiny_dir)
    prompt = batch["input_ids"][0, :3].tolist()
    request = GenerationRequest("x", prompt, SamplingParams(max_new_tokens=5, seed=0))
    infer.load_weights(train.export_weights(), version=1)
    out = infer.generate([request])[0]
    assert out.policy_version == 1
    log_probs, _ = train.compute_log_probs(make_batch([prompt], [out.token_ids]))
    assert torch.allclose(log_probs[0, 2:], torch.tensor(out.logprobs), atol=1e-4)


def test_reference_model_is_frozen(tiny_dir):
    reference = HFTrainStrategy(tiny_dir, trainable=False)
    batch = random_batch()
    assert all(not p.requires_grad for p in reference.model.parameters())
    assert torch.equal(reference.compute_log_probs(batch)[0], HFTrainStrategy(tiny_dir).compute_log_probs(batch)[0])
    with pytest.raises(RollError, match="trainable=False"):
        reference.train_step(batch, nll_loss(batch))


def test_schedule_clipping_and_non_finite_losses(tiny_dir):
    train = HFTrainStrategy(tiny_dir, learning_rate=1e-3, warmup_steps=2, lr_scheduler_type="linear",
                            num_training_steps=4, max_grad_norm=1e-3, per_device_train_batch_size=4)
    batch = random_batch()
    metrics = [train.train_step(batch, nll_loss(batch)) for _ in range(4)]
    assert [m["lr"] for m in metrics] == pytest.approx([0.0, 5e-4, 1e-3, 5e-4])
    assert all(m["grad_norm"] > 1e-3 for m in metrics)  # the norm before clipping is reported

    before = train.export_weights()
    bad = train.train_step(batch, lambda mb, lp, ent: (lp.sum() * float("nan"), {}))
    assert bad["skipped"] == 1.0
    assert all(torch.equal(v, train.export_weights()[k]) for k, v in before.items())

    with pytest.raises(ConfigError, match="lr_scheduler_type"):
        HFTrainStrategy(tiny_dir, lr_scheduler_type="linearr")
    with pytest.raises(ConfigError, match="num_training_steps"):
        HFTrainStrategy(tiny_dir, lr_scheduler_type="cosine")


def test_from_worker_config(tiny_dir):
    worker = SimpleNamespace(
        model_args=SimpleNamespace(dtype="fp32", attn_implementation="sdpa", disable_gradient_checkpointing=False),
        training_args=SimpleNamespace(learning_rate=2e-5, weight_decay=0.05, per_device_train_batch_size=3,
                                      gradient_accumulation_steps=4, warmup_steps=1, lr_scheduler_type="cosine",
                                      max_grad_norm=0.5),
        strategy_args=SimpleNamespace(strategy_name="hf_train", strategy_config=None),
        infer_batch_size=7,
    )
    train = HFTrainStrategy.from_worker_config(worker, tiny_dir, seed=0, num_training_steps=10)
    settings = train.settings
    assert (settings.per_device_train_batch_size, train.mini_batch_size, settings.forward_batch_size) == (3, 12, 7)
    assert train.model.is_gradient_checkpointing and settings.max_grad_norm == 0.5
    assert (settings.learning_rate, settings.warmup_steps, settings.num_training_steps) == (2e-5, 1, 10)
    assert train.optimizer.param_groups[0]["weight_decay"] == 0.05
    reference = HFTrainStrategy.from_worker_config(SimpleNamespace(), tiny_dir, seed=0, trainable=False)
    default_dtype = torch.bfloat16 if reference.device.type == "cuda" else torch.float32  # dtype None
    assert not reference.trainable and reference.model.dtype == default_dtype

    # HF conventions: warmup_ratio / fractional warmup_steps, max_steps as the schedule length
    worker.training_args = SimpleNamespace(lr_scheduler_type="linear", warmup_ratio=0.25, max_steps=8,
                                           learning_rate=1.0)
    worker.model_args = SimpleNamespace(dtype="bf16")
    train = HFTrainStrategy.from_worker_config(worker, tiny_dir, seed=0)
    assert train.model.dtype == torch.bfloat16
    batch = random_batch()
    lrs = [train.train_step(batch, nll_loss(batch))["lr"] for _ in range(3)]
    assert lrs == pytest.approx([0.0, 0.5, 1.0])  # 2 warm-up steps out of 8


def test_micro_batches_slice_and_trim():
    batch = random_batch(rows=3)
    batch["tags"] = ["a", "b", "c"]
    batch["coef"] = 0.5
    batch["scores"] = torch.tensor([1.0, 2.0, 3.0])
    length = batch["input_ids"].shape[1]
    parts = list(micro_batches(batch, 2, torch.device("cpu")))
    assert [(rows, width) for _, rows, width in parts] == [(2, 4 + 6), (1, length)]
    first = parts[0][0]
    assert first["input_ids"].shape == (2, 10) and first["advantages"].shape == (2, 9)
    assert first["tags"] == ["a", "b"] and first["coef"] == 0.5 and first["scores"].tolist() == [1.0, 2.0]
    assert torch.equal(first["advantages"], batch["advantages"][:2, :9])


def test_critic_values_train_and_checkpoint(tiny_dir, tmp_path):
    from transformers import AutoModel

    critic = HFCriticStrategy(tiny_dir, learning_rate=2e-3, per_device_train_batch_size=2)
    batch = random_batch()
    batch["returns"] = torch.ones(batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1)
    values = critic.compute_values(batch)
    assert values.shape == batch["returns"].shape and (values == 0).all()  # zero-initialised head
    n_tokens = batch["response_mask"][:, 1:].sum()

    def value_loss(mb, v):
        mask = mb["response_mask"][:, 1:].float()
        return 0.5 * (((v - mb["returns"]) ** 2) * mask).sum() / n_tokens, {}

    losses = [critic.train_step(batch, value_loss)["loss"] for _ in range(4)]
    assert losses[-1] < 0.5 * losses[0], losses
    critic.save_checkpoint(str(tmp_path / "critic"))
    assert os.path.isfile(tmp_path / "critic" / VALUE_HEAD_FILE)
    assert type(AutoModel.from_pretrained(tmp_path / "critic")).__name__ == "Qwen2Model"
    restored = HFCriticStrategy(tiny_dir, learning_rate=2e-3, per_device_train_batch_size=2)
    restored.load_checkpoint(str(tmp_path / "critic"))
    assert torch.equal(restored.compute_values(batch), critic.compute_values(batch))
    assert restored.train_step(batch, value_loss) == critic.train_step(batch, value_loss)
