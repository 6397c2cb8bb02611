"""hf_infer: batched generation equals one-at-a-time generation, log-probs equal a teacher-forced
forward, sampling params / stops / abort / weight loading behave as the contract says."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from roll_core.errors import ConfigError, RollError
from roll_core.strategies import hf_infer as hf_infer_module
from roll_core.strategies.attention import GROUPED_SDPA
from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.hf_infer import HFInferStrategy, prefill_buckets

GREEDY = SamplingParams(max_new_tokens=10, temperature=0.0)


@pytest.fixture(scope="module")
def infer(peaked_dir):
    return HFInferStrategy(peaked_dir, seed=0, max_batch_size=8)


def prompts_of(strategy, n=6):
    tok = strategy.tokenizer
    texts = [f"State:\n{'_P_O' * (1 + i)}\nWhat is {i}+{2 * i}? <answer>" for i in range(n)]
    return [tok(tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                        add_generation_prompt=True))["input_ids"] for t in texts]


def teacher_forced(strategy, prompt, response, temperature=1.0):
    """Log-probs of ``response`` after ``prompt`` from one plain forward pass (on the strategy's device)."""
    ids = torch.tensor([list(prompt) + list(response)], device=strategy.device)
    with torch.no_grad():
        logits = strategy.model(ids).logits[0].float() / temperature
    picked = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1].gather(1, ids[0, len(prompt) :, None])
    return picked.squeeze(1).cpu()


def test_batched_mixed_lengths_equal_one_at_a_time(infer):
    prompts = prompts_of(infer)
    assert len({len(p) for p in prompts}) == len(prompts)  # all different lengths
    requests = [GenerationRequest(f"r{i}", p, GREEDY) for i, p in enumerate(prompts)]
    batched = infer.generate(requests)
    assert [o.request_id for o in batched] == [r.request_id for r in requests]
    assert len({tuple(o.token_ids) for o in batched}) > 1  # the model is not degenerate
    for request, out in zip(requests, batched):
        alone = infer.generate([request])[0]
        assert alone.token_ids == out.token_ids
        reference = teacher_forced(infer, request.prompt_ids, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), reference, atol=1e-4)


def test_grouped_query_attention_gives_transformers_sdpa_results_bit_for_bit(peaked_dir):
    """On CPU hf_infer attends with K/V heads kept grouped (attention.py); the same requests through
    transformers' own sdpa (which copies K/V per query head under a mask) give identical outputs."""
    strategy = HFInferStrategy(peaked_dir, seed=0, max_batch_size=8)
    config = strategy.model.config
    assert config._attn_implementation == GROUPED_SDPA
    assert config.num_key_value_heads < config.num_attention_heads  # the grouped path is exercised
    params = [SamplingParams(max_new_tokens=10, temperature=1.0, seed=i) for i in range(6)]
    requests = [GenerationRequest(str(i), p, sp) for i, (p, sp) in enumerate(zip(prompts_of(strategy), params))]
    grouped = strategy.generate(requests)
    strategy.model.set_attn_implementation("sdpa")
    plain = strategy.generate(requests)
    assert [o.token_ids for o in grouped] == [o.token_ids for o in plain]
    assert [o.logprobs for o in grouped] == [o.logprobs for o in plain]


def test_prompts_of_very_different_lengths_prefill_in_buckets(infer):
    """Short and long prompts in one batch are prefilled in length buckets and joined into one
    cache: every request still gets what it gets alone, with teacher-forced log-probs."""
    base = prompts_of(infer, 6)
    prompts = [base[0][:3], base[1], base[5] * 4, base[2][:12], base[5] * 2, base[3]]
    assert len(prefill_buckets([len(p) for p in prompts])) >= 3
    requests = [GenerationRequest(f"b{i}", p, SamplingParams(max_new_tokens=8, temperature=1.0, seed=i))
                for i, p in enumerate(prompts)]
    batched = infer.generate(requests)
    for request, out in zip(requests, batched):
        assert infer.generate([request])[0].token_ids == out.token_ids
        reference = teacher_forced(infer, request.prompt_ids, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), reference, atol=1e-4)


