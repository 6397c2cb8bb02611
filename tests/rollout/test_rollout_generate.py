"""GenerateScheduler: dynamic batching, sticky routing, pause/resume, abort, weight sync, lock-step rounds (no Ray)."""

from __future__ import annotations

import asyncio

from roll_core.strategies.base import GenerationOutput, GenerationRequest, SamplingParams
from roll_core.workers.generate_scheduler import GenerateScheduler


class _Method:
    """Looks like a Ray actor method: ``.remote(...)`` returns an awaitable."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return asyncio.ensure_future(self.fn(*args))


class FakeWorker:
    """An inference worker that answers after ``delay`` s; abort makes running batches return "abort"."""

    def __init__(self, name, delay=0.05):
        self.name, self.delay = name, delay
        self.version = 0
        self.batches: list[list[str]] = []
        self.aborted = False
        self.generate = _Method(self._generate)
        self.abort = _Method(self._abort)
        self.load_weights = _Method(self._load_weights)

    async def _generate(self, requests):
        self.batches.append([r.request_id for r in requests])
        self.aborted = False
        await asyncio.sleep(self.delay)
        reason = "abort" if self.aborted else "stop"
        return [GenerationOutput(r.request_id, [1, 2], [-0.1, -0.2], reason, self.version) for r in requests]

    async def _abort(self, ids):
        self.aborted = True

    async def _load_weights(self, weights, version):
        self.version = version


def request(i, key=None):
    return GenerationRequest(f"r{i}", [1, 2, 3], SamplingParams(max_new_tokens=4), route_key=key)


def test_batches_are_bounded_and_routes_are_sticky():
    async def main():
        workers = [FakeWorker("a"), FakeWorker("b")]
        gen = GenerateScheduler(workers, max_batch_size=4, max_wait_s=0.05)
        first = await asyncio.gather(*(gen.generate(request(i, f"env{i % 6}")) for i in range(12)))
        assert [o.request_id for o in first] == [f"r{i}" for i in range(12)]
        assert all(len(b) <= 4 for w in workers for b in w.batches)
        owner = {rid: w.name for w in workers for b in w.batches for rid in b}
        placement = {f"env{i % 6}": owner[f"r{i}"] for i in range(12)}
        second = await asyncio.gather(*(gen.generate(request(100 + i, f"env{i}")) for i in range(6)))
        owner = {rid: w.name for w in workers for b in w.batches for rid in b}
        assert all(owner[o.request_id] == placement[f"env{i}"] for i, o in enumerate(second))
        assert {len(gen.routes), *gen.route_load} == {6, 3}  # keys spread evenly over the workers
        assert gen.stats()["mean_batch_size"] > 1
    asyncio.run(main())


def test_pause_holds_dispatch_and_resume_releases_it():
    async def main():
        worker = FakeWorker("a", delay=0.01)
        gen = GenerateScheduler([worker], max_batch_size=8, max_wait_s=0.0)
        gen.pause()
        pending = asyncio.ensure_future(gen.generate(request(1)))
        await asyncio.sleep(0.1)
        assert not pending.done() and worker.batches == []
        gen.resume()
        assert (await pending).finish_reason == "stop"
    asyncio.run(main())


def test_weight_update_aborts_and_regenerates_with_the_new_version():
    """``partial_rollout: false``; keep-and-continue is tested on hf_infer (tests/strategies/test_partial_rollout.py)."""
    async def main():
        worker = FakeWorker("a", delay=0.3)
        gen = GenerateScheduler([worker], max_batch_size=8, max_wait_s=0.0, partial_rollout=False)
        pending = [asyncio.ensure_future(gen.generate(request(i))) for i in range(3)]
        await asyncio.sleep(0.05)  # the batch is running on version 0
        assert await gen.update_weights({"w": 1}, 5) == 5
        outputs = await asyncio.gather(*pending)
        assert {o.finish_reason for o in outputs} == {"stop"}  # env loops never see the abort
        assert {o.policy_version for o in outputs} == {5}
        assert gen.stats()["requeued_aborts"] == 3 and len(worker.batches) == 2
    asyncio.run(main())


def test_lockstep_rounds_do_not_depend_on_timing_or_the_number_of_workers(monkeypatch):
    """Six env loops, announced with expect(6), play 3, 2 and 1 turns; their requests arrive in a
    random order at random times. Every round holds the loops still playing, sorted by (prompt
    length, id) and cut into chunks of max_batch_size (3), dealt to the workers in turn: the same
    chunks with one worker or two, in every run."""
    import random

    def play(gen, loop, turns, rng):
        async def episode():
            for turn in range(turns):
                await asyncio.sleep(rng.random() * 0.02)  # the env step: its duration varies
                prompt = [1] * (10 - loop)  # a longer prompt for a lower loop number
                await gen.generate(GenerationRequest(f"l{loop}-t{turn}", prompt, SamplingParams(), route_key=f"l{loop}"))
            gen.leave()
        return episode()

    async def run(num_workers, seed):
        rng = random.Random(seed)
        workers = [FakeWorker(str(w), delay=0.005) for w in range(num_workers)]
        gen = GenerateScheduler(workers, max_batch_size=3, max_wait_s=0.0)
        gen.expect(6)
        await asyncio.gather(*(play(gen, loop, [3, 3, 2, 2, 1, 1][loop], rng) for loop in range(6)))
        assert gen.stats()["rounds"] == 3 and gen.players == 0
        return sorted(b for w in workers for b in w.batches), [len(w.batches) for w in workers]

    expected = sorted([["l5-t0", "l4-t0", "l3-t0"], ["l2-t0", "l1-t0", "l0-t0"],  # round 0: 6 loops, 2 chunks
                       ["l3-t1", "l2-t1", "l1-t1"], ["l0-t1"],  # round 1: 4 loops
                       ["l1-t2", "l0-t2"]])  # round 2: 2 loops
    for seed in range(3):
        assert asyncio.run(run(1, seed)) == (expected, [5])
        assert asyncio.run(run(2, seed)) == (expected, [3, 2])  # chunks 0 and 2 of a round on worker 0


def test_a_lockstep_round_missing_a_loop_is_generated_after_the_timeout(monkeypatch):
    import roll_core.workers.generate_scheduler as module

    monkeypatch.setattr(module, "LOCKSTEP_TIMEOUT_S", 0.2)

    async def main():
        worker = FakeWorker("a", delay=0.0)
        gen = GenerateScheduler([worker], max_batch_size=8, max_wait_s=0.0)
        gen.expect(3)  # one of the three announced loops never comes (a fault)
        outputs = await asyncio.gather(*(gen.generate(request(i)) for i in range(2)))
        assert [o.request_id for o in outputs] == ["r0", "r1"] and worker.batches == [["r0", "r1"]]
        assert gen.stats()["lockstep_timeouts"] == 1
        gen.expect(1)  # the next batch starts afresh
        assert (await gen.generate(request(5))).request_id == "r5" and gen.stats()["lockstep_timeouts"] == 1
        return gen.activity()["lockstep_timeouts"]  # what a train step reads
    assert asyncio.run(main()) == 1.0


def test_a_step_with_a_lockstep_timeout_says_the_run_stops_being_reproducible():
    from roll_core.pipeline.tracking import LOCKSTEP_TIMEOUT_NOTE, MetricsTracker

    tracker = MetricsTracker(None)
    line = tracker.progress_line(3, 10, {"actor/pg_loss": 0.1, "rollout/lockstep_timeouts": 1.0}, {"step": 1.0})
    assert line.endswith(LOCKSTEP_TIMEOUT_NOTE + " | time 1.0s") and "no longer repeats to the digit" in line
    quiet = tracker.progress_line(4, 10, {"actor/pg_loss": 0.1, "rollout/lockstep_timeouts": 0.0}, {"step": 1.0})
    assert LOCKSTEP_TIMEOUT_NOTE not in quiet


def test_requests_sent_together_are_one_round():
    async def main():
        workers = [FakeWorker("a", delay=0.0), FakeWorker("b", delay=0.0)]
        gen = GenerateScheduler(workers, max_batch_size=2, max_wait_s=0.0)
        requests = [GenerationRequest(f"r{i}", [1] * (i % 3 + 1), SamplingParams()) for i in range(5)]
        outputs = await gen.generate_all(requests)
        assert [o.request_id for o in outputs] == [f"r{i}" for i in range(5)]
        # sorted by (prompt length, id): r0 r3 | r1 r4 | r2, chunks dealt to a, b, a
        assert workers[0].batches == [["r0", "r3"], ["r2"]] and workers[1].batches == [["r1", "r4"]]
    asyncio.run(main())


def test_a_streamed_round_is_the_same_round_its_chunks_yielded_as_each_finishes():
    async def main():
        worker = FakeWorker("a", delay=0.2)
        gen = GenerateScheduler([worker], max_batch_size=2, max_wait_s=0.0)
        requests = [GenerationRequest(f"r{i}", [1] * (i % 3 + 1), SamplingParams()) for i in range(5)]
        arrived = []
        async for done in gen.generate_stream(requests):
            for position, out in done:
                assert out.request_id == f"r{position}"
                arrived.append((position, len(worker.batches)))
        # the generate_all round's chunks (sorted by prompt length, id), run in turn on one worker; each
        # chunk's outputs come out while the next chunk is generating (the worker has started it)
        assert worker.batches == [["r0", "r3"], ["r1", "r4"], ["r2"]]
        assert arrived == [(0, 2), (3, 2), (1, 3), (4, 3), (2, 3)]
    asyncio.run(main())


def test_reproducible_generation_is_on_for_synchronous_cpu_runs_unless_set():
    from types import SimpleNamespace

    from roll_core.rollout.engine.spec_from_run import reproducible_generation

    def config(ratio, setting):
        return SimpleNamespace(async_generation_ratio=ratio, reproducible_generation=setting)

    assert reproducible_generation(config(0, None))  # no Ray cluster with GPUs here: on
    assert not reproducible_generation(config(0, False))
    assert reproducible_generation(config(0, True))
    assert not reproducible_generation(config(1, True))  # async: timing decides which weights generate


class DyingWorker(FakeWorker):
    """A worker whose actor dies after ``answers`` batches: every later call raises Ray's ActorDiedError."""

    def __init__(self, name, answers, delay=0.05):
        super().__init__(name, delay)
        self.answers = answers
        self.load_weights = _Method(self._load_or_die)
        self.policy_version = _Method(self._version_or_die)

    async def _generate(self, requests):
        from ray.exceptions import ActorDiedError

        if self.answers <= 0:
            self.batches.append([r.request_id for r in requests])
            await asyncio.sleep(self.delay)
            raise ActorDiedError()
        self.answers -= 1
        return await super()._generate(requests)

    async def _load_or_die(self, weights, version):
        from ray.exceptions import ActorDiedError

        raise ActorDiedError()

    async def _version_or_die(self):
        from ray.exceptions import ActorDiedError

        raise ActorDiedError()


