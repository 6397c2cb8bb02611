"""OptimizerSettings: the one reading of the train strategies' training arguments (no model needed)."""

from __future__ import annotations

import pytest

from roll_core.errors import ConfigError
from roll_core.strategies.settings import OptimizerSettings, resolve_settings, train_worker_kwargs

WORKER = {
    "model_args": {"dtype": "bf16", "disable_gradient_checkpointing": False},
    "training_args": {"learning_rate": 2e-5, "adam_beta1": 0.8, "adam_beta2": 0.95, "max_steps": 12,
                      "per_device_train_batch_size": 2, "gradient_accumulation_steps": 3, "warmup_ratio": 0.25},
    "infer_batch_size": 5,
    "strategy_args": {"strategy_name": "x", "strategy_config": {"num_threads": 1, "learning_rate": 3e-5,
                                                                "logits_temperature": 0.7}},
}


class Strategy:
    """A constructor shaped like the train strategies'."""

    def __init__(self, pretrain, *, seed=0, dtype=None, attn_implementation=None, gradient_checkpointing=False,
                 logits_temperature=1.0, trainable=True, settings=None, **training):
        self.settings = resolve_settings("Strategy", settings, training)


def test_from_worker_config_reads_training_args_and_strategy_config():
    s = OptimizerSettings.from_worker_config(WORKER)
    assert s.learning_rate == 3e-5  # strategy_config wins over training_args
    assert (s.adam_betas, s.num_training_steps, s.num_threads) == ((0.8, 0.95), 12, 1)
    assert (s.mini_batch_size, s.forward_batch_size, s.warmup_step_count()) == (6, 5, 3)
    assert OptimizerSettings.from_worker_config({}) == OptimizerSettings()  # ROLL's defaults


def test_train_worker_kwargs_split_settings_from_model_keywords():
    kwargs = train_worker_kwargs(Strategy, WORKER, 4, "actor_train", {"num_training_steps": 20, "trainable": False})
    settings = kwargs.pop("settings")
    assert kwargs == {"seed": 4, "dtype": "bf16", "attn_implementation": None, "gradient_checkpointing": True,
                      "logits_temperature": 0.7, "trainable": False}
    assert settings.num_training_steps == 20 and settings.learning_rate == 3e-5
    bad = {**WORKER, "strategy_args": {"strategy_config": {"learning_rat": 1.0}}}
    with pytest.raises(ConfigError, match=r"actor_train\.strategy_args\.strategy_config: unknown key "
                                          r"'learning_rat'.*learning_rate"):
        train_worker_kwargs(Strategy, bad, 0, "actor_train", {})


def test_keywords_apply_over_settings_and_typos_are_type_errors():
    base = OptimizerSettings(learning_rate=1e-3, per_device_train_batch_size=4)
    s = Strategy("m", settings=base, weight_decay=0.1).settings
    assert (s.learning_rate, s.per_device_train_batch_size, s.weight_decay) == (1e-3, 4, 0.1)
    assert Strategy("m").settings == OptimizerSettings()
    assert resolve_settings("C", None, {}, OptimizerSettings(learning_rate=1e-5)).learning_rate == 1e-5
    with pytest.raises(TypeError, match="Strategy.*'learnig_rate'.*learning_rate"):
        Strategy("m", learnig_rate=1.0)


def test_invalid_and_fractional_settings():
    with pytest.raises(ConfigError, match="per_device_train_batch_size"):
        OptimizerSettings(per_device_train_batch_size=0)
    assert OptimizerSettings(warmup_steps=0.5, num_training_steps=5).warmup_step_count() == 3
    assert OptimizerSettings(warmup_steps=2, warmup_ratio=0.5, num_training_steps=10).warmup_step_count() == 2
    with pytest.raises(ConfigError, match="num_training_steps"):
        OptimizerSettings(warmup_ratio=0.1).warmup_step_count()


