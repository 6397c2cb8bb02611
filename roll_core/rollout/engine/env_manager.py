"""Env managers: Ray actors hosting whole env groups, every env running its own episode loop.

An :class:`EnvManager` actor hosts up to ``max_env_num_per_worker`` envs, as whole groups. Each
env is an asyncio task in the actor's event loop (a thread started by the constructor, so an actor
that Ray restarts after a crash is back at work as soon as its constructor returns). An env loop
takes the group's next :class:`Ticket`, plays the episode and hands in its trajectory; it never
waits for another env. When every member of a group has finished an episode, the group result
goes to the group queue.

Faults cost one trajectory: an env that raises or exceeds the step timeout is dropped (counted by
reason), rebuilt, and replays the same seed, so the group still shares one instance. After
``max_episode_retries`` failures of one episode the group gives it up and the queue admits
another; the group's finished members of that episode are dropped too (a group is all or nothing).
A hung env call is abandoned and its pool thread replaced (:mod:`roll_core.rollout.engine.env_threads`).

Faults that never heal stop the rollout instead of being retried forever: an env whose attempts
fail ``max_consecutive_env_failures`` times in a row, or an episode that fails with a
:class:`~roll_core.errors.ConfigError` (an ``agent_template`` naming an unknown field), sends a
fatal report naming the env tag, the last error and the setting to change; the queue hands it to
the driver's ``get_batch``, which raises it.

Agent tags (OpenAI-API agent code, :mod:`roll_core.rollout.agents.agent`) run in the same loops: the
worker starts an OpenAI-compatible gateway on first use, and an agent episode may deliver several
samples (when the agent rewrote its history), all of one group member.

Async training (``async_generation_ratio: k > 0``): a group whose oldest turn is more than k policy
versions behind the newest one can never be trained on, so its episode is given up at once (all
members stop, counted as ``stale``) and the queue admits fresh work in its place.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import traceback
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from roll_core.chat.codec import ChatCodec, load_tokenizer
from roll_core.chat.trajectory import Trajectory
from roll_core.errors import ConfigError, InferenceLost
from roll_core.rollout.build import build
from roll_core.rollout.dynamic_sampling import UNFILLED_BATCH
from roll_core.rollout.engine.env_threads import EnvThreads
from roll_core.rollout.engine.episode import (
    EpisodeCancelled,
    EpisodeContext,
    EpisodeFailure,
    EpisodeStale,
    play_episode,
)
from roll_core.rollout.engine.frames import save_episode_gif
from roll_core.rollout.engine.messages import GroupResult, Release, Report, Ticket
from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec, derive_seed
from roll_core.rollout.engine.turn_policies import TurnPolicy, lockstep_rollout, make_turn_policy

logger = logging.getLogger("roll.rollout")

#: failures logged in full per (worker, reason) before logging goes quiet
LOGGED_FAILURES = 3
#: wait before a group that gave up episodes asks for the next one: BACKOFF_S * 2**(k-1), capped
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
#: most threads running env calls at once in one env manager
MAX_ENV_THREADS = 32
#: longest wait between two progress reports of a busy env manager (the queue's stall bound reads them)
HEARTBEAT_S = 5.0


@dataclass
class Slot:
    """One admitted episode of a group, as the members fill it in."""

    ticket: Ticket
    results: dict[int, Trajectory | list[Trajectory]] = field(default_factory=dict)  # agents: their samples
    closed: bool = False  # complete or given up: running members stop
    abandoned: bool = False
    drop_reason: str = "group_abandoned"  # what members cut short by abandoning are counted as
    oldest: int | None = None  # policy version of the group's oldest turn so far (async training)


class EnvMember:
    """One env of a group: the env instance (rebuilt after a failure) and its policy."""

    def __init__(self, manager: EnvManagerCore, group_id: int, member: int, env_spec: EnvSpec):
        self.manager = manager
        self.group_id = group_id
        self.member = member
        self.env_spec = env_spec
        self.route_key = f"{manager.spec.mode}-g{group_id}-m{member}"
        self.policy: TurnPolicy = make_turn_policy(manager.spec.policy, manager.codec, manager.generate_scheduler,
                                                   manager.spec.policy_options)
        self.env: Any = None
        self.failures_in_row = 0  # failed attempts since this env last finished an episode

    def get_env(self) -> Any:
        if self.env is None:
            self.env = self.manager.make_env(self.env_spec)
        return self.env

    def discard_env(self) -> None:
        """Forget a failed env (a hung step may still hold the old object in its thread).

        ``close`` runs in a thread of its own: the env may be hung, and its ``close`` with it.
        """
        env, self.env = self.env, None
        close = getattr(env, "close", None)
        if close is not None:
            threading.Thread(target=_quietly, args=(close,), name="roll-env-close", daemon=True).start()


class GroupRunner:
    """Tickets and result slots of one group; its members run :meth:`member_loop` concurrently."""

    def __init__(self, manager: EnvManagerCore, group_id: int, env_spec: EnvSpec):
        self.manager = manager
        self.group_id = group_id
        self.env_spec = env_spec
        spec = manager.spec
        self.members = [EnvMember(manager, group_id, m, env_spec) for m in range(spec.members_per_group)]
        self.tickets: dict[int, Ticket] = {}
        self.slots: dict[int, Slot] = {}
        self.acquired = 0
        self.positions = [0] * len(self.members)
        self.closed = False
        self.given_up_in_row = 0  # episodes given up since the last success: backs off re-admission
        self.max_staleness = int(spec.async_generation_ratio)
        self._acquiring: asyncio.Task | None = None

    async def ticket(self, index: int) -> Ticket | None:
        """The group's ``index``-th ticket, acquiring it from the queue once for all members."""
        while index >= self.acquired:
            if self.closed:
                return None
            if self._acquiring is None or self._acquiring.done():
                self._acquiring = asyncio.ensure_future(self._acquire())
            await asyncio.shield(self._acquiring)
        return self.tickets[index]

    async def _acquire(self) -> None:
        manager = self.manager
        if self.given_up_in_row:  # a group whose env keeps failing must not spin the worker
            await asyncio.sleep(min(BACKOFF_S * 2 ** (self.given_up_in_row - 1), MAX_BACKOFF_S))
        try:
            ticket = await manager.queue.acquire.remote(manager.worker_index, manager.token, self.group_id)
        except Exception as exc:  # the queue is gone: the rollout is shutting down
            logger.debug("acquire failed: %s", exc)
            ticket = None
        if ticket is None:
            self.closed = True
            return
        self.tickets[self.acquired] = ticket
        self.slots[self.acquired] = Slot(ticket)
        self.acquired += 1

    async def member_loop(self, member: int) -> None:
        index = 0
        while True:
            ticket = await self.ticket(index)
            if ticket is None:
                return
            slot = self.slots[index]
            try:
                await self._play(self.members[member], slot)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must cost this episode, never the env loop (the group would hang)
                logger.exception("env manager %d: env loop of group %d failed", self.manager.worker_index,
                                 self.group_id)
                self.manager.drop("error")
                self._abandon(slot, "error")
            index += 1
            self._advance(member, index)

    def _advance(self, member: int, index: int) -> None:
        """Forget tickets every member is past."""
        self.positions[member] = index
        low = min(self.positions)
        for old in [i for i in self.tickets if i < low]:
            del self.tickets[old]
            del self.slots[old]

    async def _play(self, member: EnvMember, slot: Slot) -> None:
        """Play ``slot``'s episode on ``member``; in lock-step rounds, leave them once it is over."""
        left = False
        try:
            left = await self._play_episode(member, slot)
        finally:
            if not left:
                self.manager.leave_round()

    async def _play_episode(self, member: EnvMember, slot: Slot) -> bool:
        """The episode, with retries; True when it left the lock-step rounds (before delivering)."""
        manager, ticket = self.manager, slot.ticket
        spec = manager.spec
        attempts = 0
        while not slot.closed:
            frames = [] if manager.records_frames(ticket, member.member) else None
            member.policy.start_episode(
                derive_seed(spec.seed, f"{spec.mode}/policy", ticket.group_id, ticket.episode_id, member.member,
                            attempts)
            )
            try:
                try:
                    env = member.get_env()
                except Exception as exc:
                    raise EpisodeFailure("env_error", f"building the env raised {type(exc).__name__}: {exc}") from exc
                stale = functools.partial(self._stale, slot) if self.max_staleness > 0 else None
                if self.env_spec.is_agent:  # agent code through the gateway: a list of samples
                    runtime = await manager.agent_runtime()
                    trajectory = await runtime.play(env, self.env_spec, ticket, member.member,
                                                    route_key=member.route_key, cancelled=lambda: slot.closed,
                                                    stale=stale)
                else:
                    trajectory = await play_episode(
                        manager.context, env, self.env_spec, ticket, member.member, member.policy,
                        route_key=member.route_key, cancelled=lambda: slot.closed, frames=frames,
                        wait_resumed=manager.wait_resumed, stale=stale,
                    )
            except EpisodeCancelled:
                if slot.abandoned:
                    manager.drop(slot.drop_reason)
                return False
            except EpisodeStale:
                manager.drop("stale")
                self._abandon(slot, "stale", backoff=False)
                return False
            except EpisodeFailure as failure:
                reason, message = failure.reason, str(failure)
            except InferenceLost as exc:  # every inference worker is gone: the run stops, no env is blamed
                self.closed = True
                manager.fatal(str(exc))
                self._abandon(slot, "inference_lost")
                return
            except ConfigError as exc:  # the config, not the env: no retry can succeed
                manager.drop("error", str(exc), tag=self.env_spec.tag)
                self.closed = True
                manager.fatal(f"the {spec.mode} rollout cannot play env tag {self.env_spec.tag!r}: {exc}")
                self._abandon(slot, "error")
                return False
            except Exception as exc:  # env construction or a bug: still only this trajectory
                reason, message = "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            else:
                if frames:
                    trajectory.frames_path = await manager.save_frames(frames, trajectory, ticket)
                member.failures_in_row = 0
                left = manager.leave_round()
                if left is not None:  # first: the next batch's rounds cannot start before it
                    await _quietly_await(left)
                self._deliver(slot, member.member, trajectory)
                return True
            manager.drop(reason, message, tag=self.env_spec.tag)
            member.discard_env()
            member.failures_in_row += 1
            if member.failures_in_row >= spec.max_consecutive_env_failures:
                self.closed = True  # no more episodes for this group: the run is stopping
                manager.fatal(
                    f"env tag {self.env_spec.tag!r} (group {self.group_id}, env {member.member}) of the {spec.mode} "
                    f"rollout failed {member.failures_in_row} times in a row; last error ({reason}): "
                    f"{message.strip().splitlines()[0] if message.strip() else reason}. Fix the env, or raise "
                    f"{spec.manager_key}.max_consecutive_env_failures (now {spec.max_consecutive_env_failures}) "
                    "if it only fails often" + (f", or {spec.manager_key}.env_step_timeout_s (now "
                                                 f"{spec.step_timeout_s:g}) if it is merely slow"
                                                 if reason == "timeout" else "") + "."
                )
                self._abandon(slot, reason)
                return False
            attempts += 1
            if attempts >= spec.max_episode_retries:
                self._abandon(slot, reason)
                return False
            if slot.closed:
                return False
        return False

    def _stale(self, slot: Slot, first: int, latest: int) -> bool:
        """Is the group's oldest turn (any member's) more than ``max_staleness`` behind ``latest``?"""
        slot.oldest = first if slot.oldest is None else min(slot.oldest, first)
        return latest - slot.oldest > self.max_staleness

    def _deliver(self, slot: Slot, member: int, trajectory: Trajectory | list[Trajectory]) -> None:
        if slot.closed:
            if slot.abandoned:
                self.manager.drop(slot.drop_reason)
            return
        slot.results[member] = trajectory
        if len(slot.results) >= self.manager.spec.group_size:
            slot.closed = True
            self.given_up_in_row = 0
            trajectories = [t for m in sorted(slot.results)
                            for t in (slot.results[m] if isinstance(slot.results[m], list) else [slot.results[m]])]
            group = GroupResult(slot.ticket, self.env_spec.tag, trajectories)
            reason = self.manager.filter_reason(slot.ticket, trajectories)
            if reason is not None:  # the queue admits a fresh group instead (and may complete a batch with it)
                kept = group if self.manager.keeps_filtered else None
                self.manager.send_release(Release(slot.ticket, reason, filtered=True, group=kept))
                return
            self.manager.send_group(group)

    def _abandon(self, slot: Slot, reason: str, *, backoff: bool = True) -> None:
        """Give the episode up: running members stop, finished ones are dropped, the queue is told.

        ``backoff=False`` for stale episodes: nothing is wrong with the env, fresh work starts at once.
        """
        if slot.closed:
            return
        slot.closed = slot.abandoned = True
        if backoff:
            self.given_up_in_row += 1
        else:
            slot.drop_reason = reason
        if slot.results:
            self.manager.drop(slot.drop_reason, count=len(slot.results))
        self.manager.send_release(Release(slot.ticket, reason))