def test_a_dead_worker_is_failed_over_its_routes_and_requests_move_to_the_survivor():
    async def main():
        dying, survivor = DyingWorker("a", answers=1), FakeWorker("b")
        survivor.policy_version = _Method(lambda: asyncio.sleep(0, 0))
        gen = GenerateScheduler([dying, survivor], max_batch_size=4, max_wait_s=0.05)
        first = await asyncio.gather(*(gen.generate(request(i, f"env{i % 4}")) for i in range(4)))
        assert {len(b) for b in dying.batches} == {2} and gen.route_load == [2, 2]  # env0, env2 on "a"
        # "a" dies with its next batch: both requests are requeued to "b", the env loops see outputs
        second = await asyncio.gather(*(gen.generate(request(10 + i, f"env{i}")) for i in range(4)))
        assert [o.finish_reason for o in first + second] == ["stop"] * 8
        assert dying.batches[-1] == ["r10", "r12"] and sorted(sum(survivor.batches[-2:], [])) == [
            "r10", "r11", "r12", "r13"]
        stats = gen.stats()
        assert (stats["workers_lost"], stats["requeued_lost"], stats["workers"]) == (1, 2, 1)
        assert set(gen.routes.values()) == {1} and gen.lost_workers() == {0: "The actor died unexpectedly "
                                                                          "before finishing this task."}
        # the weight sync goes on with the survivor; the lost worker is not called again
        assert await gen.update_weights({"w": 1}, 3) == 3 and survivor.version == 3
        assert (await gen.generate(request(20, "env0"))).policy_version == 3
    asyncio.run(main())


