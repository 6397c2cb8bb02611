"""Padding-free training: the planner and the packed layout on worked examples, and packed
log-probs / entropies / values / losses / gradients equal to the padded path's with the global
normalisers of every loss aggregation (docs/algorithms.md §6.5), on the built-in tiny model."""

from __future__ import annotations

import logging

import pytest
import torch

from roll_core.algorithms import losses
from roll_core.algorithms.aggregation import Normalisers, norm_seq_len
from roll_core.algorithms.objective import make_actor_loss_fn, make_critic_loss_fn
from roll_core.config import AgenticConfig
from roll_core.errors import ConfigError
from roll_core.strategies.critic import HFCriticStrategy
from roll_core.strategies.hf_train import HFTrainStrategy
from roll_core.strategies.lora import LoraSettings
from roll_core.strategies.packing import (
    PackingSettings,
    isolates_rows,
    pack_rows,
    plan_micro_batches,
    resolve_packing,
)

PADDED = PackingSettings(enabled=False)
#: a small budget: several packed micro-batches of different row counts, unlike the padded split
PACKED = PackingSettings(enabled=True, max_tokens_train=45, max_tokens_forward=50)


def test_plan_micro_batches_worked_examples():
    lengths = [5, 3, 8, 2, 6]
    assert plan_micro_batches(lengths, 10) == [[0, 1], [2, 3], [4]]  # row order, <= 10 tokens each
    # 24 tokens -> 3 micro-batches; longest first onto the emptiest: 8 | 6+2 | 5+3
    assert plan_micro_batches(lengths, 10, algorithm="load_balance") == [[2], [3, 4], [0, 1]]
    assert plan_micro_batches(lengths, 10, min_count=4) == [[0, 1], [2], [3], [4]]  # the largest is split
    # dynamic batching (padded): sorted by length, rows x longest rounded up to 4 <= 16
    assert plan_micro_batches(lengths, 16, padded_round=4) == [[3, 1], [0, 4], [2]]
    assert plan_micro_batches([20, 3], 10) == [[0], [1]]  # a row over the budget is alone
    assert plan_micro_batches([], 10) == []


