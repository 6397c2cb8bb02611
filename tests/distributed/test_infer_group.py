"""InferGroup around weight syncs and at shutdown: the real GenerateScheduler actor in front of fake
inference workers (Ray actors that count the scheduler's pings), no model."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.ray


def fake_group(ray, tmp_path, n: int = 2):
    """An InferGroup of ``n`` fake workers; a worker's ``shutdown`` leaves ``tmp_path/stopped-<rank>``."""
    from roll_core.distributed.replacement import Replacements
    from roll_core.workers.infer_group import InferGroup, start_generate_scheduler
    from roll_core.workers.weight_handoff import Locality

    class FakeInfer:  # defined here: Ray ships it by value
        def __init__(self, rank):
            self.rank, self.pings, self.version = rank, 0, 0

        def policy_version(self):  # what the scheduler's check_workers calls on every live worker
            self.pings += 1
            return self.version

        def pinged(self):
            return self.pings

        def locality(self):
            return Locality(f"node-{self.rank}")

        def load_weights(self, weights, version):
            self.version = version

        def abort(self, request_ids=None):
            pass

        def reload(self):
            pass

        def offload(self):
            pass

        def shutdown(self):
            (tmp_path / f"stopped-{self.rank}").touch()

    remote = ray.remote(FakeInfer).options(num_cpus=0, max_concurrency=2)
    group = InferGroup.__new__(InferGroup)  # the group's state without a Run (no strategy, no model)
    group.placed, group._localities = [], []
    group.workers = [remote.remote(rank) for rank in range(n)]
    group.replacements = Replacements("actor_infer", lambda options: None, options=[])  # no room: none started
    group._joining = group._sync_lost = None
    group.scheduler = start_generate_scheduler(group.workers, max_batch_size=2)
    return group


def sync(group, version: int) -> list[str]:
    """What the pipeline's sync_weights asks of the group (a colocated run's reload included); the
    nodes of the engines the sync planned for."""
    group.prepare_replacements()
    targets = group.localities()
    group.reload()
    group.update_weights({"w": version}, version)
    return [t.node_id for t in targets]


def test_a_weight_sync_pings_the_workers_once_and_a_death_between_syncs_is_found(ray_session, kill_actor, tmp_path):
    ray = ray_session
    group = fake_group(ray, tmp_path)
    try:
        assert sync(group, 1) == ["node-0", "node-1"]
        # one round of pings for the whole sync: prepare_replacements asks, localities and reload reuse it
        assert ray.get([w.pinged.remote() for w in group.workers]) == [1, 1]
        kill_actor(group.workers[1], "pinged")  # between syncs
        assert sync(group, 2) == ["node-0"]  # the next sync's one ask finds it: not planned for, not loaded
        assert ray.get(group.workers[0].pinged.remote()) == 2
        assert ray.get(group.workers[0].policy_version.remote()) == 2  # (a ping too: 3)
        stats = ray.get(group.scheduler.stats.remote())
        assert (stats["workers_lost"], stats["workers"], stats["version"]) == (1, 1, 2)
        group.offload()  # outside a sync the group asks again
        assert ray.get(group.workers[0].pinged.remote()) == 4
    finally:
        group.shutdown()


def test_shutdown_closes_the_scheduler_and_stops_the_live_workers_before_killing_them(ray_session, kill_actor,
                                                                                      actor_gone, tmp_path):
    ray = ray_session
    group = fake_group(ray, tmp_path)
    kill_actor(group.workers[1], "pinged")
    assert group.lost_workers().keys() == {1}
    scheduler, workers = group.scheduler, list(group.workers)
    started = time.monotonic()
    group.shutdown()
    assert time.monotonic() - started < 10  # the lost worker is not waited for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped-0"]  # stopped while alive, then killed
    assert actor_gone(scheduler.stats.remote) and actor_gone(workers[0].pinged.remote)