def test_optim_picks_the_optimizer_by_hf_name():
    import torch

    from roll_core.strategies.settings import OPTIMIZERS

    params = [torch.nn.Parameter(torch.ones(2, 2))]
    for name, cls in [("adamw_torch", torch.optim.AdamW), ("adamw_hf", torch.optim.AdamW),
                      ("sgd", torch.optim.SGD)]:
        optimizer = OptimizerSettings(optim=name, learning_rate=0.5).optimizer([{"params": params, "weight_decay": 0}])
        assert type(optimizer) is cls and optimizer.param_groups[0]["lr"] == 0.5
    assert OptimizerSettings(optim="adamw_torch_fused").optimizer([{"params": params}]).defaults["fused"] is True
    from transformers.optimization import Adafactor

    assert type(OptimizerSettings(optim="adafactor").optimizer([{"params": params}])) is Adafactor
    assert set(OPTIMIZERS) == {"adamw_torch", "adamw_hf", "adamw_torch_fused", "sgd", "adafactor"}
    with pytest.raises(ConfigError, match="training_args.optim: 'adamw_torchh' is not available.*adamw_torch"):
        OptimizerSettings(optim="adamw_torchh").optimizer([{"params": params}])
    assert OptimizerSettings.from_worker_config({"training_args": {"optim": "sgd"}}).optim == "sgd"


def test_adamw_takes_the_multi_tensor_update_with_the_per_tensor_loop_s_weights():
    """roll asks AdamW for its ``foreach`` update (torch picks it on CUDA only); on CPU it must give
    the per-tensor loop's weights bit for bit, through weight decay, two groups and a schedule."""
    import torch

    torch.manual_seed(0)
    start = [torch.randn(shape) for shape in ((64, 16), (16,), (8, 16), (1,))]
    settings = OptimizerSettings(learning_rate=1e-2, weight_decay=0.05, lr_scheduler_type="cosine",
                                 num_training_steps=30)
    assert settings.optimizer([{"params": [torch.nn.Parameter(torch.ones(1))]}]).defaults["foreach"] is True
    assert "foreach" not in {k for k, v in OptimizerSettings(optim="adamw_torch_fused").optimizer(
        [{"params": [torch.nn.Parameter(torch.ones(1))]}]).defaults.items() if v}
    finals = []
    for foreach in (True, False):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        groups = [{"params": params[:2], "weight_decay": 0.05}, {"params": params[2:], "weight_decay": 0.0}]
        optimizer = settings.optimizer(groups) if foreach else torch.optim.AdamW(
            groups, lr=1e-2, betas=settings.adam_betas, eps=settings.adam_epsilon, foreach=False)
        schedule = settings.lr_scheduler(optimizer)
        noise = torch.Generator().manual_seed(1)
        for step in range(30):
            for p in params:
                p.grad = torch.randn(p.shape, generator=noise) * (step + 1)
            optimizer.step()
            schedule.step()
        finals.append(params)
    assert all(torch.equal(a, b) for a, b in zip(*finals))
    assert not torch.equal(finals[0][0], start[0])


def test_sgd_really_trains_with_sgd(tiny_dir):
    """One step of plain SGD moves every weight by exactly -lr * grad (AdamW would not)."""
    import torch

    from roll_core.strategies.hf_train import HFTrainStrategy

    strategy = HFTrainStrategy(tiny_dir, optim="sgd", learning_rate=0.1, max_grad_norm=0, lr_scheduler_type="constant")
    before = {k: v.detach().clone() for k, v in strategy.model.named_parameters()}
    batch = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
             "response_mask": torch.tensor([[0, 0, 1, 1]])}
    grads = {}

    def loss_fn(micro, log_probs, _entropy):
        return -log_probs.sum(), {}

    strategy.model.zero_grad()
    (micro,) = strategy._micro_batches(batch, train=True)  # what train_step runs
    loss, _ = loss_fn(micro.mb, strategy._forward_micro(micro, False)[0], None)
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in strategy.model.named_parameters() if v.grad is not None}
    strategy.model.zero_grad()
    strategy.train_step(batch, loss_fn)
    name = "model.layers.0.mlp.up_proj.weight"
    torch.testing.assert_close(dict(strategy.model.named_parameters())[name].detach(),
                               before[name] - 0.1 * grads[name])