def test_pack_rows_worked_example():
    mb = {"input_ids": torch.tensor([[11, 12, 13], [21, 22, 0], [0, 31, 32]]),
          "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0], [0, 1, 1]]),  # right- and left-padded rows
          "response_mask": torch.tensor([[0, 1, 1], [0, 1, 0], [0, 0, 1]])}
    packed = pack_rows(mb)
    assert packed.input_ids.tolist() == [[11, 12, 13, 21, 22, 31, 32]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 0, 1, 0, 1]]
    assert packed.cu_seqlens.tolist() == [0, 3, 5, 7] and packed.max_length == 3
    # every token but a row's last predicts the next one: packed position -> [row, column] of [3, 2]
    assert packed.src.tolist() == [0, 1, 3, 5]
    assert list(zip(packed.rows.tolist(), packed.cols.tolist())) == [(0, 0), (0, 1), (1, 0), (2, 1)]
    assert packed.target.tolist() == [12, 13, 22, 32] and packed.weight.tolist() == [1, 1, 1, 1]
    assert packed.unpack(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist() == [[1, 2], [3, 0], [0, 4]]
    mb["response_mask"] = torch.tensor([[0, 0, 1], [0, 0, 0], [0, 0, 0]])
    only = pack_rows(mb).response_only()
    assert only.src.tolist() == [1] and only.unpack(torch.tensor([5.0])).tolist() == [[0, 5], [0, 0], [0, 0]]
    mb["attention_mask"] = torch.tensor([[1, 0, 1], [1, 1, 0], [0, 1, 1]])  # a hole: cannot pack exactly
    assert pack_rows(mb) is None


def long_tailed_batch(seed=0, shape=None):
    """Right-padded rows with long-tailed responses, one left-padded row, one row with no response;
    ``shape``: other (prompt, response) lengths."""
    gen = torch.Generator().manual_seed(seed)
    shape = shape or [(4, 2), (6, 30), (3, 5), (5, 12), (4, 0), (3, 8), (6, 3)]
    width = max(p + r for p, r in shape)
    ids = torch.zeros(len(shape), width, dtype=torch.long)
    attn, resp = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, (p, r) in enumerate(shape):
        start = width - p - r if i == 2 else 0
        ids[i, start : start + p + r] = torch.randint(3, 2000, (p + r,), generator=gen)
        attn[i, start : start + p + r] = 1
        resp[i, start + p : start + p + r] = 1
    label = resp[:, 1:].float()
    return {"input_ids": ids, "attention_mask": attn, "response_mask": resp,
            "advantages": torch.randn(label.shape, generator=gen) * label,
            "old_log_probs": (-torch.rand(label.shape, generator=gen) - 0.5) * label,
            "values": torch.randn(label.shape, generator=gen) * label,
            "returns": torch.randn(label.shape, generator=gen) * label}


def sgd(lr=1.0):
    """SGD without clipping (the step's gradients are the loss's)."""
    return dict(optim="sgd", learning_rate=lr, max_grad_norm=None, per_device_train_batch_size=2)


def step_gradients(strategy, batch, loss_fn):
    """The metrics of one train step and the gradients its optimiser step applies."""
    names = {id(p): n for n, p in strategy.model.named_parameters()}
    grads = {}

    def keep(optimizer, *_):
        grads.update({names[id(p)]: p.grad.detach().clone() for g in optimizer.param_groups for p in g["params"]
                      if p.grad is not None})

    handle = strategy.optimizer.register_step_pre_hook(keep)
    try:
        return strategy.train_step(batch, loss_fn), grads
    finally:
        handle.remove()


def assert_same_step(padded, packed):
    (m_pad, g_pad), (m_pack, g_pack) = padded, packed
    assert set(g_pack) == set(g_pad) and g_pad
    assert m_pack["loss"] == pytest.approx(m_pad["loss"], rel=1e-5, abs=1e-7)
    assert m_pack["grad_norm"] == pytest.approx(m_pad["grad_norm"], rel=1e-4)
    assert m_pad["grad_norm"] > 0
    for name, grad in g_pad.items():
        torch.testing.assert_close(g_pack[name], grad, atol=1e-5 * float(grad.abs().max()) + 1e-9, rtol=1e-4,
                                   msg=name)


def test_packed_log_probs_and_entropy_equal_the_padded_ones(tiny_dir):
    batch = long_tailed_batch()
    padded = HFTrainStrategy(tiny_dir, packing=PADDED, infer_batch_size=2, logits_temperature=0.7)
    packed = HFTrainStrategy(tiny_dir, packing=PACKED, logits_temperature=0.7)
    assert packed.packs and not padded.packs
    micro = packed._micro_batches(batch, train=False)
    # rows of 6, 36, 8, 17, 4, 11, 9 tokens: 6+36+8 | 17+4+11+9 <= 50
    assert [m.index.tolist() for m in micro] == [[0, 1, 2], [3, 4, 5, 6]]
    assert all(m.packed is not None for m in micro)
    lp_pad, ent_pad = padded.compute_log_probs(batch, with_entropy=True)
    lp_pack, ent_pack = packed.compute_log_probs(batch, with_entropy=True)
    torch.testing.assert_close(lp_pack, lp_pad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_pack, ent_pad, atol=1e-5, rtol=1e-5)
    mask = batch["response_mask"][:, 1:].bool()
    assert (lp_pack[~mask] == 0).all() and (lp_pack[mask] < 0).all() and (ent_pack[mask] > 0).all()


def test_sliding_window_layers_pack_exactly(tiny_dir):
    """Rows longer than the window: each packed row gets the window's band, as the padded mask has it."""
    window = {"model_config_kwargs": {"use_sliding_window": True, "sliding_window": 4,
                                      "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2}}
    batch = long_tailed_batch()
    padded = HFTrainStrategy(tiny_dir, packing=PADDED, infer_batch_size=2, **window)
    packed = HFTrainStrategy(tiny_dir, packing=PACKED, **window)
    lp_pad, lp_pack = padded.compute_log_probs(batch)[0], packed.compute_log_probs(batch)[0]
    torch.testing.assert_close(lp_pack, lp_pad, atol=1e-5, rtol=1e-5)
    full = HFTrainStrategy(tiny_dir, packing=PADDED).compute_log_probs(batch)[0]
    assert (full - lp_pad).abs().max() > 1e-2  # the window changes the numbers: the test is not vacuous


def test_rows_of_one_length_pack_as_the_padded_rows(tiny_dir):
    """A GRPO group's rows often have one length: packed, they share an attention call per layer
    (attention.py); log-probs and a train step's gradients still equal the padded path's."""
    shape = [(5, 2), (4, 3), (5, 2), (3, 1), (6, 1), (3, 1), (5, 2), (2, 5)]  # lengths 7 (x6) and 4 (x2)
    batch = long_tailed_batch(seed=2, shape=shape)
    padded = HFTrainStrategy(tiny_dir, packing=PADDED, infer_batch_size=8, **sgd())
    packed = HFTrainStrategy(tiny_dir, packing=PackingSettings(enabled=True), infer_batch_size=8, **sgd())
    assert packed.packs and [m.index.tolist() for m in packed._micro_batches(batch, train=False)] == [list(range(8))]
    torch.testing.assert_close(packed.compute_log_probs(batch)[0], padded.compute_log_probs(batch)[0],
                               atol=1e-5, rtol=1e-5)
    config = AgenticConfig.model_validate({"sequence_length": 64})
    loss_fn = make_actor_loss_fn(config, Normalisers.from_mask(batch["response_mask"][:, 1:].float(),
                                                               norm_seq_len(config)), loss_variant=losses.ppo)
    assert_same_step(step_gradients(padded, batch, loss_fn), step_gradients(packed, batch, loss_fn))


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_packed_train_step_equals_the_padded_one(tiny_dir, agg):
    """Loss and gradients of one PPO step (entropy bonus on) with the step's global normalisers."""
    batch = long_tailed_batch(seed=1)
    config = AgenticConfig.model_validate({"sequence_length": 64, "loss_agg_mode": agg, "entropy_loss_coef": 0.01})
    norm = Normalisers.from_mask(batch["response_mask"][:, 1:].float(), norm_seq_len(config))
    loss_fn = make_actor_loss_fn(config, norm, loss_variant=losses.ppo)
    loss_fn.needs_entropy = True
    padded = step_gradients(HFTrainStrategy(tiny_dir, packing=PADDED, **sgd()), batch, loss_fn)
    packed_strategy = HFTrainStrategy(tiny_dir, packing=PACKED, **sgd())
    # 6+36 | 8+17+4+11 | 9 <= 45 (padded: 4 micro-batches of 2 rows)
    assert [m.index.tolist() for m in packed_strategy._micro_batches(batch, train=True)] == [[0, 1], [2, 3, 4, 5], [6]]
    assert_same_step(padded, step_gradients(packed_strategy, batch, loss_fn))


def test_dynamic_batching_and_load_balance_give_the_same_step(tiny_dir):
    batch = long_tailed_batch(seed=2)
    config = AgenticConfig.model_validate({"sequence_length": 64, "loss_agg_mode": "token-mean"})
    loss_fn = make_actor_loss_fn(config, Normalisers.from_mask(batch["response_mask"][:, 1:].float(), 64),
                                 loss_variant=losses.ppo)
    padded = step_gradients(HFTrainStrategy(tiny_dir, packing=PADDED, **sgd()), batch, loss_fn)
    dynamic = HFTrainStrategy(tiny_dir, packing=PackingSettings(enabled=False, dynamic_tokens_train=64), **sgd())
    # sorted by length (4, 6, 8, 9, 11, 17, 36 tokens), rows x longest rounded up to 4 <= 64: 5 x 12 | 20 | 36
    assert [m.index.tolist() for m in dynamic._micro_batches(batch, train=True)] == [[4, 0, 2, 6, 5], [3], [1]]
    assert_same_step(padded, step_gradients(dynamic, batch, loss_fn))
    balanced = HFTrainStrategy(tiny_dir, packing=PackingSettings(algorithm="load_balance", max_tokens_train=60,
                                                                 min_micro_batches_train=2), **sgd())
    assert len(balanced._micro_batches(batch, train=True)) == 2
    assert_same_step(padded, step_gradients(balanced, batch, loss_fn))


def test_packed_critic_equals_the_padded_one(tiny_dir):
    batch = long_tailed_batch(seed=3)
    config = AgenticConfig.model_validate({"sequence_length": 64})
    loss_fn = make_critic_loss_fn(config, Normalisers.from_mask(batch["response_mask"][:, 1:].float(), 64))
    strategies = [HFCriticStrategy(tiny_dir, packing=p, **sgd(lr=0.05)) for p in (PADDED, PACKED)]
    for critic in strategies:  # a trained step first, so the head's values are not all zero
        critic.train_step(batch, loss_fn)
    values = [c.compute_values(batch) for c in strategies]
    assert values[0].abs().max() > 0 and strategies[1].packs
    torch.testing.assert_close(values[1], values[0], atol=1e-5, rtol=1e-5)
    assert_same_step(*(step_gradients(c, batch, loss_fn) for c in strategies))


def test_packed_lora_step_equals_the_padded_one(tiny_dir):
    batch = long_tailed_batch(seed=4)
    n_tok = batch["response_mask"][:, 1:].sum()

    def loss_fn(mb, log_probs, _entropy):
        return -(log_probs * mb["advantages"]).sum() / n_tok, {}

    lora = LoraSettings(target="q_proj,v_proj", rank=4, alpha=8)
    steps = [step_gradients(HFTrainStrategy(tiny_dir, packing=p, lora=lora, seed=3, **sgd()), batch, loss_fn)
             for p in (PADDED, PACKED)]
    assert all("lora" in name for name in steps[0][1])
    assert_same_step(*steps)


def test_a_model_that_mixes_packed_rows_is_caught(tiny_dir, caplog):
    model = HFTrainStrategy(tiny_dir, packing=PADDED).model
    apart = lambda p: model(**p.forward_kwargs()).logits  # noqa: E731
    mixed = lambda p: model(input_ids=p.input_ids).logits  # noqa: E731  (one sequence: rows see each other)
    assert isolates_rows(apart, torch.device("cpu")) and not isolates_rows(mixed, torch.device("cpu"))
    with caplog.at_level(logging.WARNING):
        assert resolve_packing(PackingSettings(), mixed, torch.device("cpu"), "test") is False
    assert "padded rows instead" in caplog.text
    with pytest.raises(ConfigError, match="use_sequence_packing: false"):
        resolve_packing(PackingSettings(enabled=True), mixed, torch.device("cpu"), "test")
    assert resolve_packing(PADDED, apart, torch.device("cpu"), "test") is False


def test_roll_fields_reach_the_strategy(tiny_dir):
    config = AgenticConfig.model_validate({
        "sequence_length": 64,
        "actor_train": {"sequence_packing_args": {"algorithm": "load_balance", "max_packed_sequence_length_train": 512,
                                                  "min_num_micro_batches_train": 2},
                        "use_dynamic_batching_in_infer": True, "max_tokens_per_microbatch_in_infer": 256,
                        "sequence_length_round_in_infer": 8},
        "critic": {"use_sequence_packing": False}})
    actor = PackingSettings.from_worker_config(config.actor_train)
    assert actor == PackingSettings(enabled=None, algorithm="load_balance", max_tokens_train=512,
                                    min_micro_batches_train=2, dynamic_tokens_forward=256, dynamic_round_forward=8,
                                    dynamic_round_train=4)
    steps = {"num_training_steps": 2}
    assert HFTrainStrategy.from_worker_config(config.actor_train, tiny_dir, 0, **steps).packs
    assert not HFCriticStrategy.from_worker_config(config.critic, tiny_dir, 0, **steps).packs
    with pytest.raises(ValueError, match="max_tokens_per_microbatch_in_train"):
        AgenticConfig.model_validate({"sequence_length": 64, "actor_train": {"use_dynamic_batching_in_train": True}})
    with pytest.raises(ValueError, match="algorithm"):
        AgenticConfig.model_validate({"sequence_length": 64,
                                      "actor_train": {"sequence_packing_args": {"algorithm": "greedy"}}})


@pytest.mark.parametrize("window", [None, 4])
def test_segment_attention_batches_rows_of_one_length_with_each_row_s_own_values(window):
    """Rows of the same length go through sdpa in one call (docs/benchmarks.md section 18); every
    row's output and the gradients of q, k and v must be those of one sdpa call per row, bit for bit
    (sdpa computes each batch entry on its own), whatever order the lengths come in."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from roll_core.strategies.attention import segment_sdpa_forward

    module = SimpleNamespace(is_causal=True, num_key_value_groups=2, training=True)
    lengths = [9, 3, 9, 1, 0, 9, 3, 12, 1]
    edges = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    total = int(edges[-1])
    gen = torch.Generator().manual_seed(0)
    q0, k0, v0 = (torch.randn(1, heads, total, 8, generator=gen) for heads in (4, 2, 2))
    upstream = torch.randn(1, total, 4, 8, generator=gen)

    def row_by_row(q, k, v):
        outs = []
        for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
            if b == a:
                continue
            n = b - a
            mask = (torch.ones(n, n, dtype=torch.bool).tril_().triu_(-(window - 1))[None, None]
                    if window and n > window else None)
            outs.append(sdpa_attention_forward(module, q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], mask,
                                               scaling=0.3, is_causal=mask is None)[0])
        return torch.cat(outs, dim=1)

    def grouped(q, k, v):
        extra = {"sliding_window": window} if window else {}
        return segment_sdpa_forward(module, q, k, v, None, scaling=0.3, cu_seq_lens_q=edges,
                                    cu_seq_lens_k=edges, **extra)[0]

    results = []
    for attend in (row_by_row, grouped):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        out = attend(q, k, v)
        (out * upstream).sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad))
    assert results[1][0].shape == (1, total, 4, 8)
    for got, want in zip(*results):
        assert torch.equal(got, want)