def test_when_no_worker_is_left_requests_fail_with_inference_lost_not_a_generation_error():
    import pytest

    from roll_core.errors import InferenceLost

    async def main():
        gen = GenerateScheduler([DyingWorker("a", answers=0)], max_batch_size=4, max_wait_s=0.0)
        with pytest.raises(InferenceLost, match=r"every actor_infer worker is gone: rank 0 \(The actor died"):
            await gen.generate(request(1, "env0"))
        with pytest.raises(InferenceLost):  # later requests fail at once
            await gen.generate(request(2, "env1"))
        assert gen.stats()["requeued_lost"] == 1 and await gen.check_workers() == {0: gen.lost[0]}
    asyncio.run(main())


def test_a_worker_dying_in_a_lockstep_round_fails_over_to_the_survivor():
    """Lock-step rounds deal chunks to the live workers only; a chunk whose worker died goes to the survivor."""
    async def main():
        dying, survivor = DyingWorker("a", answers=0), FakeWorker("b")
        gen = GenerateScheduler([dying, survivor], max_batch_size=2, max_wait_s=0.0)
        gen.expect(4)
        outputs = await asyncio.gather(*(gen.generate(request(i, f"env{i}")) for i in range(4)))
        assert [o.request_id for o in outputs] == ["r0", "r1", "r2", "r3"]
        assert sorted(sum(survivor.batches, [])) == ["r0", "r1", "r2", "r3"]
        assert (gen.stats()["workers_lost"], gen.stats()["workers"]) == (1, 1)
        gen.expect(2)  # the next round goes to the survivor alone
        outputs = await asyncio.gather(*(gen.generate(request(10 + i, f"env{i}")) for i in range(2)))
        assert survivor.batches[-1] == ["r10", "r11"] and len(dying.batches) == 1
    asyncio.run(main())


