"""HF Qwen2 <-> Megatron conversion, for real on CPU (pure tensor code)."""

from __future__ import annotations

import pytest
import torch
from _megatron_helpers import tiny_qwen2
from roll_strategy_megatron.conversion import (
    Qwen2Layout,
    fuse_qkv,
    hf_to_megatron,
    megatron_to_hf,
    merge,
    shard,
    split_qkv,
)


def test_qkv_is_fused_per_query_group():
    layout = Qwen2Layout(num_layers=1, hidden_size=1, num_attention_heads=4, num_key_value_heads=2, head_dim=1,
                         intermediate_size=1, vocab_size=1, tie_word_embeddings=True)
    q, k, v = torch.tensor([0.0, 1, 2, 3]), torch.tensor([10.0, 11]), torch.tensor([20.0, 21])
    fused = fuse_qkv(q, k, v, layout)
    assert fused.tolist() == [0, 1, 10, 20, 2, 3, 11, 21]  # group 0: q0 q1 k0 v0, group 1: q2 q3 k1 v1
    assert [t.tolist() for t in split_qkv(fused, layout)] == [q.tolist(), k.tolist(), v.tolist()]


@pytest.mark.parametrize("fused_norms", [False, True], ids=["local-spec", "te-spec"])
def test_round_trip_equals_the_original(qwen2, fused_norms):
    config, model = qwen2
    layout = Qwen2Layout.from_hf_config(config, fused_norms=fused_norms)
    original = model.state_dict()
    mg = hf_to_megatron(original, layout)
    assert mg["decoder.layers.0.self_attention.linear_qkv.weight"].shape == ((4 + 2 * 2) * 16, 64)
    assert ("output_layer.weight" in mg) is (not config.tie_word_embeddings)
    back = megatron_to_hf(mg, layout)
    assert back.keys() == original.keys()
    assert all(torch.equal(back[k], original[k]) for k in original)


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2), (2, 2), (2, 4)])
def test_shards_merge_back(qwen2, tp, pp):
    config, model = qwen2
    layout = Qwen2Layout.from_hf_config(config)
    mg = hf_to_megatron(model.state_dict(), layout)
    shards = {(t, p): shard(mg, layout, tp_rank=t, tp_size=tp, pp_rank=p, pp_size=pp)
              for t in range(tp) for p in range(pp)}
    first_stage = shards[(0, 0)]
    assert first_stage["decoder.layers.0.self_attention.linear_qkv.weight"].shape[0] == (4 + 2 * 2) * 16 // tp
    assert first_stage["decoder.layers.0.mlp.linear_fc1.weight"].shape[0] == 2 * 96 // tp
    assert f"decoder.layers.{4 // pp}.input_layernorm.weight" not in first_stage  # later stages' layers
    last_stage = shards[(0, pp - 1)]
    assert ("output_layer.weight" in last_stage) is (pp > 1 or not config.tie_word_embeddings)
    merged = merge(shards, layout, tp_size=tp, pp_size=pp)
    assert merged.keys() == mg.keys() and all(torch.equal(merged[k], mg[k]) for k in mg)


def test_tp_shard_of_gate_up_holds_matching_halves():
    config, model = tiny_qwen2(tie=True)
    layout = Qwen2Layout.from_hf_config(config)
    mg = hf_to_megatron(model.state_dict(), layout)
    rank1 = shard(mg, layout, tp_rank=1, tp_size=2, pp_rank=0, pp_size=1)["decoder.layers.0.mlp.linear_fc1.weight"]
    gate, up = model.state_dict()["model.layers.0.mlp.gate_proj.weight"], model.state_dict()["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(rank1, torch.cat([gate[48:], up[48:]]))


def test_bad_inputs_name_the_key():
    config, model = tiny_qwen2(tie=False)
    layout = Qwen2Layout.from_hf_config(config)
    weights = model.state_dict()
    with pytest.raises(KeyError, match="lm_head.weight"):
        hf_to_megatron({k: v for k, v in weights.items() if k != "lm_head.weight"}, layout)
    with pytest.raises(KeyError, match="model.extra"):
        hf_to_megatron({**weights, "model.extra": torch.zeros(1)}, layout)
    with pytest.raises(ValueError, match="not divisible"):
        shard(hf_to_megatron(weights, layout), layout, tp_rank=0, tp_size=3, pp_rank=0, pp_size=1)
