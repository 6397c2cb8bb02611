"""hf_infer's static decode cache gives what the growing cache gives: the same greedy tokens, the same
sampled tokens, log-probs to float rounding; across ragged prompts, stops, partly filled and shrinking
batch buckets, partial-rollout continuations and the eager attention; models it cannot serve decode
on the growing cache with the reason kept; on CUDA the captured steps give the same again."""

from __future__ import annotations

import logging

import pytest
import torch

from roll_core.errors import RollError
from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.hf_infer import HFInferStrategy
from roll_core.strategies.static_decode import LENGTH_QUANTUM, length_bucket, row_bucket


@pytest.fixture(scope="module")
def pair(peaked_dir):
    """The same weights decoding on each cache."""
    return (HFInferStrategy(peaked_dir, seed=0, max_batch_size=8, decode_cache="dynamic"),
            HFInferStrategy(peaked_dir, seed=0, max_batch_size=8, decode_cache="static"))


def prompts_of(strategy, n):
    tok = strategy.tokenizer
    texts = [f"State:\n{'_P_O' * (1 + 3 * i)}\nWhat is {i}+{2 * i}? <answer>" for i in range(n)]
    return [tok(tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                        add_generation_prompt=True))["input_ids"] for t in texts]


def assert_same(a, b, atol=1e-4):
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.finish_reason for o in a] == [o.finish_reason for o in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=atol), (x.logprobs, y.logprobs)


def test_buckets():
    assert [row_bucket(n, 64) for n in (1, 2, 3, 5, 33, 64)] == [1, 2, 4, 8, 64, 64]
    assert row_bucket(6, 6) == 6 and row_bucket(5, 6) == 6  # max_batch_size is a bucket of its own
    assert length_bucket(1) == LENGTH_QUANTUM and length_bucket(LENGTH_QUANTUM + 1) == 2 * LENGTH_QUANTUM


def test_greedy_ragged_partly_filled_and_shrinking_buckets(pair):
    dynamic, static = pair
    prompts = prompts_of(static, 6)  # 6 rows in a bucket of 8, prompts of very different lengths
    assert max(map(len, prompts)) > 2 * min(map(len, prompts))
    # rows finish at different steps: the live rows move to buckets of 4, 2 and 1
    requests = [GenerationRequest(f"r{i}", p, SamplingParams(max_new_tokens=3 + 9 * i, temperature=0))
                for i, p in enumerate(prompts)]
    out = static.generate(requests)
    assert len({tuple(o.token_ids) for o in out}) > 1  # the model is not degenerate
    assert_same(dynamic.generate(requests), out)
    assert {rows for rows, _ in static._static.buckets} == {8, 4, 2, 1}
    assert static.static_fallback is None


def test_sampled_tokens_with_seeds_top_p_top_k(pair):
    dynamic, static = pair
    prompts = prompts_of(static, 5)
    requests = [GenerationRequest(f"s{i}", p, SamplingParams(max_new_tokens=20, temperature=0.8, top_p=0.9,
                                                             top_k=20, seed=i)) for i, p in enumerate(prompts)]
    assert_same(dynamic.generate(requests), static.generate(requests))


def test_stop_tokens_and_stop_strings(pair):
    dynamic, static = pair
    prompt = prompts_of(static, 1)[0]
    full = dynamic.generate([GenerationRequest("f", prompt, SamplingParams(max_new_tokens=16, temperature=0))])[0]
    stop_at = next(i for i in range(2, 16) if full.token_ids[i] not in full.token_ids[:i])
    text = static.tokenizer.decode(full.token_ids[: stop_at + 1])
    requests = [
        GenerationRequest("t", prompt, SamplingParams(max_new_tokens=16, temperature=0,
                                                      stop_token_ids=(full.token_ids[stop_at],))),
        GenerationRequest("s", prompt, SamplingParams(max_new_tokens=16, temperature=0, stop_strings=(text[-2:],))),
        GenerationRequest("l", prompt, SamplingParams(max_new_tokens=16, temperature=0)),
    ]
    out = static.generate(requests)
    assert out[0].finish_reason == "stop" and out[0].token_ids == full.token_ids[: stop_at + 1]
    assert out[1].finish_reason == "stop" and len(out[1].token_ids) <= stop_at + 1
    assert out[2].token_ids == full.token_ids
    assert_same(dynamic.generate(requests), out)


