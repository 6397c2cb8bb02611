"""The group queue's admission and bookkeeping, driven directly (no Ray, no envs)."""

from __future__ import annotations

import asyncio

from roll_core.chat.trajectory import Trajectory, Turn
from roll_core.rollout.engine.group_queue import GroupQueue
from roll_core.rollout.engine.messages import GroupResult, Release, Report


def fake_group(ticket, size=2, version=0):
    turn = Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], version=version, finish_reason="stop",
                observation="o")
    trajs = [Trajectory(traj_id=f"{ticket.key}-{m}", traj_group_id=str(ticket.key), group_id=ticket.group_id,
                        episode_id=ticket.episode_id, member=m, tag="T", seed=ticket.seed, mode="train", turns=[turn],
                        incremental=True, terminated=True, truncated=False, end_reason="terminated",
                        episode_reward=0.0, metrics={}, messages=[]) for m in range(size)]
    return GroupResult(ticket, "T", trajs)


def make_queue(mode="train", groups=4, **kw):
    return GroupQueue(mode=mode, num_groups=groups, group_size=2, seed_fn=lambda g, e: 1000 * g + e,
                      watchdog_interval_s=0, **kw)


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_sync_admission_is_exact_and_serves_oldest_first():
    async def main():
        q = make_queue()
        q.attach(0, "w0")
        acquires = [asyncio.ensure_future(q.acquire(0, "w0", g)) for g in range(4)]
        await settle()
        assert not any(a.done() for a in acquires)  # nothing runs before a get_batch
        batch = asyncio.ensure_future(q.get_batch(2))
        await settle()
        admitted = [a for a in acquires if a.done()]
        assert len(admitted) == 2 and len(q.outstanding) == 2  # exactly the groups the batch needs
        tickets = [a.result() for a in admitted]
        assert all(t.seed == 1000 * t.group_id + t.episode_id for t in tickets)
        for t in reversed(tickets):  # the newer ticket finishes first
            q.report(0, "w0", Report(groups=[fake_group(t)]))
        result = await batch
        assert [g.ticket.serial for g in result["groups"]] == sorted(t.serial for t in tickets)
        assert not q.outstanding and not q.ready
        await settle()
        assert sum(a.done() for a in acquires) == 2  # loops wait again until the next get_batch
        q.close()
    asyncio.run(main())


def test_restarted_worker_gets_its_episodes_back_with_the_same_seed():
    async def main():
        q = make_queue(groups=2)
        q.attach(0, "old")
        first = asyncio.ensure_future(q.acquire(0, "old", 0))
        batch = asyncio.ensure_future(q.get_batch(1))
        ticket = await first
        q.attach(0, "new")  # the actor crashed and came back
        assert q.drops["worker_restarted"] == 2 and not q.outstanding
        again = await q.acquire(0, "new", 0)
        assert (again.group_id, again.episode_id, again.seed) == (ticket.group_id, ticket.episode_id, ticket.seed)
        q.report(0, "new", Report(groups=[fake_group(again)]))
        q.report(0, "old", Report(groups=[fake_group(ticket)]))  # a late copy is not served twice
        result = await batch
        assert len(result["groups"]) == 1 and result["drops"]["duplicate"] == 2
        q.close()
    asyncio.run(main())


def test_released_episode_lets_another_group_fill_the_batch():
    async def main():
        q = make_queue(groups=2)
        q.attach(0, "w")
        a0 = asyncio.ensure_future(q.acquire(0, "w", 0))
        a1 = asyncio.ensure_future(q.acquire(0, "w", 1))
        batch = asyncio.ensure_future(q.get_batch(1))
        await settle()
        t0 = a0.result()
        assert not a1.done()
        q.report(0, "w", Report(releases=[Release(t0, "env_error")], drops={"env_error": 8}))
        t1 = await a1  # the given-up episode freed its place
        q.report(0, "w", Report(groups=[fake_group(t1)]))
        result = await batch
        assert result["groups"][0].ticket.group_id == 1 and result["drops"]["env_error"] == 8
        q.close()
    asyncio.run(main())


def test_stale_groups_are_dropped_in_sync_mode():
    async def main():
        q = make_queue(groups=1)
        q.attach(0, "w")
        acquire = asyncio.ensure_future(q.acquire(0, "w", 0))
        batch = asyncio.ensure_future(q.get_batch(1, timeout=0.3))
        ticket = await acquire
        q.set_version(1)  # weights changed before the group arrived
        q.report(0, "w", Report(groups=[fake_group(ticket, version=0)]))
        result = await batch
        assert result["groups"] is None and q.drops["stale"] == 2
        q.close()
    asyncio.run(main())


def test_validation_passes_replay_the_same_instances():
    async def main():
        q = make_queue(mode="val", groups=3)
        q.attach(0, "w")
        served = []
        for _ in range(2):
            batch = asyncio.ensure_future(q.get_batch(5))
            tickets = []
            while len(tickets) < 5:
                pending = [asyncio.ensure_future(q.acquire(0, "w", g)) for g in range(3)]
                await settle()
                for p in pending:
                    if p.done():
                        tickets.append(p.result())
                    else:
                        p.cancel()
                for t in tickets[-3:]:
                    if t.key in q.outstanding:
                        q.report(0, "w", Report(groups=[fake_group(t)]))
            result = await batch
            served.append([(g.ticket.group_id, g.ticket.episode_id, g.ticket.seed) for g in result["groups"]])
        assert served[0] == served[1]
        assert [(g, e) for g, e, _ in served[0]] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]
        q.close()
    asyncio.run(main())


def test_state_dict_resumes_the_same_episode_seeds():
    async def one_batch(q):
        """Both groups ask; the one the round-robin plan admits plays."""
        acquires = [asyncio.ensure_future(q.acquire(0, "w", g)) for g in (0, 1)]
        batch = asyncio.ensure_future(q.get_batch(1))
        await settle()
        (ticket,) = [a.result() for a in acquires if a.done()]
        q.report(0, "w", Report(groups=[fake_group(ticket)]))
        await batch
        for a in acquires:
            a.cancel()
        return ticket

    async def main():
        q = make_queue(groups=2)
        q.attach(0, "w")
        await one_batch(q)
        state = q.state_dict()
        expected = await one_batch(q)
        resumed = make_queue(groups=2)
        resumed.attach(0, "w")
        resumed.load_state_dict(state)
        ticket = await one_batch(resumed)
        assert (ticket.group_id, ticket.episode_id, ticket.seed) == \
            (expected.group_id, expected.episode_id, expected.seed) == (1, 0, 1000)
    asyncio.run(main())


def test_a_group_crosses_the_queue_as_one_blob_and_unpacks_on_first_use():
    import pickle

    from roll_core.rollout.engine.messages import Ticket

    group = fake_group(Ticket(group_id=3, episode_id=1, seed=7, version=2), size=3, version=2)
    at_queue = pickle.loads(pickle.dumps(group))
    assert (at_queue.size, at_queue.min_version, at_queue.max_version) == (3, 2, 2)
    assert at_queue._trajectories is None  # the queue routes it without unpickling its trajectories
    at_driver = pickle.loads(pickle.dumps(at_queue))  # forwarded as the same blob
    assert [t.traj_id for t in at_driver.trajectories] == [t.traj_id for t in group.trajectories]
    assert at_driver.trajectories[2].turns[0].response_ids == [2] and at_driver.ticket == group.ticket