def test_identical_prompts_are_prefilled_once_and_sampled_apart(infer, monkeypatch):
    """A group's samples share their prompt: the model prefills each distinct prompt once (mixed
    with prompts of other lengths, so the shared cache rows go through the bucketed join), and every
    request still gets what the row-by-row prefill gives it: the same tokens, its own draws
    (per-request seeds), log-probs equal to rounding and to a teacher-forced forward's."""
    base = prompts_of(infer, 3)
    prompts = [base[0], base[1], base[0], base[2] * 3, base[1], base[0], base[2] * 3]
    requests = [GenerationRequest(f"g{i}", p, SamplingParams(max_new_tokens=8, temperature=1.0, seed=i))
                for i, p in enumerate(prompts)]
    prefilled: list[int] = []
    hook = infer.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: prefilled.append(kwargs["input_ids"].shape[0]) if kwargs["input_ids"].shape[1] > 1
        else None, with_kwargs=True)
    try:
        shared = infer.generate(requests)
    finally:
        hook.remove()
    assert sum(prefilled) == 3  # three distinct prompts, seven requests
    monkeypatch.setattr(infer, "_prefill", infer._prefill_rows)
    every_row = infer.generate(requests)
    # the same draws; log-probs to rounding (a matrix product's may depend on its row count)
    assert [o.token_ids for o in shared] == [o.token_ids for o in every_row]
    for a, b in zip(shared, every_row):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert shared[0].token_ids != shared[2].token_ids or shared[0].token_ids != shared[5].token_ids
    for request, out in zip(requests, shared):
        reference = teacher_forced(infer, request.prompt_ids, out.token_ids)
        assert torch.allclose(torch.tensor(out.logprobs), reference, atol=1e-4)


def test_a_cache_that_is_not_plain_kv_is_prefilled_whole_and_not_shared_again(peaked_dir, monkeypatch):
    """A model whose cache layers are not plain per-layer K/V cannot have its rows copied: its first
    batch with shared prompts is prefilled again row by row, and later batches are not tried
    shared, so such a model pays one prefill a batch, not two."""
    import transformers.cache_utils

    strategy = HFInferStrategy(peaked_dir, seed=0, max_batch_size=8)
    base = prompts_of(strategy, 2)
    requests = [GenerationRequest(f"r{i}", p, GREEDY) for i, p in enumerate([base[0], base[1], base[0]])]
    expected = strategy.generate(requests)
    monkeypatch.setattr(transformers.cache_utils, "DynamicLayer", type("OtherLayer", (), {}))
    calls: list[int] = []
    rows = strategy._prefill_rows
    monkeypatch.setattr(strategy, "_prefill_rows", lambda prompts: calls.append(len(prompts)) or rows(prompts))
    first = strategy.generate(requests)
    assert calls == [2, 3]  # the shared prefill, then every row
    second = strategy.generate(requests)
    assert calls == [2, 3, 3]  # not tried shared again
    assert [o.token_ids for o in first] == [o.token_ids for o in second] == [o.token_ids for o in expected]


def test_prefill_buckets_bound_the_padding():
    lengths = [512, 40, 400, 390, 33, 100, 80, 512]
    buckets = prefill_buckets(lengths)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    assert buckets == [[0, 7, 2, 3], [5, 6], [1, 4]]  # longest first; 0.75 x the bucket's longest
    for bucket in buckets:
        width = max(lengths[i] for i in bucket)
        assert all(lengths[i] >= 0.75 * width for i in bucket)
    assert prefill_buckets([7]) == [[0]]