class EnvManagerCore:
    """The actor's state and event-loop side (kept apart from Ray so the logic reads plainly)."""

    def __init__(self, spec: RolloutSpec, worker_index: int, queue: Any, tokenizer: Any,
                 generate_scheduler: Any = None):
        from roll_core.run import check_plugin_versions

        check_plugin_versions(spec.plugins, f"{spec.mode} env manager {worker_index}")
        self.spec = spec
        self.worker_index = worker_index
        self.queue = queue
        self.generate_scheduler = generate_scheduler
        self.lockstep = lockstep_rollout(spec, generate_scheduler)
        self.token = uuid.uuid4().hex
        self.codec = ChatCodec(load_tokenizer(tokenizer))
        group_ids = spec.worker_groups(worker_index)
        num_envs = len(group_ids) * spec.members_per_group
        # env calls run in threads only to be abandoned when they hang; a bounded pool keeps the GIL
        # hand-offs cheap, and an abandoned call's thread is replaced (roll_core.rollout.engine.env_threads)
        self.threads = (
            EnvThreads(min(max(4, num_envs), MAX_ENV_THREADS), name=f"roll-env-{worker_index}")
            if spec.step_timeout_s else None
        )
        self.context = EpisodeContext(spec=spec, codec=self.codec, threads=self.threads,
                                      format_penalty=spec.format_penalty)
        self.groups = [GroupRunner(self, g, spec.envs[spec.group_tags[g]]) for g in group_ids]
        for group in self.groups:  # build every env now: a bad env config fails the actor's start
            for member in group.members:
                member.get_env()
        self.group_filter = None
        if spec.group_filter is not None and spec.mode == "train":
            from roll_core.rollout.engine.group_filters import BoundFilter

            self.group_filter = BoundFilter.load(spec.group_filter)
        #: filtered groups travel to the queue, to complete a batch with at max_groups_per_step
        self.keeps_filtered = self.group_filter is not None and UNFILLED_BATCH[spec.unfilled_batch].keeps_filtered
        self.outbox = Report()
        self.fatal_sent = False
        self.drop_log: dict[str, int] = defaultdict(int)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._agents: Any = None  # the AgentRuntime (gateway) of agent tags, started on first use
        # created here, bound to the loop thread on first use (pause() may come before run())
        self._outbox_event = asyncio.Event()
        self._resumed = asyncio.Event()
        self._stop = asyncio.Event()

    # -- used by group runners ---------------------------------------------------------------
    def leave_round(self) -> Any:
        """Lock-step generation: an announced env loop is done with its episode (see
        ``GenerateScheduler.expect``); the call's ref, or None. A delivering loop awaits it first,
        so the driver cannot announce its next batch before every loop of this one has left."""
        if not self.lockstep:
            return None
        try:
            return self.generate_scheduler.leave.remote()
        except Exception as exc:  # the scheduler is gone: the run is shutting down
            logger.debug("leave failed: %s", exc)
            return None

    def make_env(self, env_spec: EnvSpec) -> Any:
        return build(env_spec.env)

    def records_frames(self, ticket: Ticket, member: int) -> bool:
        spec = self.spec
        index = ticket.group_id * spec.members_per_group + member
        return bool(spec.render_save_dir) and spec.mode == "val" and index < spec.render_max_trajectories

    async def save_frames(self, frames: list, trajectory: Trajectory, ticket: Ticket) -> str | None:
        """GIF of a validation episode under ``render_save_dir/<mode>/pass_<n>/`` (in a thread).

        A GIF that cannot be written is logged and skipped: frames never cost a trajectory.
        """
        directory = os.path.join(self.spec.render_save_dir, self.spec.mode, f"pass_{ticket.pass_id:04d}")
        try:
            return await asyncio.get_running_loop().run_in_executor(
                None, save_episode_gif, frames, directory, trajectory
            )
        except Exception as exc:
            logger.warning("could not save frames of %s: %s", trajectory.traj_id, exc)
            return None

    async def agent_runtime(self) -> Any:
        """The OpenAI-compatible gateway agent tags play through (roll_core.rollout.agents.agent)."""
        if self._agents is None:
            from roll_core.rollout.agents.agent import AgentRuntime

            self._agents = AgentRuntime(self.spec, self.codec, self.generate_scheduler,
                                        worker_index=self.worker_index, wait_resumed=self.wait_resumed)
        await self._agents.start()
        return self._agents

    async def wait_resumed(self) -> None:
        if not self._resumed.is_set():
            await self._resumed.wait()

    def drop(self, reason: str, message: str = "", count: int = 1, *, tag: str | None = None) -> None:
        self.outbox.drops[reason] = self.outbox.drops.get(reason, 0) + count
        self.drop_log[reason] += count
        if message:
            first = message.strip().splitlines()[0] if message.strip() else reason
            self.outbox.last_failure = f"env tag {tag!r}: {reason}: {first}" if tag else f"{reason}: {first}"
            if self.drop_log[reason] <= LOGGED_FAILURES:
                logger.warning("env manager %d dropped a trajectory (%s): %s", self.worker_index, reason, message)
        self._outbox_event.set()

    def fatal(self, message: str) -> None:
        """A fault no retry can heal: the queue stops the rollout's ``get_batch`` with ``message``."""
        if self.outbox.fatal is None and not self.fatal_sent:
            logger.error("env manager %d: %s", self.worker_index, message)
            self.outbox.fatal = message
            self.fatal_sent = True
        self._outbox_event.set()

    def filter_reason(self, ticket: Ticket, trajectories: list[Trajectory]) -> str | None:
        """Why the group filter drops this complete group, or None to keep it (a raising filter stops the run)."""
        if self.group_filter is None:
            return None
        try:
            return self.group_filter.reason(ticket.group_id, ticket.episode_id, trajectories)
        except Exception as exc:
            self.fatal(f"the group filter {self.group_filter.name!r} (train_env_manager.group_filter_cls) raised "
                       f"{type(exc).__name__}: {exc}")
            return "filter_error"

    def send_group(self, group: GroupResult) -> None:
        self.outbox.groups.append(group)
        self._outbox_event.set()

    def send_release(self, release: Release) -> None:
        self.outbox.releases.append(release)
        self._outbox_event.set()

    # -- the event loop -----------------------------------------------------------------------
    async def run(self) -> None:
        state = await self.queue.attach.remote(self.worker_index, self.token)
        if not state.get("paused"):
            self._resumed.set()
        tasks = [asyncio.ensure_future(group.member_loop(m)) for group in self.groups
                 for m in range(len(group.members))]
        flusher = asyncio.ensure_future(self._flush_outbox())
        heartbeat = asyncio.ensure_future(self._heartbeat())
        await self._stop.wait()
        for task in [*tasks, flusher, heartbeat]:
            task.cancel()
        await asyncio.gather(*tasks, flusher, heartbeat, return_exceptions=True)
        if self.threads is not None:
            self.threads.shutdown()
        if self._agents is not None:
            await self._agents.stop()

    async def _heartbeat(self) -> None:
        """Report progress (env calls, generations) at least every few seconds while there is some."""
        interval = min(HEARTBEAT_S, self.spec.stall_timeout_s / 5) if self.spec.stall_timeout_s else HEARTBEAT_S
        sent = 0
        while True:
            await asyncio.sleep(interval)
            progress = self.context.progress
            if progress != sent:
                self.outbox.progress += progress - sent
                sent = progress
                self._outbox_event.set()

    async def _flush_outbox(self) -> None:
        """Send finished groups in batches: whatever piles up while one report is in flight."""
        while True:
            await self._outbox_event.wait()
            self._outbox_event.clear()
            report, self.outbox = self.outbox, Report()
            if report:
                try:
                    await self.queue.report.remote(self.worker_index, self.token, report)
                except Exception as exc:
                    logger.debug("report failed: %s", exc)

    def pause(self) -> None:
        self.loop.call_soon_threadsafe(self._resumed.clear)

    def resume(self) -> None:
        self.loop.call_soon_threadsafe(self._resumed.set)

    def stop(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._stop.set)


