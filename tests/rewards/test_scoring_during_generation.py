"""RLVR scoring during generation: a batch's first chunks are scored while its later chunks are
still generating, and the batch equals the one generated first and scored after (same tokens,
bitwise, same scores, same row order)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from roll_core.config.rlvr import RewardConfig
from roll_core.registry import Registration
from roll_core.rewards.dispatch import RewardDispatcher
from roll_core.rollout.rlvr.reward_scoring import RewardScoring

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.mark.usefixtures("ray_session")
def test_scoring_overlaps_generation_and_the_batch_equals_generate_then_score(monkeypatch):
    import ray

    from roll_core.config import load_config, resolve
    from roll_core.data import PromptRow
    from roll_core.models.policy_tokenizer import tiny_tokenizer
    from roll_core.rollout.rlvr.rlvr_rollout import RLVRRollout, request_seed
    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.workers.infer_group import start_generation

    monkeypatch.syspath_prepend(HERE)
    import roll_reward_testfns as fns

    run = resolve(load_config(os.path.join(ROOT, "examples", "rlvr", "multi_domain.yaml")))
    tokenizer = tiny_tokenizer()
    lines = open(os.path.join(ROOT, "examples", "rlvr", "data", "multi_domain_train.jsonl")).read().splitlines()
    texts = [json.loads(line)["prompt"] for line in lines[:6]]
    rows = [PromptRow(index=i, prompt_ids=tuple(tokenizer(t)["input_ids"][:48]), text=t, reference=None, domain="d")
            for i, t in enumerate(texts)]
    section = RewardConfig(score_timeout=60)
    dispatcher = RewardDispatcher({"d": section}, {"d": Registration("reward", "slow", "roll_reward_testfns:slow_stamped",
                                                                     plugin="tests")})
    scoring = RewardScoring({"d": section}, dispatcher, threads=8)
    # chunks of 2 requests on one worker: 6 chunks generated one after the other
    group_gen = start_generation(run, num_workers=1, options={"num_cpus": 0}, max_batch_size=2)
    try:
        sampling = SamplingParams(max_new_tokens=16, temperature=1.0)
        rollout = RLVRRollout(scheduler=group_gen.scheduler, tokenizer=tokenizer, rewards=scoring, sampling=sampling,
                              group_size=2, seed=0)
        rollout.generate(rows[:1], "warm")
        fns.STARTS.clear()
        samples = rollout.generate(rows, "b0")
        starts = sorted(fns.STARTS)
        # the overlap, by timestamps: responses were being scored before the last one was generated
        assert len(starts) == 12 and starts[0] < samples.generated_at
        assert sum(t < samples.generated_at for t in starts) >= 2  # at least the first chunk's pair

        # the sequential path: the same requests generated as a whole round, then scored in row order
        requests = [GenerationRequest(f"b0-p{i}-s{j}", list(row.prompt_ids),
                                      replace(sampling, seed=request_seed(0, f"b0-p{i}-s{j}")))
                    for i, row in enumerate(rows) for j in range(2)]
        outputs = ray.get(group_gen.scheduler.generate_all.remote(requests))
        assert [list(o.token_ids) for o in outputs] == samples.response_ids
        assert [list(o.logprobs) for o in outputs] == samples.logprobs  # bitwise: the same chunks
        flat = [row for row in rows for _ in range(2)]
        expected = [dispatcher.score_checked("d", row.text, tokenizer.decode(o.token_ids, skip_special_tokens=True),
                                             None, len(o.token_ids), {}) for row, o in zip(flat, outputs)]
        assert list(zip(samples.rewards, samples.correct, samples.failures)) == expected
        assert samples.rows == flat and samples.groups == [f"b0-p{i}" for i in range(6) for _ in range(2)]
    finally:
        scoring.shutdown()
        group_gen.shutdown()
