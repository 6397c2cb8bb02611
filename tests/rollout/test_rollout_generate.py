"""GenerateScheduler: dynamic batching, sticky routing, pause/resume, abort and weight sync (no Ray)."""

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