def test_sampled_logprobs_are_temperature_scaled_model_logprobs(infer):
    prompts = prompts_of(infer, 4)
    params = [SamplingParams(max_new_tokens=8, temperature=0.7, seed=1),
              SamplingParams(max_new_tokens=8, temperature=1.3, top_k=5, seed=2),
              SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.8, seed=3),
              SamplingParams(max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.9, seed=4)]
    outs = infer.generate([GenerationRequest(str(i), p, sp) for i, (p, sp) in enumerate(zip(prompts, params))])
    for prompt, sp, out in zip(prompts, params, outs):
        reference = teacher_forced(infer, prompt, out.token_ids, sp.temperature)
        assert torch.allclose(torch.tensor(out.logprobs), reference, atol=1e-4)
        if sp.top_k:  # every sampled token lies in the top-k of its step
            ids = torch.tensor([list(prompt) + out.token_ids], device=infer.device)
            with torch.no_grad():
                logits = infer.model(ids).logits[0, len(prompt) - 1 : -1]
            ranks = (logits > logits.gather(1, ids[0, len(prompt) :, None])).sum(-1)
            assert int(ranks.max()) < sp.top_k


def test_per_request_seeds_reproduce(infer):
    prompt = prompts_of(infer, 1)[0]
    sp = SamplingParams(max_new_tokens=12, temperature=1.5)
    first = infer.generate([GenerationRequest("a", prompt, SamplingParams(**{**sp.__dict__, "seed": 7})),
                            GenerationRequest("b", prompt, SamplingParams(**{**sp.__dict__, "seed": 8}))])
    again = infer.generate([GenerationRequest("a", prompt, SamplingParams(**{**sp.__dict__, "seed": 7}))])
    assert again[0].token_ids == first[0].token_ids
    assert first[0].token_ids != first[1].token_ids


def test_stop_tokens_stop_strings_and_max_new_tokens(infer):
    prompt = prompts_of(infer, 1)[0]
    full = infer.generate([GenerationRequest("f", prompt, SamplingParams(max_new_tokens=12, temperature=0))])[0]
    assert full.finish_reason == "length" and len(full.token_ids) == 12

    stop_at = next(i for i in range(2, 12) if full.token_ids[i] not in full.token_ids[:i])
    out = infer.generate([GenerationRequest("s", prompt, SamplingParams(
        max_new_tokens=12, temperature=0, stop_token_ids=(full.token_ids[stop_at],)))])[0]
    assert out.finish_reason == "stop" and out.token_ids == full.token_ids[: stop_at + 1]

    tok = infer.tokenizer
    text = tok.decode(full.token_ids[: stop_at + 1])
    stop = text[-2:] if len(text) >= 2 else text
    first_hit = next(i for i in range(1, 13) if stop in tok.decode(full.token_ids[:i]))
    out = infer.generate([GenerationRequest("t", prompt, SamplingParams(
        max_new_tokens=12, temperature=0, stop_strings=(stop,)))])[0]
    assert out.finish_reason == "stop" and out.token_ids == full.token_ids[:first_hit]

    eos_infer = HFInferStrategy(infer.model_dir, extra_stop_token_ids=(full.token_ids[0],))
    out = eos_infer.generate([GenerationRequest("e", prompt, SamplingParams(max_new_tokens=5, temperature=0))])[0]
    assert out.finish_reason == "stop" and out.token_ids == full.token_ids[:1]

    outs = infer.generate([GenerationRequest("z", prompt, SamplingParams(max_new_tokens=0)),
                           GenerationRequest("o", prompt, SamplingParams(max_new_tokens=3, temperature=0))])
    assert outs[0].token_ids == [] and outs[0].finish_reason == "length"
    assert outs[1].token_ids == full.token_ids[:3]


def test_many_requests_span_batches_and_rows_finish_at_different_steps(infer):
    """More requests than max_batch_size, staggered lengths (exercises batch compaction)."""
    prompts = (prompts_of(infer, 5) * 2)[:9]
    assert len(prompts) > infer.max_batch_size
    requests = [GenerationRequest(str(i), p, SamplingParams(max_new_tokens=1 + i, temperature=0))
                for i, p in enumerate(prompts)]
    outs = infer.generate(requests)
    for i, (request, out) in enumerate(zip(requests, outs)):
        assert len(out.token_ids) == 1 + i and out.finish_reason == "length"
        if i % 3 == 2:
            assert out.token_ids == infer.generate([request])[0].token_ids


