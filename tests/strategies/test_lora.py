"""LoRA in hf_train and its critic (peft): what trains, what the reference is, what is exported and
saved, and that a resumed LoRA run takes the same next step."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from roll_core.errors import ConfigError, RollError
from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.critic import HFCriticStrategy
from roll_core.strategies.hf_infer import HFInferStrategy
from roll_core.strategies.hf_train import HFTrainStrategy
from roll_core.strategies.lora import LoraSettings, hf_name
from roll_core.strategies.settings import train_worker_kwargs
from roll_core.strategies.tensors import logits_to_keep, token_log_probs

LORA = LoraSettings(target="all-linear", rank=4, alpha=16)


def batch(rows: int = 6, width: int = 14, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = [width - (i % 3) for i in range(rows)]
    attention = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    ids = torch.randint(3, 200, (rows, width), generator=g) * attention
    response = attention.clone()
    response[:, : 5 + seed % 2] = 0
    return {"input_ids": ids, "attention_mask": attention, "response_mask": response,
            "advantages": torch.randn(rows, width - 1, generator=g)}


def pg_loss(mb, log_probs, _entropy):
    mask = mb["response_mask"][:, 1:].float()
    return -(log_probs * mb["advantages"] * mask).sum() / 50.0, {"tokens": float(mask.sum())}


def lora_model(path: str, lora: LoraSettings = LORA, **kw) -> HFTrainStrategy:
    return HFTrainStrategy(path, learning_rate=5e-2, lora=lora, **kw)


def test_zero_initialised_adapters_compute_the_base_model(peaked_dir):
    base = HFTrainStrategy(peaked_dir, trainable=False)
    lora = lora_model(peaked_dir)
    b = batch()
    assert torch.equal(lora.compute_log_probs(b)[0], base.compute_log_probs(b)[0])


def test_a_lora_step_changes_only_the_adapters(peaked_dir):
    lora = lora_model(peaked_dir)
    trainable, total = lora.parameter_counts()
    adapter_numel = sum(p.numel() for n, p in lora.model.named_parameters() if "lora_" in n)
    assert trainable == adapter_numel and 0 < trainable < total / 5
    # only the adapters reach the optimizer
    in_optimizer = {id(p) for group in lora.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for n, p in lora.model.named_parameters() if "lora_" in n}
    before = {n: p.detach().clone() for n, p in lora.model.named_parameters()}
    for _ in range(2):  # the second step moves lora_A too (its gradient is 0 while lora_B is 0)
        lora.train_step(batch(), pg_loss)
    changed = {n for n, p in lora.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_A" in n or "lora_B" in n for n in changed)
    assert any("lora_A" in n for n in changed) and any("lora_B" in n for n in changed)


def test_reference_log_probs_are_the_base_model_with_adapters_disabled(peaked_dir):
    base = HFTrainStrategy(peaked_dir, trainable=False)
    lora = lora_model(peaked_dir)
    b = batch()
    for _ in range(2):
        lora.train_step(b, pg_loss)
    trained = lora.compute_log_probs(b)[0]
    assert (trained - base.compute_log_probs(b)[0]).abs().max() > 1e-3  # the adapters did change the policy
    assert torch.equal(lora.compute_reference_log_probs(b), base.compute_log_probs(b)[0])
    assert torch.equal(lora.compute_log_probs(b)[0], trained)  # adapters are back on afterwards
    with pytest.raises(NotImplementedError, match="reference worker"):
        base.compute_reference_log_probs(b)


def test_merged_weights_drive_hf_infer(peaked_dir):
    """Weight sync: hf_infer loads the merged weights and samples with the trained policy's log-probs."""
    lora = lora_model(peaked_dir)
    for _ in range(2):
        lora.train_step(batch(), pg_loss)
    weights = lora.export_weights()
    assert not any("lora" in k or "base_layer" in k for k in weights)
    infer = HFInferStrategy(peaked_dir, seed=0)
    assert set(weights) == set(infer.model.state_dict())
    infer.load_weights(weights, version=3)
    prompt = [5, 17, 42, 9]
    out = infer.generate([GenerationRequest("a", prompt, SamplingParams(max_new_tokens=6, seed=1))])[0]
    assert out.policy_version == 3
    ids = torch.tensor([prompt + out.token_ids])
    response = torch.tensor([[0] * len(prompt) + [1] * len(out.token_ids)])
    lp = lora.compute_log_probs({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                 "response_mask": response})[0][0, len(prompt) - 1:]
    torch.testing.assert_close(lp, torch.tensor(out.logprobs), atol=1e-4, rtol=1e-4)


