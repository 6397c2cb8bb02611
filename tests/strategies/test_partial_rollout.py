"""Partial rollout: a weight sync interrupts a request on hf_infer, which keeps its tokens and continues.

The real scheduler in front of a real ``hf_infer`` strategy (threads stand in for the Ray actor's
``max_concurrency=2``). The sync is placed deterministically: a forward hook holds the decode loop
after ``KEPT`` tokens until the abort has been sent.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.hf_infer import HFInferStrategy
from roll_core.testing.infer_threads import ThreadWorker
from roll_core.workers.generate_scheduler import GenerateScheduler

KEPT = 9  # tokens sampled before the sync: the prefill plus 9 decode forwards
PROMPT = [5, 17, 42, 7, 99, 3]


def _hold_after(worker: ThreadWorker, forwards: int, loop, reached: asyncio.Event):
    """A forward hook: at forward ``forwards`` tell the test, then wait for the abort (once)."""
    calls = [0]

    def hook(module, args, output):
        calls[0] += 1
        if calls[0] == forwards:
            loop.call_soon_threadsafe(reached.set)
            assert worker.aborted.wait(30), "the weight sync never aborted"
    return worker.strategy.model.register_forward_hook(hook)


def _teacher_forced(model, prompt, tokens) -> list[float]:
    """log p(token | prompt + earlier tokens) under ``model``: the behaviour log-prob at T = 1."""
    ids = torch.tensor([prompt + tokens])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def _run_with_sync(strategy: HFInferStrategy, partial_rollout: bool, new_weights):
    worker = ThreadWorker(strategy)

    async def main():
        gen = GenerateScheduler([worker], max_batch_size=4, max_wait_s=0.0, partial_rollout=partial_rollout)
        reached = asyncio.Event()
        handle = _hold_after(worker, KEPT + 1, asyncio.get_running_loop(), reached)
        request = GenerationRequest("r0", PROMPT, SamplingParams(max_new_tokens=40, temperature=0.0))
        pending = asyncio.ensure_future(gen.generate(request))
        await reached.wait()
        handle.remove()
        assert await gen.update_weights(new_weights, 1) == 1
        return await pending, gen.stats()
    return asyncio.run(main())


@pytest.fixture()
def pair(peaked_dir):
    """Two strategies on the same weights, the old and the new weights (a perturbed copy)."""
    old = HFInferStrategy(peaked_dir, seed=0, max_batch_size=4)
    g = torch.Generator().manual_seed(3)
    new = {k: v + 0.2 * v.std() * torch.randn(v.shape, generator=g) if v.is_floating_point() and v.numel() > 1 else v
           for k, v in old.model.state_dict().items()}
    return old, new


def test_an_interrupted_request_continues_on_the_new_weights_and_keeps_its_tokens(peaked_dir, pair):
    strategy, new = pair
    reference = HFInferStrategy(peaked_dir, seed=0).generate(
        [GenerationRequest("ref", PROMPT, SamplingParams(max_new_tokens=40, temperature=0.0))])[0]
    old_model_logprobs = _teacher_forced(strategy.model, PROMPT, reference.token_ids)
    assert len(reference.token_ids) > KEPT + 2, "the greedy reference must outlive the sync point"

    out, stats = _run_with_sync(strategy, True, new)

    # the first KEPT tokens are the old policy's (as generated without a sync), the rest the new one's
    assert out.token_ids[:KEPT] == reference.token_ids[:KEPT]
    assert out.versions() == [0] * KEPT + [1] * (len(out.token_ids) - KEPT)
    assert out.policy_version == 0 and out.finish_reason in ("stop", "length")
    assert len(out.token_ids) <= 40 and len(out.logprobs) == len(out.token_ids)
    # each token's log-prob is the one of the policy that sampled it, given prompt + partial response
    new_model_logprobs = _teacher_forced(strategy.model, PROMPT, out.token_ids)
    assert out.logprobs[:KEPT] == pytest.approx(old_model_logprobs[:KEPT], abs=1e-4)
    assert out.logprobs[KEPT:] == pytest.approx(new_model_logprobs[KEPT:], abs=1e-4)
    assert out.token_ids[KEPT:] != reference.token_ids[KEPT : len(out.token_ids)]  # the weights did change
    # no token is generated twice: everything the worker sampled is in the answer
    assert stats["generated_tokens"] == len(out.token_ids)
    assert stats["kept_tokens"] == KEPT and stats["discarded_tokens"] == 0 and stats["requeued_aborts"] == 1


def test_regenerate_throws_the_partial_response_away(pair):
    strategy, new = pair
    out, stats = _run_with_sync(strategy, False, new)
    assert out.versions() == [1] * len(out.token_ids) and out.policy_version == 1
    assert stats["discarded_tokens"] == KEPT and stats["kept_tokens"] == 0
    assert stats["generated_tokens"] == KEPT + len(out.token_ids)


def test_a_stop_string_split_by_the_sync_stops_the_continuation(peaked_dir):
    """A stop string whose start is in the kept tokens and whose end is in the continuation: the
    continuation (prompt + kept tokens, ``response_prefix`` = their count) stops at the token that
    completes it. Without ``response_prefix`` hf_infer matches new tokens only and runs past it.
    Same weights before and after, greedy: the continuation is the reference's own tail."""
    strategy = HFInferStrategy(peaked_dir, seed=0)
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    reference = strategy.generate([GenerationRequest("ref", PROMPT, greedy)])[0].token_ids
    text = strategy.tokenizer.decode

    def split_at(k: int) -> str | None:
        """Two printable characters either side of the boundary after token k, found nowhere else."""
        before, after = text(reference[:k]), text(reference[k:])
        if text(reference) != before + after or len(before) < 2 or len(after) < 2:
            return None
        stop = before[-2:] + after[:2]
        clean = stop.isprintable() and stop.strip() == stop and "\ufffd" not in stop
        return stop if clean and stop not in before and stop not in after and text(reference).count(stop) == 1 else None

    kept = next((k for k in range(3, len(reference) - 3) if split_at(k)), None)
    assert kept is not None, f"no clean boundary in {text(reference)!r}"
    stop = split_at(kept)
    # the first continuation token whose text completes the stop string
    completes = next(j for j in range(1, len(reference) - kept + 1) if stop in text(reference[: kept + j]))
    sampling = SamplingParams(max_new_tokens=40 - kept, temperature=0.0, stop_strings=(stop,))
    continued = GenerationRequest("cont", PROMPT + reference[:kept], sampling, response_prefix=kept)
    [out] = strategy.generate([continued])
    assert out.finish_reason == "stop" and out.token_ids == reference[kept : kept + completes]
    [blind] = strategy.generate([GenerationRequest("old", PROMPT + reference[:kept], sampling)])
    assert blind.token_ids == reference[kept:]  # new text alone never holds the stop string


def test_the_scheduler_marks_a_continuation_s_kept_tokens():
    from roll_core.strategies.base import GenerationOutput
    from roll_core.workers.generate_scheduler import _Pending

    pending = _Pending(GenerationRequest("r", [1, 2], SamplingParams(max_new_tokens=10, seed=5)), future=None)
    pending.keep(GenerationOutput("r", [7, 8, 9], [-0.1, -0.2, -0.3], "abort", 0))
    pending.keep(GenerationOutput("r", [4], [-0.4], "abort", 1))
    assert pending.request.prompt_ids == [1, 2, 7, 8, 9, 4] and pending.request.response_prefix == 4
    assert pending.request.sampling.max_new_tokens == 6