def test_abort_between_steps(infer, monkeypatch):
    prompts = prompts_of(infer, 3)
    calls = {"n": 0}
    real = hf_infer_module.sample_next

    def sample_then_abort(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            infer.abort(["r1"])
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_infer_module, "sample_next", sample_then_abort)
    outs = infer.generate([GenerationRequest(f"r{i}", p, SamplingParams(max_new_tokens=8, temperature=0))
                           for i, p in enumerate(prompts)])
    assert outs[1].finish_reason == "abort" and len(outs[1].token_ids) == 3
    assert [o.finish_reason for o in (outs[0], outs[2])] == ["length", "length"]
    infer.abort(["r1"])  # not in flight: ignored, later requests unaffected
    assert infer.generate([GenerationRequest("r1", prompts[1], GREEDY)])[0].finish_reason == "length"


def test_load_weights_changes_outputs_and_stamps_version(peaked_dir, tiny_dir):
    infer = HFInferStrategy(peaked_dir, seed=0)
    request = GenerationRequest("w", prompts_of(infer, 1)[0], GREEDY)
    before = infer.generate([request])[0]
    assert before.policy_version == 0
    other = HFInferStrategy(tiny_dir, seed=0).model.state_dict()
    infer.load_weights(other, version=3)
    after = infer.generate([request])[0]
    assert after.policy_version == 3 and infer.policy_version == 3
    assert after.token_ids != before.token_ids or after.logprobs != before.logprobs
    with pytest.raises(RollError, match="do not match"):
        infer.load_weights({"not.a.weight": torch.zeros(1)}, version=4)


def test_offload_reload_are_noops_on_cpu(infer):
    request = GenerationRequest("o", prompts_of(infer, 1)[0], GREEDY)
    before = infer.generate([request])[0]
    infer.offload()
    infer.reload()
    assert infer.generate([request])[0].token_ids == before.token_ids


def test_bad_prompts_are_clear_errors(infer):
    with pytest.raises(RollError, match="empty prompt"):
        infer.generate([GenerationRequest("x", [], GREEDY)])
    with pytest.raises(RollError, match="outside the model's vocabulary"):
        infer.generate([GenerationRequest("y", [1, 10**6], GREEDY)])


def test_from_worker_config(peaked_dir):
    worker = SimpleNamespace(
        model_args=SimpleNamespace(dtype="fp32", attn_implementation="fa2"),
        generating_args=SimpleNamespace(max_new_tokens=7, temperature=0.9, top_p=0.95, top_k=20),
        strategy_args=SimpleNamespace(strategy_name="hf_infer", strategy_config={"device": "cpu"}),
        infer_batch_size=5,
    )
    infer = HFInferStrategy.from_worker_config(worker, peaked_dir, seed=3)
    assert infer.max_batch_size == 5 and infer.device.type == "cpu"
    assert infer.default_sampling == SamplingParams(max_new_tokens=7, temperature=0.9, top_p=0.95, top_k=20)
    worker.strategy_args.strategy_config = {"devcie": "cpu"}
    with pytest.raises(ConfigError, match="Did you mean 'device'"):
        HFInferStrategy.from_worker_config(worker, peaked_dir, seed=3)


def test_registered_lazily_without_torch():
    code = (
        "import sys\n"
        "from roll_core.plugins import PluginManager\n"
        "reg = PluginManager(autoload=False).registry\n"
        "train = [r for r in reg.all('strategy') if r.name == 'hf_train'][0]\n"
        "infer = [r for r in reg.all('strategy') if r.name == 'hf_infer'][0]\n"
        "print(train.options['role'], infer.options['role'], train.options['critic'], 'torch' in sys.modules)\n"
        "print(infer.load().__name__, train.load().__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = out.stdout.strip().splitlines()
    assert first == "train infer roll_core.strategies.critic:HFCriticStrategy False"
    assert second == "HFInferStrategy HFTrainStrategy"