def test_optional_model_args_reach_backends_that_take_them():
    class TakesAll:
        def __init__(self, pretrain, *, seed=0, dtype=None, attn_implementation=None, gradient_checkpointing=False,
                     model_config_kwargs=None, freeze_module_prefix=None, settings=None):
            pass

    class TakesNone:
        def __init__(self, pretrain, *, seed=0, dtype=None, attn_implementation=None, gradient_checkpointing=False,
                     settings=None):
            pass

    worker = {"model_args": {"model_config_kwargs": {"attention_dropout": 0.1}, "freeze_module_prefix": "model.embed"}}
    kwargs = train_worker_kwargs(TakesAll, worker, 0, "actor_train", {})
    assert kwargs["model_config_kwargs"] == {"attention_dropout": 0.1} and kwargs["freeze_module_prefix"] == "model.embed"
    assert "model_config_kwargs" not in train_worker_kwargs(TakesAll, {}, 0, "actor_train", {})  # unset: not passed
    with pytest.raises(ConfigError, match="actor_train.model_args.model_config_kwargs is not supported by TakesNone"):
        train_worker_kwargs(TakesNone, worker, 0, "actor_train", {})


def test_model_config_kwargs_and_freeze_module_prefix(tiny_dir):
    import torch

    from roll_core.strategies.hf_infer import HFInferStrategy
    from roll_core.strategies.hf_train import HFTrainStrategy

    strategy = HFTrainStrategy(tiny_dir, model_config_kwargs={"attention_dropout": 0.25},
                               freeze_module_prefix="model.embed_tokens, model.layers.0.", learning_rate=1e-2)
    assert strategy.model.config.attention_dropout == 0.25
    assert HFInferStrategy(tiny_dir, model_config_kwargs={"attention_dropout": 0.25}).model.config.attention_dropout == 0.25
    frozen = {k for k, p in strategy.model.named_parameters() if not p.requires_grad}
    assert frozen and all(k.startswith(("model.embed_tokens", "model.layers.0.")) for k in frozen)
    assert strategy.frozen_parameters == len(frozen)
    before = {k: v.detach().clone() for k, v in strategy.model.named_parameters()}
    batch = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.ones(1, 4, dtype=torch.long),
             "response_mask": torch.tensor([[0, 0, 1, 1]])}
    strategy.train_step(batch, lambda micro, lp, _e: (-lp.sum(), {}))
    after = dict(strategy.model.named_parameters())
    assert all(torch.equal(after[k], before[k]) for k in frozen)
    assert not torch.equal(after["model.layers.1.mlp.up_proj.weight"], before["model.layers.1.mlp.up_proj.weight"])
    with pytest.raises(ConfigError, match=r"model_config_kwargs.attention_dropuot.*Did you mean 'attention_dropout'"):
        HFTrainStrategy(tiny_dir, model_config_kwargs={"attention_dropuot": 0.1})
    with pytest.raises(ConfigError, match="no parameter starts with 'model.embeds'"):
        HFTrainStrategy(tiny_dir, freeze_module_prefix="model.embeds")


def test_inference_engines_take_their_tensor_parallel_size_from_their_gpus():
    from roll_core.strategies.hf_common import tensor_parallel_from_devices

    assert tensor_parallel_from_devices({"num_gpus_per_worker": 2}, {}, "tensor_parallel_size") == \
        {"tensor_parallel_size": 2}
    assert tensor_parallel_from_devices({"num_gpus_per_worker": 1}, {}, "tp_size") == {}
    assert tensor_parallel_from_devices({"num_gpus_per_worker": 2}, {"tp_size": 2}, "tp_size") == {}
    with pytest.raises(ConfigError, match="tensor_parallel_size is 4, but each worker has num_gpus_per_worker=2"):
        tensor_parallel_from_devices({"num_gpus_per_worker": 2}, {"tensor_parallel_size": 4}, "tensor_parallel_size")