def test_adapter_checkpoint_round_trips_through_peft(peaked_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lora = lora_model(peaked_dir, save_merged=True)
    b = batch()
    for _ in range(2):
        lora.train_step(b, pg_loss)
    lora.save_checkpoint(str(tmp_path))
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_state.pt"} <= set(os.listdir(tmp_path))
    assert not any(f.startswith("model") for f in os.listdir(tmp_path))  # no copy of the base model
    expected = lora.compute_log_probs(b)[0]

    def log_probs(model):
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                           position_ids=(b["attention_mask"].cumsum(-1) - 1).clamp(min=0)).logits
        return token_log_probs(logits, b["input_ids"], b["response_mask"])[0]

    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(peaked_dir), str(tmp_path))
    torch.testing.assert_close(log_probs(peft_model), expected, atol=1e-5, rtol=1e-5)
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))  # plain transformers
    # W + BA summed once instead of computed apart: float rounding only
    torch.testing.assert_close(log_probs(merged), expected, atol=1e-4, rtol=1e-4)


def test_resume_with_lora_reproduces_the_next_step(peaked_dir, tmp_path):
    torch.manual_seed(0)
    first = lora_model(peaked_dir, lora=LoraSettings(target="q_proj,v_proj", rank=4, dropout=0.1))
    first.train_step(batch(seed=0), pg_loss)
    first.save_checkpoint(str(tmp_path))
    expected = first.train_step(batch(seed=1), pg_loss)  # dropout draws from the restored RNG too
    expected_weights = {n: p.detach().clone() for n, p in first.model.named_parameters() if p.requires_grad}

    resumed = lora_model(peaked_dir, lora=LoraSettings(target="q_proj,v_proj", rank=4, dropout=0.1), seed=7)
    resumed.load_checkpoint(str(tmp_path))
    assert resumed.global_step == 1
    got = resumed.train_step(batch(seed=1), pg_loss)
    assert got == expected
    for name, param in resumed.model.named_parameters():
        if param.requires_grad:
            assert torch.equal(param, expected_weights[name]), name

    full = HFTrainStrategy(peaked_dir)
    with pytest.raises(RollError, match="adapter_model.safetensors"):  # a full-model run cannot load it ...
        lora_model(peaked_dir).load_checkpoint(str(tmp_path / "nowhere"))
    with pytest.raises(RollError, match="other lora_rank"):  # ... nor a LoRA run a checkpoint of other settings
        lora_model(peaked_dir, lora=LoraSettings(target="all-linear", rank=2)).load_checkpoint(str(tmp_path))
    del full


def test_adapter_name_or_path_continues_a_saved_adapter(peaked_dir, tmp_path):
    lora = lora_model(peaked_dir)
    lora.train_step(batch(), pg_loss)
    lora.save_checkpoint(str(tmp_path))
    again = HFTrainStrategy(peaked_dir, lora=LoraSettings(adapter_name_or_path=str(tmp_path)))
    torch.testing.assert_close(again.compute_log_probs(batch())[0], lora.compute_log_probs(batch())[0])
    assert again.parameter_counts() == lora.parameter_counts()
    with pytest.raises(ConfigError, match="adapter_config.json"):
        HFTrainStrategy(peaked_dir, lora=LoraSettings(adapter_name_or_path=str(tmp_path / "missing")))


def test_lora_settings_follow_roll_names_and_rules(peaked_dir):
    assert LoraSettings(target="all").target_modules() == "all-linear"
    assert LoraSettings(target="q_proj, v_proj").target_modules() == ["q_proj", "v_proj"]
    assert LoraSettings(target=".*\\.(q|v)_proj").target_modules() == ".*\\.(q|v)_proj"  # a regex stays one
    assert LoraSettings(target="all", rank=16).scale_alpha == 32  # ROLL: lora_alpha defaults to 2 * rank
    assert LoraSettings(target="lm_head", additional_target="embed_tokens").modules_to_save() == ["embed_tokens"]
    with pytest.raises(ConfigError, match="lora_target"):
        LoraSettings()
    with pytest.raises(ConfigError, match="linear layers are named"):
        HFTrainStrategy(peaked_dir, lora=LoraSettings(target="qproj"))
    with pytest.raises(ConfigError, match="freeze_module_prefix"):
        HFTrainStrategy(peaked_dir, lora=LORA, freeze_module_prefix="model.embed_tokens")
    assert hf_name("model.layers.0.mlp.up_proj.base_layer.weight") == "model.layers.0.mlp.up_proj.weight"
    assert hf_name("model.layers.0.mlp.up_proj.lora_A.default.weight") is None
    assert hf_name("lm_head.modules_to_save.default.weight") == "lm_head.weight"
    assert hf_name("lm_head.original_module.weight") is None


