"""What runs of megatron_train without a GPU: the GPTModel it builds takes the converted weights,
vocab-parallel log-probs equal hf_train's (one rank, and two gloo ranks with half the vocab each),
HF checkpoints written from converted weights load back, and a clear error where CUDA is needed."""

from __future__ import annotations

import socket

import pytest
import torch
from _megatron_helpers import tiny_qwen2, vocab_parallel_rank
from roll_strategy_megatron.conversion import Qwen2Layout, hf_to_megatron, megatron_to_hf, save_hf_checkpoint
from roll_strategy_megatron.logprobs import vocab_parallel_token_log_probs

from roll_core.strategies.tensors import token_log_probs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def logits_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 7, 12, generator=g) * 3
    input_ids = torch.randint(0, 12, (3, 7), generator=g)
    response_mask = torch.zeros(3, 7, dtype=torch.long)
    response_mask[:, 3:] = 1
    return {"logits": logits, "input_ids": input_ids, "response_mask": response_mask}


def test_one_rank_log_probs_equal_hf_train():
    data = logits_batch()
    ours_logits = data["logits"].clone().requires_grad_(True)
    theirs_logits = data["logits"].clone().requires_grad_(True)
    lp, ent = vocab_parallel_token_log_probs(ours_logits, data["input_ids"], data["response_mask"],
                                             temperature=0.7, with_entropy=True)
    ref_lp, ref_ent = token_log_probs(theirs_logits, data["input_ids"], data["response_mask"], 0.7, True)
    assert torch.allclose(lp, ref_lp, atol=1e-6) and torch.allclose(ent, ref_ent, atol=1e-5)
    (lp.sum() + 0.5 * ent.sum()).backward()
    (ref_lp.sum() + 0.5 * ref_ent.sum()).backward()
    assert torch.allclose(ours_logits.grad, theirs_logits.grad, atol=1e-5)


@pytest.mark.slow
def test_two_vocab_parallel_ranks_equal_one(tmp_path):
    """Two gloo processes, half the vocabulary each: the same log-probs, entropy and gradients."""
    import torch.multiprocessing as mp

    data = logits_batch()
    mp.spawn(vocab_parallel_rank, args=(2, free_port(), data, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    full = data["logits"].clone().requires_grad_(True)
    ref_lp, ref_ent = token_log_probs(full, data["input_ids"], data["response_mask"], 0.7, True)
    (ref_lp.sum() + 0.5 * ref_ent.sum()).backward()
    for r in ranks:
        assert torch.allclose(r["log_probs"], ref_lp, atol=1e-5) and torch.allclose(r["entropy"], ref_ent, atol=1e-5)
    assert torch.allclose(torch.cat([r["grad"] for r in ranks], dim=-1), full.grad, atol=1e-5)


def test_hf_checkpoint_written_from_converted_weights_loads_back(tmp_path):
    from transformers import AutoModelForCausalLM

    config, model = tiny_qwen2(tie=True)
    layout = Qwen2Layout.from_hf_config(config)
    weights = megatron_to_hf(hf_to_megatron(model.state_dict(), layout), layout)
    save_hf_checkpoint(str(tmp_path), weights, config)
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path)).state_dict()
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[k], weights[k]) for k in weights)


@pytest.fixture(scope="module")
def megatron_cpu():
    """Megatron's parallel state on one gloo rank: enough to build models (not to run them)."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    import torch.distributed as dist
    from megatron.core import parallel_state

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    if dist.get_world_size() != 1:
        pytest.skip("needs a single-process default group")
    owned = not parallel_state.model_parallel_is_initialized()
    if owned:
        parallel_state.initialize_model_parallel(1, 1)
    yield
    if owned:
        parallel_state.destroy_model_parallel()
    if created:
        dist.destroy_process_group()


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_gpt_model_takes_the_converted_weights(megatron_cpu, tie):
    from roll_strategy_megatron.model import build_gpt_model, load_local_weights, transformer_config

    config, model = tiny_qwen2(tie=tie)
    converted = hf_to_megatron(model.state_dict(), Qwen2Layout.from_hf_config(config))
    gpt = build_gpt_model(config, transformer_config(config, dtype="float32", use_cpu_initialization=True))
    theirs = {k: v for k, v in gpt.state_dict().items() if not k.endswith("_extra_state")}
    assert theirs.keys() == converted.keys()
    assert all(theirs[k].shape == converted[k].shape for k in converted)
    load_local_weights(gpt, converted)
    assert all(torch.equal(gpt.state_dict()[k], converted[k]) for k in converted)
    with pytest.raises(ValueError, match="unexpected"):
        load_local_weights(gpt, {**converted, "decoder.layers.9.mlp.linear_fc2.weight": torch.zeros(1)})


def test_strategy_without_cuda_says_so():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    from roll_strategy_megatron.strategy import MegatronTrainStrategy

    from roll_core.errors import RollError

    with pytest.raises(RollError, match="needs CUDA"):
        MegatronTrainStrategy("roll-tiny")