def test_partial_rollout_continuation(pair):
    """A response cut by a weight sync continues from prompt + kept tokens (the scheduler's prefill):
    on the static cache it continues exactly as the uninterrupted response did."""
    dynamic, static = pair
    prompts = prompts_of(static, 3)
    whole = static.generate([GenerationRequest(f"w{i}", p, SamplingParams(max_new_tokens=24, temperature=0))
                             for i, p in enumerate(prompts)])
    kept = [5, 11, 17]
    continued = [GenerationRequest(f"c{i}", list(p) + w.token_ids[:k], SamplingParams(max_new_tokens=24 - k,
                                                                                       temperature=0))
                 for i, (p, w, k) in enumerate(zip(prompts, whole, kept))]
    out = static.generate(continued)
    for w, k, o in zip(whole, kept, out):
        assert w.token_ids[:k] + o.token_ids == w.token_ids
        assert torch.allclose(torch.tensor(o.logprobs), torch.tensor(w.logprobs[k:]), atol=1e-4)
    assert_same(dynamic.generate(continued), out)


def test_buckets_are_reused_across_batches(pair):
    _, static = pair
    prompts = prompts_of(static, 4)
    requests = [GenerationRequest(f"b{i}", p, SamplingParams(max_new_tokens=4, temperature=0))
                for i, p in enumerate(prompts)]
    static.generate(requests)
    held = {key: bucket.cache.keys[0] for key, bucket in static._static.buckets.items()}
    again = static.generate(requests)
    assert all(static._static.buckets[key].cache.keys[0] is keys for key, keys in held.items() if
               key in static._static.buckets)
    assert [o.token_ids for o in again] == [o.token_ids for o in static.generate(requests)]


def test_eager_attention_static_equals_dynamic(peaked_dir):
    """The eager softmax takes an additive mask (static_decode.MASK_KINDS)."""
    dynamic = HFInferStrategy(peaked_dir, seed=0, max_batch_size=4, attn_implementation="eager",
                              decode_cache="dynamic")
    static = HFInferStrategy(peaked_dir, seed=0, max_batch_size=4, attn_implementation="eager",
                             decode_cache="static")
    requests = [GenerationRequest(f"e{i}", p, SamplingParams(max_new_tokens=6 + 4 * i, temperature=0))
                for i, p in enumerate(prompts_of(static, 3))]
    assert_same(dynamic.generate(requests), static.generate(requests))
    assert static.static_fallback is None


def test_sliding_window_model_decodes_on_the_growing_cache(tiny_dir, caplog):
    window = {"use_sliding_window": True, "sliding_window": 4,
              "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2}
    dynamic = HFInferStrategy(tiny_dir, seed=0, decode_cache="dynamic", model_config_kwargs=window)
    static = HFInferStrategy(tiny_dir, seed=0, decode_cache="static", model_config_kwargs=window)
    requests = [GenerationRequest(f"w{i}", p, SamplingParams(max_new_tokens=8, temperature=0))
                for i, p in enumerate(prompts_of(static, 2))]
    with caplog.at_level(logging.WARNING, logger="roll_core.strategies.hf_infer"):
        out = static.generate(requests)
    assert "sliding-window or recurrent" in static.static_fallback
    assert sum("growing cache" in r.getMessage() for r in caplog.records) == 1
    assert_same(dynamic.generate(requests), out, atol=0)


def test_decode_cache_option(peaked_dir):
    from types import SimpleNamespace

    worker = SimpleNamespace(model_args=SimpleNamespace(dtype="fp32", attn_implementation=None),
                             strategy_args=SimpleNamespace(strategy_config={"decode_cache": "dynamic"}),
                             infer_batch_size=4)
    assert HFInferStrategy.from_worker_config(worker, peaked_dir, seed=0).decode_cache == "dynamic"
    assert HFInferStrategy(peaked_dir, seed=0).decode_cache == "static"  # auto on CPU (DECODE_CACHE_DEFAULT)
    with pytest.raises(RollError, match="decode_cache must be one of auto, dynamic, static"):
        HFInferStrategy(peaked_dir, seed=0, decode_cache="paged")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
def test_captured_steps_on_cuda(peaked_dir):
    dynamic = HFInferStrategy(peaked_dir, seed=0, device="cuda", dtype="fp32", max_batch_size=8,
                              decode_cache="dynamic")
    static = HFInferStrategy(peaked_dir, seed=0, device="cuda", dtype="fp32", max_batch_size=8,
                             decode_cache="static")
    requests = [GenerationRequest(f"g{i}", p, SamplingParams(max_new_tokens=3 + 9 * i, temperature=0.7, seed=i))
                for i, p in enumerate(prompts_of(static, 6))]
    out = static.generate(requests)
    assert static._static.capture_failed is None
    assert all(bucket.graph is not None for bucket in static._static.buckets.values())
    assert_same(dynamic.generate(requests), out, atol=1e-4)
    static.offload()
    static.reload()
    assert_same(out, static.generate(requests), atol=1e-4)  # buckets captured again on the moved weights
