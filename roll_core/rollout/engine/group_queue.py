"""The group queue: admits group-episodes, collects complete groups, serves batches.

It runs as one asyncio Ray actor per rollout (train, val). Env managers ``acquire`` a
:class:`Ticket` before a group starts an episode and ``report`` finished groups; the driver's
``get_batch`` waits here until enough complete groups exist and takes the oldest ones (lowest
admission serial). Because env managers only ever report complete groups, a batch can never hold
a partial group or mix episodes.

Robustness: every admitted episode is tracked with the worker that holds it. When a worker comes
back after a crash (``attach`` with a new incarnation token) or stops answering the watchdog's
ping, its episodes are given back and admitted again with the same seed, so a killed actor costs
only time. A delivery that arrives after its episode was given back is still accepted once.

``get_batch`` never waits forever: it returns an error instead of groups when an env manager
reports a fault no retry heals (``fatal``), or when ``stall_timeout`` seconds pass in which no env
call or generation of the rollout completed (env managers report their progress every few
seconds); both name the latest failure the env managers reported.

Dynamic sampling: filtered groups are released, and the queue admits fresh group-episodes in their
place, at most ``max_groups_per_step`` groups a batch. Reached before the batch is full, the batch
stops with the counts (``unfilled_batch: stop``) or (``fill``) no further group is admitted, the
groups in flight finish, and the batch is completed with the most recent filtered groups (newest
policy version, then latest episode: a sync run picks the same ones every time). The same when
``max_traj_per_env`` lets no group start another episode before the batch is full: ``stop`` stops
naming that setting, ``fill`` completes the batch once the groups in flight have finished.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, defaultdict, deque
from typing import Any

from ray.exceptions import ActorDiedError

from roll_core.rollout.dynamic_sampling import UNFILLED_BATCH, exhausted_message, max_groups
from roll_core.rollout.engine.admission import make_admission
from roll_core.rollout.engine.messages import GroupResult, Report, Ticket

logger = logging.getLogger("roll.rollout")


class GroupQueue:
    """See the module docstring; create with ``ray.remote(GroupQueue)``."""

    def __init__(self, *, mode: str, num_groups: int, group_size: int, seed_fn: Any,
                 async_generation_ratio: float = 0.0, version: int = 0, watchdog_interval_s: float = 5.0,
                 watchdog_timeout_s: float = 60.0, shared: dict[str, Any] | None = None,
                 max_episodes_per_group: int | None = None, group_filter: str | None = None,
                 max_groups_per_step: int | None = None, unfilled_batch: str = "stop"):
        """``group_filter``: the name of the filter env managers apply (None: groups are not filtered);
        ``max_groups_per_step``: groups one batch may consume, filtered ones included (None: the default
        of :func:`roll_core.rollout.dynamic_sampling.max_groups`); ``unfilled_batch``: what a batch does
        when they are consumed before it is full (:data:`~roll_core.rollout.dynamic_sampling.UNFILLED_BATCH`)."""
        self.mode = mode
        self.num_groups = num_groups
        self.group_size = group_size
        self.seed_fn = seed_fn  # (group_id, episode_id) -> env seed
        self.max_staleness = int(async_generation_ratio)
        self.admission = make_admission(mode, num_groups, async_generation_ratio, max_episodes_per_group)
        self.version = version
        self.pass_id = 0
        self.serial = 0
        self.paused = False
        self.closed = False
        self.ready: list[GroupResult] = []
        self.outstanding: dict[tuple[int, int, int], tuple[int, Ticket]] = {}  # key -> (worker, ticket)
        self.given_back: dict[tuple[int, int, int], Ticket] = {}
        self.waiters: OrderedDict[int, tuple[int, str, asyncio.Future]] = OrderedDict()
        self.tokens: dict[int, str] = {}
        self.drops: dict[str, int] = defaultdict(int)
        self.group_filter = group_filter
        self.max_groups_per_step = max_groups_per_step
        self.filtered: dict[str, int] = defaultdict(int)  # groups the filter dropped since the last batch
        self.unfilled = UNFILLED_BATCH[unfilled_batch]
        #: unfilled_batch: fill: the filtered groups themselves (since the last batch), to complete a batch with
        self.filtered_groups: list[GroupResult] = []
        self._batch_groups = 0  # groups the latest get_batch asked for: the bound's batch
        self.attaches: dict[int, int] = defaultdict(int)
        self.workers: list[Any] = []
        self._enough_at: float | None = None  # when the batch's count of groups had finished, filtered included
        self.last_progress = time.monotonic()  # when an env call, generation or group last completed
        self.last_failure: str | None = None
        self.fatal: str | None = None
        self._changed = asyncio.Event()
        self._batch_lock = asyncio.Lock()
        self._watchdog: asyncio.Task | None = None
        self.watchdog_interval_s = watchdog_interval_s
        self.watchdog_timeout_s = watchdog_timeout_s
        #: handed to env managers: ``tokenizer`` (``[ObjectRef]``) and ``generate_scheduler`` (a handle)
        self._shared = dict(shared or {})

    def shared(self) -> dict[str, Any]:
        return self._shared

    # -- env managers ---------------------------------------------------------------------
    def attach(self, worker: int, token: str) -> dict[str, Any]:
        """A worker (re)starts; episodes held by an earlier incarnation are admitted again."""
        previous = self.tokens.get(worker)
        self.tokens[worker] = token
        self.attaches[worker] += 1
        if previous is not None and previous != token:
            self._reclaim(worker, reason="worker_restarted")
        return {"paused": self.paused, "version": self.version}

    async def acquire(self, worker: int, token: str, group_id: int) -> Ticket | None:
        """Wait until ``group_id`` may start an episode; ``None`` when the rollout shuts down.

        A worker the watchdog took for dead but which is asking is alive: it is attached again.
        Only a newer incarnation of the same worker makes an older one's calls void.
        """
        self.tokens.setdefault(worker, token)
        if self.closed or self.tokens[worker] != token:
            return None
        future = asyncio.get_running_loop().create_future()
        old = self.waiters.pop(group_id, None)
        if old is not None and not old[2].done():
            old[2].set_result(None)
        self.waiters[group_id] = (worker, token, future)
        self._pump()
        return await future

    def report(self, worker: int, token: str, report: Report) -> None:
        """Finished groups, given-up episodes and dropped-trajectory counts from a worker."""
        for reason, count in report.drops.items():
            self.drops[reason] += count
        if report.progress or report.groups:
            self.last_progress = time.monotonic()
        if report.last_failure:
            self.last_failure = report.last_failure
        if report.fatal and self.fatal is None:
            self.fatal = report.fatal
        for release in report.releases:
            ticket = release.ticket
            if self.outstanding.pop(ticket.key, None) is None:
                if self.given_back.pop(ticket.key, None) is None:
                    continue
                self.admission.forget(ticket.group_id, ticket.episode_id)
            if release.filtered:
                self.filtered[release.reason] += 1
                if release.group is not None and self.unfilled.keeps_filtered:
                    self.filtered_groups.append(release.group)
            if ticket.pass_id == self.pass_id:  # a fresh group-episode takes its place
                self.admission.released(ticket.group_id, ticket.episode_id)
        for group in report.groups:
            self._accept(group)
        self._pump()
        self._changed.set()

    def _accept(self, group: GroupResult) -> None:
        key = group.ticket.key
        if self.outstanding.pop(key, None) is None:
            if self.given_back.pop(key, None) is None:
                self.drops["duplicate"] += group.size
                return
            self.admission.forget(group.ticket.group_id, group.ticket.episode_id)
        self.ready.append(group)

    # -- admission ------------------------------------------------------------------------
    def _busy(self) -> int:
        return len(self.outstanding) + len(self.ready)

    def _pump(self) -> None:
        if self.paused or self.closed:
            return
        at_bound = self._at_bound()
        # groups with an episode given back (a lost worker's, or one in flight at a checkpoint) first:
        # the replayed episodes are the oldest work and get the lowest serials
        for group_id in sorted(self.waiters, key=lambda g: not self.admission.returned[g]):
            worker, token, future = self.waiters[group_id]
            if future.done() or self.tokens.get(worker) != token:
                del self.waiters[group_id]
                if not future.done():
                    future.set_result(None)
                continue
            if at_bound and not self.admission.returned[group_id]:
                continue  # unfilled_batch: fill and max_groups_per_step consumed: only episodes given back replay
            if not self.admission.allows(group_id, self._busy()):
                continue
            del self.waiters[group_id]
            episode = self.admission.take_episode(group_id)
            self.serial += 1
            ticket = Ticket(group_id=group_id, episode_id=episode, seed=self.seed_fn(group_id, episode),
                            version=self.version, pass_id=self.pass_id, serial=self.serial)
            self.given_back.pop(ticket.key, None)
            self.outstanding[ticket.key] = (worker, ticket)
            future.set_result(ticket)

    def _reclaim(self, worker: int, *, reason: str, dead: bool = False) -> int:
        """Give back every episode ``worker`` holds; returns how many. A ``dead`` worker is detached."""
        keys = [key for key, (holder, _) in self.outstanding.items() if holder == worker]
        for key in keys:
            _, ticket = self.outstanding.pop(key)
            self.given_back[key] = ticket
            self.admission.give_back(ticket.group_id, ticket.episode_id)
        if keys:
            self.drops[reason] += len(keys) * self.group_size
            logger.warning("rollout %s: worker %d lost %d in-flight group episodes (%s); re-admitting them",
                           self.mode, worker, len(keys), reason)
        if dead:  # its blocked acquire calls have no caller any more
            self.tokens.pop(worker, None)
        self._pump()
        return len(keys)

    # -- the driver -------------------------------------------------------------------------
    async def get_batch(self, num_groups: int, timeout: float | None = None,
                        stall_timeout: float | None = None) -> dict[str, Any]:
        """Wait for ``num_groups`` complete groups; return the oldest, with drop counts since last time.

        Without groups (``"groups": None``) when ``timeout`` passes, when ``stall_timeout`` passes
        with no progress at all, or when an env manager reported a fatal fault (``"error"`` says which).
        """
        async with self._batch_lock:
            started = time.monotonic()
            self._batch_groups = num_groups
            if self.admission.per_pass:
                self._start_pass()
            self.admission.start_request(num_groups)
            self._pump()
            try:
                error = await asyncio.wait_for(self._wait_for(num_groups, started, stall_timeout), timeout)
            except TimeoutError:
                error = None
            self.ready.sort(key=lambda g: g.ticket.serial)
            groups = self.ready[:num_groups]
            passed = len(groups)
            bound = f"max_groups_per_step {max_groups(self.max_groups_per_step, num_groups)}"
            if error is None and len(groups) < num_groups and self._may_fill():
                if not self._at_bound():  # the cap, not the bound, ended the batch's admissions
                    cap = self.admission.max_per_group
                    bound = f"every group started its max_traj_per_env ({cap}) episodes"
                groups = self._completed(groups, num_groups)
                error = None if groups is not None else self._exhausted(num_groups)
            if error is not None or groups is None or len(groups) < num_groups:
                self.admission.end_request(num_groups)
                return {"groups": None, "status": self._status(), "waited_s": time.monotonic() - started,
                        "error": error, "last_failure": self.last_failure}
            self.ready = self.ready[passed:]
            drops, self.drops = dict(self.drops), defaultdict(int)
            filtered, self.filtered = dict(self.filtered), defaultdict(int)  # (before _pump: the bound is per batch)
            self.filtered_groups = []
            self.admission.end_request(num_groups)
            self._pump()
            if self.admission.per_pass:
                groups.sort(key=lambda g: (g.ticket.episode_id, g.ticket.group_id))
            extra = time.monotonic() - self._enough_at if filtered and self._enough_at is not None else 0.0
            return {"groups": groups, "drops": drops, "pass_id": self.pass_id, "version": self.version,
                    "waited_s": time.monotonic() - started, "filtered": filtered, "filter_extra_s": extra,
                    "refilled": len(groups) - passed, "refill_bound": bound}

    async def _wait_for(self, num_groups: int, started: float, stall_timeout: float | None) -> str | None:
        """None once ``num_groups`` groups are ready; else why the rollout cannot deliver them."""
        check_s = min(5.0, stall_timeout / 4) if stall_timeout else None
        self._enough_at = None
        while True:
            self._drop_stale()
            if len(self.ready) >= num_groups or self._may_fill():
                return None
            if self.fatal is not None:
                return self.fatal
            exhausted = self._filter_exhausted(num_groups)
            if exhausted is not None:
                return exhausted
            idle = time.monotonic() - max(self.last_progress, started)
            if stall_timeout and idle > stall_timeout:
                return (f"the {self.mode} rollout made no progress for {idle:.0f} s (no env call or generation "
                        f"completed, {len(self.ready)} of {num_groups} groups ready); last failure: "
                        f"{self.last_failure or 'none reported'}. Fix the env, or raise "
                        f"{self.mode}_env_manager.stall_timeout_s (now {stall_timeout:g}) if it is merely slow")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), check_s)
            except TimeoutError:
                pass

    def _filter_exhausted(self, num_groups: int) -> str | None:
        """Why the group filter cannot fill this batch within ``max_groups_per_step``, or None.

        Also notes when as many groups as the batch needs had finished (filtered ones included):
        the wait from then on is what the filter cost (``rollout/filter_extra_time``).
        """
        if self.group_filter is None:
            return None
        dropped = sum(self.filtered.values())
        if self._enough_at is None and dropped and len(self.ready) + dropped >= num_groups:
            self._enough_at = time.monotonic()
        limit = max_groups(self.max_groups_per_step, num_groups)
        if self.unfilled.keeps_filtered:  # fill: completed at the bound or the cap, see _may_fill
            return None
        if dropped and self._capped():
            return self._capped_message(num_groups)
        if dropped + num_groups <= limit:
            return None
        return self._exhausted(num_groups)

    def _capped_message(self, num_groups: int) -> str:
        """Why a batch stops when ``max_traj_per_env`` lets no dropped group be replaced (:meth:`_capped`)."""
        dropped, cap = sum(self.filtered.values()), self.admission.max_per_group
        head = (f"the group filter {self.group_filter!r} dropped {dropped} groups and no group may start "
                f"another episode this step: every group has started its max_traj_per_env ({cap}) episodes, "
                f"and {len(self.ready)} of {num_groups} groups passed. ")
        if self.unfilled.keeps_filtered:
            left = len(self.filtered_groups)
            return head + (f"unfilled_batch is fill, but only {left} filtered groups were left to complete "
                           "it with (stale ones are dropped): raise train_env_manager.max_traj_per_env "
                           "(or set -1).")
        return head + ("Raise train_env_manager.max_traj_per_env (or set -1) so that dropped groups can be "
                       "replaced, or set unfilled_batch: fill to complete such a batch with the most "
                       "recently filtered groups and go on.")

    def _exhausted(self, num_groups: int) -> str:
        if self._capped():
            return self._capped_message(num_groups)
        dropped = sum(self.filtered.values())
        return exhausted_message("groups", f"train_env_manager.group_filter_cls {self.group_filter!r}",
                                 len(self.ready), num_groups, len(self.ready) + dropped,
                                 max_groups(self.max_groups_per_step, num_groups), dict(self.filtered),
                                 refill_left=len(self.filtered_groups) if self.unfilled.keeps_filtered else None)

    def _at_bound(self) -> bool:
        """``unfilled_batch: fill``: the batch consumed ``max_groups_per_step`` groups; none more is admitted."""
        if not (self.unfilled.keeps_filtered and self.group_filter is not None and self._batch_groups):
            return False
        limit = max_groups(self.max_groups_per_step, self._batch_groups)
        return sum(self.filtered.values()) + self._batch_groups > limit

    def _may_fill(self) -> bool:
        """At the bound, or capped by ``max_traj_per_env`` after the filter dropped groups, with nothing
        in flight or to replay: the batch is completed with filtered groups (waiting for the groups in
        flight makes which groups a sync run trains the same every time)."""
        if self.outstanding or any(self.admission.returned):
            return False
        if self._at_bound():
            return True
        return (self.unfilled.keeps_filtered and self.group_filter is not None
                and sum(self.filtered.values()) > 0 and self._capped())

    def _completed(self, passed: list[GroupResult], num_groups: int) -> list[GroupResult] | None:
        """``passed`` plus the most recent filtered groups (newest version, latest episode), or None."""
        recent = sorted(self.filtered_groups, key=lambda g: (g.min_version, g.ticket.episode_id, g.ticket.group_id))
        return self.unfilled.complete(passed, recent, num_groups)

    def _capped(self) -> bool:
        """Nothing runs or is planned and ``max_traj_per_env`` lets no group start another episode."""
        admission = self.admission
        if admission.max_per_group is None or self.outstanding or any(admission.returned):
            return False
        planned = getattr(admission, "planned", [0] * admission.num_groups)
        return not any(planned) and not any(admission.under_cap(g) for g in range(admission.num_groups))

    def _drop_stale(self) -> None:
        """Drop complete groups whose oldest turn is more than ``max_staleness`` versions behind.

        Per turn, not per admission: a group admitted long ago whose turns were all generated by
        recent weights is fresh. Dropped groups stop counting as busy, so fresh work is admitted.
        """
        bound = self.version - self.max_staleness
        self.filtered_groups = [g for g in self.filtered_groups if g.min_version >= bound]  # never trained stale
        stale = [g for g in self.ready if g.min_version < bound]
        if stale:
            self.ready = [g for g in self.ready if g.min_version >= bound]
            self.drops["stale"] += sum(g.size for g in stale)
            self._pump()

    def _start_pass(self) -> None:
        """Validation: forget the previous pass; the next one replays the same (group, episode) pairs."""
        self.pass_id += 1
        leftovers = sum(g.size for g in self.ready)
        if leftovers:
            self.drops["stale"] += leftovers
        self.ready = []
        self.outstanding.clear()
        self.given_back.clear()

    def state_dict(self) -> dict[str, Any]:
        """Episode counters, version and pass: what a resumed run needs to replay the same seeds.

        Episodes admitted but not served yet (running, or complete and waiting: asynchronous
        training runs ahead of the trainer) are saved as given back, oldest admission first: a
        resumed run admits them again before any new episode, with the same seeds, so an episode
        is trained once whether or not the run was interrupted while it was in flight.
        """
        returned = [list(r) for r in self.admission.returned]
        unserved = [ticket for _, ticket in self.outstanding.values()] + [g.ticket for g in self.ready]
        for ticket in sorted(unserved, key=lambda t: t.serial):
            if ticket.pass_id == self.pass_id and ticket.episode_id not in returned[ticket.group_id]:
                returned[ticket.group_id].append(ticket.episode_id)
        return {"next_episode": list(self.admission.next_episode), "returned": returned,
                "admission": self.admission.state_dict(), "version": self.version, "pass_id": self.pass_id,
                "serial": self.serial}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (before the first ``get_batch``; anything in flight is forgotten)."""
        if len(state["next_episode"]) != self.num_groups:
            raise ValueError(f"the checkpoint has {len(state['next_episode'])} env groups, this rollout "
                             f"{self.num_groups}; the env-manager config changed")
        self.admission.next_episode = [int(e) for e in state["next_episode"]]
        for group_id, episodes in enumerate(state.get("returned") or []):
            self.admission.returned[group_id] = deque(int(e) for e in episodes)
        self.admission.load_state_dict(state.get("admission") or {})
        self.version = int(state.get("version", self.version))
        self.pass_id = int(state.get("pass_id", self.pass_id))
        self.serial = int(state.get("serial", 0))
        self.ready, self.outstanding, self.given_back = [], {}, {}

    def set_version(self, version: int) -> None:
        """New weights are being served: finished groups that became too old are dropped now."""
        self.version = int(version)
        self._drop_stale()
        self._changed.set()

    def pause(self) -> None:
        """Admit no new episodes (running ones finish)."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._pump()

    def close(self) -> None:
        self.closed = True
        for _, _, future in self.waiters.values():
            if not future.done():
                future.set_result(None)
        self.waiters.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()

    def _status(self) -> dict[str, Any]:
        return {"ready_groups": len(self.ready), "in_flight_groups": len(self.outstanding),
                "waiting_groups": len(self.waiters), "paused": self.paused, "version": self.version,
                "attached_workers": len(self.tokens), "drops": dict(self.drops),
                "last_failure": self.last_failure}

    def status(self) -> dict[str, Any]:
        return self._status()

    # -- watchdog -----------------------------------------------------------------------------
    async def set_workers(self, workers: list[Any]) -> None:
        """Handles of the env managers, for the watchdog that finds dead ones."""
        self.workers = list(workers)
        if self._watchdog is None and self.watchdog_interval_s > 0:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.watchdog_interval_s)
            holders = {holder for holder, _ in self.outstanding.values()}
            for worker in sorted(holders):
                try:
                    await asyncio.wait_for(self.workers[worker].ping.remote(), self.watchdog_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # dead, restarting or hung: its episodes are admitted again
                    self._reclaim(worker, reason="worker_lost", dead=isinstance(exc, ActorDiedError))
                    logger.warning("rollout %s: env manager %d did not answer (%s)", self.mode, worker,
                                   type(exc).__name__)