class EnvManager:
    """The Ray actor: builds the envs in its constructor, then runs them in a background loop.

    Its constructor takes only plain values: the group queue is looked up by name, and the queue
    hands out the tokenizer (one object-store copy for all workers) and the generation scheduler.
    Ray restarts a crashed actor with the same arguments, so nothing it needs can have been freed.
    """

    def __init__(self, spec: RolloutSpec, worker_index: int, queue_name: str):
        import ray

        queue = ray.get_actor(queue_name)
        shared = ray.get(queue.shared.remote())
        tokenizer = ray.get(shared["tokenizer"][0])
        generate_scheduler = shared["generate_scheduler"]
        self.core = EnvManagerCore(spec, worker_index, queue, tokenizer, generate_scheduler)
        started = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.core.loop = loop
            started.set()
            try:
                loop.run_until_complete(self.core.run())
            except BaseException as exc:  # surfaced by ready()/ping()
                self.error = exc
                logger.exception("env manager %d stopped", worker_index)
            finally:
                loop.close()

        self.thread = threading.Thread(target=run, name=f"roll-env-manager-{worker_index}", daemon=True)
        self.thread.start()
        started.wait()

    def ready(self) -> dict[str, Any]:
        self.ping()
        import ray

        core = self.core
        return {"worker": core.worker_index, "pid": os.getpid(), "groups": [g.group_id for g in core.groups],
                "envs": sum(len(g.members) for g in core.groups), "node_id": ray.get_runtime_context().get_node_id()}

    def ping(self) -> bool:
        if self.error is not None:
            raise RuntimeError(f"the env loop of this env manager died: {self.error!r}")
        return True

    def stats(self) -> dict[str, Any]:
        threads = self.core.threads
        return {"worker": self.core.worker_index, "pid": os.getpid(), "drops": dict(self.core.drop_log),
                "abandoned_env_calls": threads.abandoned if threads is not None else 0,
                "threads": threading.active_count()}

    def pause(self) -> None:
        self.core.pause()

    def resume(self) -> None:
        self.core.resume()

    def shutdown(self) -> None:
        self.core.stop()
        self.thread.join(timeout=10)


async def _quietly_await(ref: Any) -> None:
    try:
        await ref
    except Exception as exc:  # the scheduler is gone: the run is shutting down
        logger.debug("leave failed: %s", exc)


def _quietly(fn: Any) -> None:
    try:
        fn()
    except Exception:  # closing a failed env is best effort
        pass
