"""Reward scoring in the driver and in reward worker groups: row order kept, failures and hangs
counted per reason and bounded by score_timeout, several workers scoring at once; the judge
model and the reward model served by workers."""

from __future__ import annotations

import math
import os
import time
from types import SimpleNamespace

import pytest

from roll_core.config.rlvr import RewardConfig
from roll_core.registry import Registration
from roll_core.rewards.dispatch import RewardDispatcher
from roll_core.rollout.rlvr.reward_scoring import RewardScoring, scored_in_workers

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER_OPTIONS = {"num_cpus": 0, "runtime_env": {"env_vars": {
    "PYTHONPATH": os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)}}}
ANSWERS = ["ab", "raise", "abcd", "hang", "unscorable", "a", "abc", "abcdef"]
EXPECTED = [(2.0, True, ""), (0.0, False, "error"), (4.0, True, ""), (0.0, False, "timeout"),
            (0.0, False, "custom_reason"), (1.0, True, ""), (3.0, True, ""), (6.0, True, "")]


def reg(name: str, target: str) -> Registration:
    return Registration("reward", name, target, plugin="tests")


def run_of(sections, rewards, strategies=None):
    return SimpleNamespace(config=SimpleNamespace(rewards=sections, seed=0), rewards=rewards,
                           reward_strategies=strategies or {}, plugins={})


def score_all(scoring, domain, answers):
    pending = [scoring.submit(domain, "p", a, "r", 0, {}) for a in answers]
    return [scoring.result(p) for p in pending]


def test_driver_scoring_keeps_order_and_counts_failures(monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    section = RewardConfig(score_timeout=2.0)
    dispatcher = RewardDispatcher({"d": section}, {"d": reg("behaving", "roll_reward_testfns:behaving")})
    scoring = RewardScoring({"d": section}, dispatcher, threads=8)
    started = time.perf_counter()
    assert score_all(scoring, "d", ANSWERS) == EXPECTED
    # 5 samples of 0.5 s on 8 threads run at once; the hung one costs its 2 s timeout, not 60 s
    assert time.perf_counter() - started < 6.0
    scoring.shutdown()
    assert not scored_in_workers(section, dispatcher.domains["d"].fn)


@pytest.mark.usefixtures("ray_session")
def test_worker_groups_score_concurrently_in_order_and_survive_their_failures(kill_actor):
    sections = {"d": RewardConfig(world_size=2, infer_batch_size=2, score_timeout=2.0),
                "who": RewardConfig(world_size=2), "dies": RewardConfig(world_size=1, score_timeout=20.0)}
    rewards = {"d": reg("behaving", "roll_reward_testfns:behaving"), "who": reg("pid", "roll_reward_testfns:pid"),
               "dies": reg("behaving", "roll_reward_testfns:behaving")}
    assert all(scored_in_workers(s, None) for s in sections.values())
    scoring = RewardScoring.start(run_of(sections, rewards), worker_options=WORKER_OPTIONS)
    try:
        assert [g.world_size for g in scoring.groups.values()] == [2, 2, 1]
        assert scoring.describe()[0] == "rewards.d: scored in 2 reward workers"
        started = time.perf_counter()
        assert score_all(scoring, "d", ANSWERS) == EXPECTED
        # 5 samples x 0.5 s on 2 workers x 2 threads: ~1 s of sleeping, in parallel (serial: 2.5 s + 2 s timeout)
        assert time.perf_counter() - started < 4.0
        pids = {r for r, _, _ in score_all(scoring, "who", ["x"] * 8)}
        assert len(pids) == 2 and os.getpid() not in pids  # two worker processes, not the driver
        assert score_all(scoring, "dies", ["die", "a"]) == [(0.0, False, "worker_lost")] * 2
        assert score_all(scoring, "d", ["abc"]) == [(3.0, True, "")]  # the other domains go on
        # the lost rank is replaced at a sync (here: polled) and scores again once its actor is up
        assert list(scoring.groups["dies"].lost) == [0]
        deadline = time.monotonic() + 120
        while not (joined := scoring.replace_lost()):
            assert time.monotonic() < deadline, "the replacement reward worker never came up"
            time.sleep(0.2)
        assert joined == [("rewards.dies", "rank 0")] and scoring.groups["dies"].lost == {}
        assert score_all(scoring, "dies", ["a"]) == [(1.0, True, "")]
        # one rank of two dies: the samples it held cost worker_lost, later ones all go to the survivor
        who = scoring.groups["who"]
        kill_actor(who.workers[0], "ready")  # returns once Ray says it is dead
        first = score_all(scoring, "who", ["x"] * 4)
        assert {f for _, _, f in first} <= {"", "worker_lost"} and list(who.lost) == [0]
        after = score_all(scoring, "who", ["x"] * 4)
        assert len({r for r, _, _ in after}) == 1 and all(f == "" for _, _, f in after)
    finally:
        scoring.shutdown()


@pytest.mark.usefixtures("ray_session")
def test_judge_model_and_reward_model_run_in_reward_workers():
    from roll_core.plugins import get_registry

    registry = get_registry()
    judge = RewardConfig(judge_model_type="inference", judge_prompt="yes_no", model_args={"model_name_or_path":
                         "roll-tiny"}, generating_args={"max_new_tokens": 6, "do_sample": False},
                         strategy_args={"strategy_name": "hf_infer", "strategy_config": {"num_threads": 1}})
    rm = RewardConfig(model_args={"model_name_or_path": "roll-tiny-rm"})
    sections = {"judge": judge, "rm": rm}
    rewards = {"judge": registry.get("reward", "llm_judge"), "rm": registry.get("reward", "reward_model")}
    assert scored_in_workers(judge, rewards["judge"].load()) and scored_in_workers(rm, rewards["rm"].load())
    run = run_of(sections, rewards, {"judge": registry.get("strategy", "hf_infer")})
    scoring = RewardScoring.start(run, worker_options=WORKER_OPTIONS)
    try:
        # the tiny random judge says no verdict: 0, counted
        assert score_all(scoring, "judge", ["7", "8"]) == [(0.0, False, "judge_unparsable")] * 2
        scores = score_all(scoring, "rm", ["seven", "eight", "seven"])
        assert all(f == "" for _, _, f in scores) and all(math.isfinite(s) for s, _, _ in scores)
        assert scores[0][0] == scores[2][0] != scores[1][0]  # a function of the text
    finally:
        scoring.shutdown()
