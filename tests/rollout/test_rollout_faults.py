"""A rollout cannot hang (issue 19): hung env calls are abandoned without using up threads, envs that
always fail and batches that stop progressing end in a clear error, garbage never reaches a batch."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from roll_core.config import bind_env
from roll_core.rollout import EnvSpec, RolloutScheduler, RolloutSpec
from roll_core.rollout.engine.env_threads import EnvCallTimeout, EnvThreads
from roll_core.rollout.engine.scheduler import RolloutError, RolloutTimeout
from roll_core.rollout.engine.spec import partition_groups

FAULTS = "roll_core.testing.faults"


def faulty_spec(*, groups=4, group_size=2, per_worker=8, turn_template=None, **env_config):
    from roll_core.plugins import PluginManager

    registry = PluginManager(extra_modules=[FAULTS]).registry
    changes = {k: env_config.pop(k) for k in list(env_config) if k in RolloutSpec.__dataclass_fields__}
    env = EnvSpec("Faulty", bind_env("fault_injection", env_config, registry=registry), turn_template=turn_template)
    values = dict(mode="train", seed=5, num_env_groups=groups, group_size=group_size, max_env_num_per_worker=per_worker,
                  group_tags=partition_groups(groups, ["Faulty"], None), envs={"Faulty": env},
                  sequence_length=2048, policy="random", step_timeout_s=0.2)
    values.update(changes)
    return RolloutSpec(**values)


def test_abandoned_calls_give_their_thread_back():
    """Without replacement, two hung calls would leave a 2-thread pool unable to run anything."""
    release = threading.Event()

    async def scenario():
        threads = EnvThreads(2)
        for _ in range(5):
            with pytest.raises(EnvCallTimeout):
                await threads.call(release.wait, 0.05)
        started = time.perf_counter()
        assert await threads.call(lambda: 42, 1.0) == 42
        assert time.perf_counter() - started < 0.5
        assert threads.abandoned == 5
        return threads

    before = threading.active_count()
    threads = asyncio.run(scenario())
    release.set()  # the hung calls return: their threads leave the pool
    threads.shutdown()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


@pytest.mark.ray
def test_env_hanging_more_often_than_it_has_threads_still_fills_batches(ray_session, tokenizer):
    # one env manager with 4 envs: a pool of 4 threads, which the old pool lost after 4 hangs
    spec = faulty_spec(groups=2, group_size=2, per_worker=4, hang_prob=0.3, max_target=2)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        for _ in range(3):
            batch = scheduler.get_batch(4, timeout=90)
            assert len(batch) == 4
        abandoned = scheduler.worker_stats()[0]["abandoned_env_calls"]
    assert abandoned > 4  # more hangs than threads, and the batches still came


@pytest.mark.ray
def test_env_that_always_fails_stops_the_rollout_with_its_error(ray_session, tokenizer):
    spec = faulty_spec(groups=2, group_size=1, raise_prob=1.0, max_consecutive_env_failures=3)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        started = time.perf_counter()
        with pytest.raises(RolloutError) as info:
            scheduler.get_batch(2, timeout=120)
    message = str(info.value)
    assert time.perf_counter() - started < 30
    assert "env tag 'Faulty'" in message and "failed 3 times in a row" in message
    assert "InjectedFault: injected fault in step" in message
    assert "train_env_manager.max_consecutive_env_failures (now 3)" in message


@pytest.mark.ray
def test_batch_without_progress_stops_with_the_last_failure(ray_session, tokenizer):
    # no step timeout: every call hangs and nothing ever completes, so only the stall bound can end it
    spec = faulty_spec(groups=2, group_size=1, hang_prob=1.0, fault_in="reset", step_timeout_s=None,
                       stall_timeout_s=2.0)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        started = time.perf_counter()
        with pytest.raises(RolloutError, match=r"the train rollout made no progress for \d+ s.*"
                                               r"train_env_manager\.stall_timeout_s \(now 2\)"):
            scheduler.get_batch(2, timeout=120)
        assert time.perf_counter() - started < 20


@pytest.mark.ray
def test_unfillable_agent_template_stops_at_once(ray_session, tokenizer):
    spec = faulty_spec(groups=2, group_size=1, turn_template="Turn {turn_idx}: {observation}")
    with RolloutScheduler(spec, tokenizer) as scheduler:
        with pytest.raises(RolloutError, match=r"cannot play env tag 'Faulty'.*agent_template.*KeyError"):
            scheduler.get_batch(2, timeout=60)


@pytest.mark.ray
def test_rpc_timeout_bounds_the_wait_for_a_batch(ray_session, tokenizer):
    # slow but progressing (no stall): only the batch bound applies, and the message names rpc_timeout
    spec = faulty_spec(groups=2, group_size=1, hang_prob=1.0, hang_s=0.4, max_target=3, max_steps=6,
                       step_timeout_s=None)
    with RolloutScheduler(spec, tokenizer, batch_timeout_s=1.0) as scheduler:
        with pytest.raises(RolloutTimeout, match=r"timed out after 1\.\d s; raise rpc_timeout \(now 1\)"):
            scheduler.get_batch(2)


@pytest.mark.ray
def test_garbage_results_are_dropped_and_never_reach_a_batch(ray_session, tokenizer):
    spec = faulty_spec(groups=2, group_size=2, garbage_prob=0.25, fault_in="both")
    with RolloutScheduler(spec, tokenizer) as scheduler:
        batch = scheduler.get_batch(4, timeout=90)
    assert len(batch) == 4 and batch.metrics["rollout/dropped_trajectories/env_error"] > 0
    rewards = [turn.reward for traj in batch.trajectories for turn in traj.turns]
    assert all(r == r and isinstance(r, float) for r in rewards)  # no NaN
    assert all(isinstance(turn.observation, str) for traj in batch.trajectories for turn in traj.turns)