def test_a_replacement_loads_the_sync_weights_rejoins_and_serves_new_and_moved_routes():
    async def main():
        dying, survivor, replacement = DyingWorker("a", answers=0), FakeWorker("b"), FakeWorker("c")
        gen = GenerateScheduler([dying, survivor], max_batch_size=4, max_wait_s=0.05)
        await asyncio.gather(*(gen.generate(request(i, f"env{i}")) for i in range(4)))
        assert gen.lost_workers().keys() == {0} and set(gen.routes.values()) == {1}
        # a joining worker that is not lost (index 1) is ignored; the replacement of 0 loads version 2
        assert await gen.update_weights({"w": 1}, 2, joining={0: replacement, 1: FakeWorker("x")}) == 2
        assert replacement.version == 2 and gen.lost_workers() == {} and gen.workers[1] is survivor
        stats = gen.stats()
        assert (stats["workers"], stats["workers_rejoined"], stats["routes"]) == (2, 1, 0)
        # routes are dealt afresh: the four envs split over both workers, each answer of version 2
        outputs = await asyncio.gather(*(gen.generate(request(10 + i, f"env{i}")) for i in range(4)))
        assert {o.policy_version for o in outputs} == {2} and gen.route_load == [2, 2]
        assert sorted(sum(replacement.batches, [])) == ["r10", "r12"] and gen.stats()["served"][0] == 2
        gen.expect(4)  # lock-step rounds deal chunks to it too (one chunk of 4: the first live worker)
        await asyncio.gather(*(gen.generate(request(20 + i, f"env{i}")) for i in range(4)))
        assert replacement.batches[-1] == ["r20", "r21", "r22", "r23"] and gen.stats()["served"] == [6, 6]
    asyncio.run(main())


def test_a_closed_scheduler_reports_no_loss_when_its_workers_are_killed(caplog):
    """A run's end: InferGroup.shutdown closes the scheduler, then kills the workers (ray.kill is
    asynchronous, so a batch may still be on a worker as it dies). That is no loss: nothing is logged
    or counted, and the request still waiting fails with SchedulerClosed. An open scheduler seeing the
    same death reports it and fails over (here to no one: InferenceLost)."""
    import logging

    import pytest

    from roll_core.errors import InferenceLost
    from roll_core.workers.generate_scheduler import SchedulerClosed

    async def a_worker_dies_under_a_batch(close):
        worker = DyingWorker("a", answers=0, delay=0.05)  # its batch fails as its actor is killed
        gen = GenerateScheduler([worker], max_batch_size=4, max_wait_s=0.0)
        waiting = asyncio.ensure_future(gen.generate(request(1, "env0")))
        await asyncio.sleep(0.01)
        assert worker.batches == [["r1"]]  # on the worker
        if close:
            assert await gen.close() == {}
        with pytest.raises(SchedulerClosed if close else InferenceLost):
            await waiting
        checked = await gen.check_workers()  # a closed scheduler pings no one (its workers are being killed)
        if close:
            with pytest.raises(SchedulerClosed, match="the run is shutting down"):
                await gen.generate(request(2, "env1"))
        return gen.stats(), checked

    with caplog.at_level(logging.WARNING, logger="roll.rollout"):
        stats, checked = asyncio.run(a_worker_dies_under_a_batch(close=True))
    assert (stats["workers_lost"], stats["requeued_lost"], stats["workers"], checked) == (0, 0, 1, {})
    assert not [r for r in caplog.records if "is gone" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="roll.rollout"):
        stats, checked = asyncio.run(a_worker_dies_under_a_batch(close=False))
    assert (stats["workers_lost"], stats["workers"]) == (1, 0) and list(checked) == [0]
    assert [r.getMessage() for r in caplog.records if "is gone" in r.getMessage()] == [
        "actor_infer rank 0 is gone (The actor died unexpectedly before finishing this task.); "
        "0 worker(s) go on"]