def test_worker_config_lora_fields_reach_the_strategy(peaked_dir):
    def worker(**model_args):
        return SimpleNamespace(model_args=SimpleNamespace(**model_args), training_args=SimpleNamespace(),
                               strategy_args=None)

    kwargs = train_worker_kwargs(HFTrainStrategy, worker(lora_target="all-linear", lora_rank=4, lora_dropout=0.05,
                                                         additional_target="lm_head"), 0, "actor_train", {})
    assert kwargs["lora"] == LoraSettings(target="all-linear", rank=4, dropout=0.05, additional_target="lm_head")
    assert "lora" not in train_worker_kwargs(HFTrainStrategy, worker(lora_rank=4), 0, "actor_train", {})

    class NoLora:
        def __init__(self, pretrain, *, seed=0, dtype=None, attn_implementation=None,
                     gradient_checkpointing=False, settings=None):
            pass

    with pytest.raises(ConfigError, match="does not train LoRA adapters"):
        train_worker_kwargs(NoLora, worker(lora_target="all-linear"), 0, "actor_train", {})
    # additional_target trains a module in full and still exports plain HF names
    strategy = HFTrainStrategy.from_worker_config(
        worker(lora_target="q_proj", lora_rank=2, additional_target="norm"), peaked_dir, 0)
    names = {n for n, p in strategy.model.named_parameters() if p.requires_grad}
    assert any("modules_to_save" in n for n in names) and any("lora_A" in n for n in names)
    strategy.train_step(batch(), pg_loss)
    weights = strategy.export_weights()
    norm = dict(strategy.model.named_parameters())["base_model.model.model.norm.modules_to_save.default.weight"]
    assert torch.equal(weights["model.norm.weight"], norm.detach().cpu()) and not torch.all(norm == 1.0)
    # the tiny model ties its head to the embeddings: training either in full would untie them
    with pytest.raises(ConfigError, match="ties lm_head to embed_tokens"):
        HFTrainStrategy(peaked_dir, lora=LoraSettings(target="q_proj", additional_target="lm_head"))


def test_logits_on_response_positions_only_give_the_same_log_probs(peaked_dir):
    model = HFTrainStrategy(peaked_dir, trainable=False).model
    b = {k: v.to(model.device) for k, v in batch().items()}  # a plain forward: the model's device
    keep = logits_to_keep(b["response_mask"])
    assert keep == b["input_ids"].shape[1] - 4  # the first response token is at 5: logits from 4 on
    with torch.no_grad():
        full = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        part = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], logits_to_keep=keep).logits
    lp_full, ent_full = token_log_probs(full, b["input_ids"], b["response_mask"], with_entropy=True)
    lp_part, ent_part = token_log_probs(part, b["input_ids"], b["response_mask"], with_entropy=True)
    assert part.shape[1] == keep and lp_part.shape == lp_full.shape
    torch.testing.assert_close(lp_part, lp_full, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ent_part, ent_full, atol=1e-6, rtol=1e-6)


def test_critic_trains_a_lora_backbone_and_its_value_head(peaked_dir, tmp_path):
    critic = HFCriticStrategy(peaked_dir, learning_rate=1e-2, lora=LoraSettings(target="all-linear", rank=2))
    trainable = {n for n, p in critic.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n.startswith("value_head") for n in trainable)
    b = {**batch(), "returns": torch.ones(6, 13)}

    def value_loss(mb, values):
        mask = mb["response_mask"][:, 1:].float()
        return ((values - mb["returns"]) ** 2 * mask).sum() / 50.0, {}

    critic.train_step(b, value_loss)
    critic.train_step(b, value_loss)
    critic.save_checkpoint(str(tmp_path))
    assert "adapter_model.safetensors" in os.listdir(tmp_path)
    again = HFCriticStrategy(peaked_dir, lora=LoraSettings(target="all-linear", rank=2))
    again.load_checkpoint(str(tmp_path))
    torch.testing.assert_close(again.compute_values(b), critic.compute_values(b))
