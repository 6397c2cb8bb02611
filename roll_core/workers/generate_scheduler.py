"""GenerateScheduler: one front door for every env loop's generate request, batched for the workers.

Env loops each send one request per turn; a model is efficient only on batches. The scheduler (an
asyncio Ray actor) keeps a queue per inference worker and dispatches a worker's queue as one batch
when it holds ``max_batch_size`` requests, or ``max_wait_s`` after its first request arrived. A
worker runs one batch at a time; requests of the same env (``route_key``) always go to the same
worker, so a worker with a prefix cache sees the growing conversation of an env every turn.

``pause`` holds dispatching (running batches finish), ``abort`` also stops running batches: the
aborted requests are queued again and served after ``resume``, so env loops never see an abort.
``update_weights`` does pause, abort, wait, load, resume: the weight sync of async training.

Partial rollout (``partial_rollout``, default on): an aborted request keeps what it generated
(tokens, their sampling log-probs and versions) and is queued again as a continuation: prompt +
partial response as its prompt (hf_infer prefills it; vLLM/SGLang take the token ids), the rest
of its ``max_new_tokens``. Its answer is the kept tokens followed by the continuation's, each
token with the log-prob and the version that sampled it (``GenerationOutput.token_versions``);
``policy_version`` stays the version of the first token; ``response_prefix`` tells the backend
how many prompt tokens are the response's own (a stop string may span the sync). Off: the partial tokens are thrown away
and the request is regenerated from scratch on the new weights. ``stats()`` counts both
(``kept_tokens``, ``discarded_tokens``).

Lock-step rounds (synchronous runs; docs/architecture.md, "Reproducible runs"): batches formed by
arrival time make a request's float rounding depend on its batch-mates, which depend on the
machine's timing. After ``expect(n)`` (the driver announces the n env loops of a synchronous
batch) requests are instead collected until every announced loop still playing has one waiting
(a loop says ``leave`` when its episode ends); that round, sorted by (prompt length, request id),
is cut into chunks of ``max_batch_size`` that go to the workers in turn (chunk i to worker
i mod N). A round is then the set of episodes alive at turn t, whatever the timing, and a
chunk's composition does not depend on the number of workers. A round that waits
``LOCKSTEP_TIMEOUT_S`` without any arrival or leave (a count gone wrong after a fault) is
generated as it is, and counted.

Failover: a worker whose actor died (its node lost, OOM-killed, ``ray.kill``) is dropped at the
first call that finds it gone; its queued and in-flight requests are requeued to the survivors and
its sticky routes move to them (weights are synced to every worker each step, so any worker serves
any env). Env loops never see the death; only when no worker is left does every request fail with
:class:`~roll_core.errors.InferenceLost`, which stops the run with one message instead of counting
env failures.

Rejoining: a replacement for a lost worker (started by
:class:`~roll_core.workers.infer_group.InferGroup` where the cluster has room again) is handed to
:meth:`update_weights` as ``joining``; it loads that sync's weights with the others and takes the
lost worker's index (its rank) again. Every route is then dealt afresh over the live workers (new
weights make every prefix cache stale, so nothing is lost by moving a route at a sync), and the
lost worker's dispatcher, if it still waits, is replaced.

Closing: at a run's end :meth:`close` stops the dispatchers before the workers are killed
(``ray.kill`` is asynchronous: a scheduler still dispatching would see every worker die and report
it lost). A closed scheduler reports and counts no loss, and fails its waiting and new requests
with :class:`SchedulerClosed`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from roll_core.errors import InferenceLost
from roll_core.strategies.base import GenerationOutput, GenerationRequest

logger = logging.getLogger("roll.rollout")

#: a lock-step round that sees no arrival and no leave for this long is generated as it is
LOCKSTEP_TIMEOUT_S = 30.0


class SchedulerClosed(RuntimeError):
    """A request to a closed generate scheduler: the run is shutting down."""


def continuation_seed(seed: int | None, kept: int) -> int | None:
    """The sampling seed of a continuation after ``kept`` tokens: derived from the request's seed and
    the kept length, so a continuation does not replay the random stream its first attempt used."""
    return None if seed is None else (seed + 1_000_003 * kept) % 2**63


@dataclass
class _Pending:
    request: GenerationRequest  # what the worker runs next: a continuation after a kept abort
    future: asyncio.Future
    original: GenerationRequest | None = None  # set once a partial response is kept
    tokens: list[int] = field(default_factory=list)  # kept from aborted attempts
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def keep(self, out: GenerationOutput) -> None:
        """Keep an aborted attempt's tokens; the next attempt continues after them."""
        self.original = self.original or self.request
        self.tokens += list(out.token_ids)
        self.logprobs += list(out.logprobs)
        self.versions += out.versions()
        first = self.original.sampling
        sampling = replace(first, max_new_tokens=first.max_new_tokens - len(self.tokens),
                           seed=continuation_seed(first.seed, len(self.tokens)))
        self.request = replace(self.original, prompt_ids=[*self.original.prompt_ids, *self.tokens],
                               sampling=sampling, response_prefix=self.original.response_prefix + len(self.tokens))

    def answer(self, out: GenerationOutput) -> GenerationOutput:
        """``out`` after the kept tokens (as it is when nothing was kept)."""
        if not self.tokens:
            return out
        return GenerationOutput(
            request_id=self.original.request_id, token_ids=self.tokens + list(out.token_ids),
            logprobs=self.logprobs + list(out.logprobs), finish_reason=out.finish_reason,
            policy_version=self.versions[0], token_versions=self.versions + out.versions())


class GenerateScheduler:
    """See the module docstring; create with ``ray.remote(GenerateScheduler)``.

    ``workers`` are Ray actor handles exposing ``generate(requests) -> outputs``,
    ``abort(request_ids | None)`` and ``load_weights(weights, version)`` (see :class:`InferWorker`).
    ``partial_rollout``: keep and continue aborted requests (True) or regenerate them (False).
    """

    def __init__(self, workers: list[Any], *, max_batch_size: int = 16, max_wait_s: float = 0.02,
                 partial_rollout: bool = True):
        if not workers:
            raise ValueError("GenerateScheduler needs at least one inference worker")
        self.workers = list(workers)
        self.max_batch_size = max(1, int(max_batch_size))
        self.max_wait_s = max_wait_s
        n = len(self.workers)
        self.queues: list[deque[_Pending]] = [deque() for _ in range(n)]
        self.arrivals = [asyncio.Event() for _ in range(n)]
        self.busy = [False] * n
        self.routes: dict[str, int] = {}
        self.route_load = [0] * n
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.idle = asyncio.Event()
        self.idle.set()
        self.version = 0
        self.partial_rollout = bool(partial_rollout)
        self.stats_ = {"requests": 0, "batches": 0, "batched_requests": 0, "requeued_aborts": 0,
                       "kept_tokens": 0, "discarded_tokens": 0, "generated_tokens": 0,
                       "rounds": 0, "lockstep_timeouts": 0, "requeued_lost": 0, "workers_lost": 0,
                       "workers_rejoined": 0}
        #: requests the actor at each worker index generated (attempts, aborted ones included; a
        #: replacement starts at 0): who serves
        self.served = [0] * n
        self.players = 0  # lock-step: env loops announced by expect() that have not left yet
        self.round: list[_Pending] = []
        self.round_changed = asyncio.Event()
        #: worker index (= actor_infer rank) -> why it was dropped (the first line of Ray's error)
        self.lost: dict[int, str] = {}
        self.completed = 0  # requests answered
        self.busy_s = 0.0  # wall time with at least one worker generating, up to busy_since
        self.busy_since: float | None = None
        self._dispatchers: list[asyncio.Task] = []  # one per worker index, then the lock-step rounds
        self.closed = False  # see close()
        self._waiting: set[asyncio.Future] = set()  # the futures of requests not answered yet

    # -- requests -----------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> GenerationOutput:
        """Queue ``request`` (for its worker, or for the lock-step round) and await its output."""
        self._start()
        future = self._future()
        self.stats_["requests"] += 1
        if self.players > 0:
            self.round.append(_Pending(request, future))
            self.round_changed.set()
            return await future
        self._enqueue(_Pending(request, future))
        return await future

    async def generate_all(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        """Requests sent together (an RLVR batch): one round, batched by the round's rule, never by
        when each arrived; outputs in order."""
        return list(await asyncio.gather(*self._round_of(requests)))

    async def generate_stream(self, requests: list[GenerationRequest]
                              ) -> AsyncIterator[list[tuple[int, GenerationOutput]]]:
        """:meth:`generate_all`'s round (the same chunks, so the same tokens), its outputs yielded as
        soon as their chunk is done, as ``[(position, output), ...]`` (one item per chunk or so: one
        Ray object each, not one per response): the caller scores the first chunks while the round's
        later chunks generate. A Ray streaming generator; a failed request raises there."""
        futures = self._round_of(requests)
        position = {id(f): i for i, f in enumerate(futures)}
        waiting = set(futures)
        while waiting:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            yield [(position[id(f)], f.result()) for f in sorted(done, key=lambda f: position[id(f)])]

    def _round_of(self, requests: list[GenerationRequest]) -> list[asyncio.Future]:
        self._start()
        pending = [_Pending(r, self._future()) for r in requests]
        self.stats_["requests"] += len(pending)
        self.round.extend(pending)
        self.round_changed.set()
        return [p.future for p in pending]

    def expect(self, players: int) -> None:
        """Lock-step: the next requests come from ``players`` env loops, each one at a time, each
        saying :meth:`leave` when done. Called by the driver before a synchronous batch starts."""
        if self.players or self.round:  # only after a fault: loops that never left
            logger.warning("generate scheduler: %d env loops of the last lock-step batch never left "
                           "(%d requests waiting); starting the next batch anyway", self.players, len(self.round))
        self.players = max(0, int(players))
        self.round_changed.set()

    def leave(self) -> None:
        """Lock-step: an announced env loop ended its episode and sends no more requests."""
        if self.players > 0:
            self.players -= 1
            self.round_changed.set()

    def _alive(self) -> list[int]:
        return [w for w in range(len(self.workers)) if w not in self.lost]

    def _future(self) -> asyncio.Future:
        """A request's future, tracked until it is answered (:meth:`close` fails those still waiting)."""
        future = asyncio.get_running_loop().create_future()
        self._waiting.add(future)
        future.add_done_callback(self._waiting.discard)
        return future

    def _enqueue(self, pending: _Pending, *, front: bool = False) -> None:
        if self.closed:
            if not pending.future.done():
                pending.future.set_exception(self._closed_error())
            return
        if not self._alive():
            if not pending.future.done():
                pending.future.set_exception(self._all_lost())
            return
        worker = self._route(pending.request.route_key)
        if front:
            self.queues[worker].appendleft(pending)
        else:
            self.queues[worker].append(pending)
        self.arrivals[worker].set()

    def _route(self, key: str | None) -> int:
        """Sticky: a key keeps its worker; a new key goes to the live worker with the fewest keys."""
        alive = self._alive()
        if key is None:
            return min(alive, key=lambda w: len(self.queues[w]))
        worker = self.routes.get(key)
        if worker is None or worker in self.lost:
            worker = min(alive, key=lambda w: self.route_load[w])
            self.routes[key] = worker
            self.route_load[worker] += 1
        return worker

    def _all_lost(self) -> InferenceLost:
        ranks = ", ".join(f"rank {w} ({cause})" for w, cause in sorted(self.lost.items()))
        return InferenceLost(f"every actor_infer worker is gone: {ranks}")

    def _drop_worker(self, worker: int, exc: BaseException, batch: list[_Pending]) -> None:
        """Failover: forget ``worker``, move its routes and requeue its requests to the survivors.

        Not once closed: the run is killing its workers, which is no loss (and no one is left to serve)."""
        if self.closed:
            return
        if worker not in self.lost:
            self.lost[worker] = _first_line(exc)
            self.stats_["workers_lost"] += 1
            logger.warning("actor_infer rank %d is gone (%s); %d worker(s) go on", worker, self.lost[worker],
                           len(self._alive()))
        for key in [k for k, w in self.routes.items() if w == worker]:
            del self.routes[key]  # routed again on the next request, to a survivor
        self.route_load[worker] = 0
        stranded = [p for p in batch if not p.future.done()]
        while self.queues[worker]:
            p = self.queues[worker].popleft()
            if not p.future.done():
                stranded.append(p)
        self.stats_["requeued_lost"] += len(stranded)
        for p in reversed(stranded):  # the oldest first again
            self._enqueue(p, front=True)

    def _start(self) -> None:
        if self.closed:
            raise self._closed_error()
        if not self._dispatchers:
            loop = asyncio.get_running_loop()
            self._dispatchers = [loop.create_task(self._dispatch(w)) for w in range(len(self.workers))]
            self._dispatchers.append(loop.create_task(self._rounds()))

    async def _collect(self, worker: int) -> list[_Pending]:
        """Wait for a request, then up to ``max_wait_s`` for the batch to fill; take it."""
        queue, arrivals = self.queues[worker], self.arrivals[worker]
        while not queue:
            arrivals.clear()
            await arrivals.wait()
        await self.resumed.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while len(queue) < self.max_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            arrivals.clear()
            try:
                await asyncio.wait_for(arrivals.wait(), remaining)
            except TimeoutError:
                break
        await self.resumed.wait()  # a pause may have come while the batch filled
        return [queue.popleft() for _ in range(min(len(queue), self.max_batch_size))]

    async def _dispatch(self, worker: int) -> None:
        while worker not in self.lost:
            batch = [p for p in await self._collect(worker) if not p.future.done()]
            if batch:
                requeue = await self._run(worker, batch)
                if requeue:  # continued (or regenerated) after resume, by the new weights
                    self.queues[worker].extendleft(reversed(requeue))
                    self.arrivals[worker].set()

    async def _run(self, worker: int, batch: list[_Pending]) -> list[_Pending]:
        """Generate ``batch`` on ``worker`` and answer its futures; returns the aborted ones."""
        if not any(self.busy):
            self.busy_since = time.perf_counter()
        self.busy[worker] = True
        self.idle.clear()
        requeue = []
        try:
            outputs = await self.workers[worker].generate.remote([p.request for p in batch])
        except _actor_errors() as exc:  # the worker is gone, not the request at fault
            self._drop_worker(worker, exc, batch)
        except Exception as exc:
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(exc)
        else:
            self.stats_["batches"] += 1
            self.stats_["batched_requests"] += len(batch)
            self.served[worker] += len(batch)
            for p, out in zip(batch, outputs):
                if self._settle(p, out):
                    requeue.append(p)
            self.stats_["requeued_aborts"] += len(requeue)
        finally:
            self.busy[worker] = False
            if not any(self.busy):
                self.idle.set()
                self.busy_s += time.perf_counter() - self.busy_since
        return requeue

    # -- lock-step rounds ---------------------------------------------------------------------
    async def _rounds(self) -> None:
        while True:
            batch = [p for p in await self._complete_round() if not p.future.done()]
            if not batch:
                continue
            self.stats_["rounds"] += 1
            batch.sort(key=lambda p: (len(p.request.prompt_ids), p.request.request_id))
            alive = self._alive()
            if not alive:
                for p in batch:
                    p.future.set_exception(self._all_lost())
                continue
            size, n = self.max_batch_size, len(alive)
            chunks = [batch[i : i + size] for i in range(0, len(batch), size)]
            requeued = await asyncio.gather(*(self._run_chunks(alive[k], chunks[k::n])
                                              for k in range(min(n, len(chunks)))))
            requeue = [p for part in requeued for p in part]
            if requeue:  # aborted by a weight update: the same loops, in the next round
                self.round.extend(requeue)
                self.round_changed.set()

    async def _run_chunks(self, worker: int, chunks: list[list[_Pending]]) -> list[_Pending]:
        requeue = []
        for chunk in chunks:
            if worker in self.lost:  # it died on an earlier chunk: the survivors take the rest (failover)
                self._drop_worker(worker, RuntimeError(self.lost[worker]), chunk)
            else:
                requeue += await self._run(worker, chunk)
        return requeue

    async def _complete_round(self) -> list[_Pending]:
        """Wait until every announced loop still playing has a request waiting; take them all."""
        while not (self.round and len(self.round) >= self.players):
            self.round_changed.clear()
            try:
                await asyncio.wait_for(self.round_changed.wait(), LOCKSTEP_TIMEOUT_S if self.round else None)
            except TimeoutError:
                self.stats_["lockstep_timeouts"] += 1
                logger.warning("generate scheduler: a lock-step round waited %.0f s for %d of %d env loops; "
                               "generating the %d requests it has (this batch is not reproducible)",
                               LOCKSTEP_TIMEOUT_S, self.players - len(self.round), self.players, len(self.round))
                break
        await self.resumed.wait()
        batch, self.round = self.round, []
        return batch

    def _settle(self, p: _Pending, out: GenerationOutput) -> bool:
        """Answer ``p`` with ``out``, or keep or discard an aborted attempt; True: queue ``p`` again."""
        self.stats_["generated_tokens"] += len(out.token_ids)
        if out.finish_reason != "abort":
            if not p.future.done():
                p.future.set_result(p.answer(out))
                self.completed += 1
            return False
        if self.partial_rollout:
            self.stats_["kept_tokens"] += len(out.token_ids)
            if out.token_ids:
                p.keep(out)
            if p.request.sampling.max_new_tokens <= 0:  # nothing left to generate: it is complete
                return self._settle(p, GenerationOutput(out.request_id, [], [], "length", self.version))
        else:
            self.stats_["discarded_tokens"] += len(out.token_ids)
        return True

    # -- control ------------------------------------------------------------------------------
    def pause(self) -> None:
        """Dispatch nothing new; running batches finish."""
        self.resumed.clear()

    def resume(self) -> None:
        self.resumed.set()

    async def abort(self) -> None:
        """Pause and abort running batches; their requests continue (or regenerate) after :meth:`resume`."""
        self.pause()
        await asyncio.gather(*(self.workers[w].abort.remote(None) for w in self._alive()), return_exceptions=True)
        await self.idle.wait()

    async def update_weights(self, weights: Any, version: int, *, abort: bool = True,
                             joining: dict[int, Any] | None = None) -> int:
        """Weight sync: pause (and abort), wait for idle workers, load ``weights``, resume.

        ``weights`` is a HF-named state dict, or ``[ObjectRef]`` of one (put it once with
        ``ray.put``; each worker then reads the same object-store copy). ``joining``: replacements
        of lost workers (index -> actor); each that loads the weights rejoins (see the module docstring).
        """
        if abort:
            await self.abort()
        else:
            self.pause()
            await self.idle.wait()
        payload = weights[0] if isinstance(weights, list) else weights
        joining = {w: a for w, a in (joining or {}).items() if w in self.lost}
        try:
            alive = self._alive()
            targets = [self.workers[w] for w in alive] + list(joining.values())
            results = await asyncio.gather(*(t.load_weights.remote(payload, version) for t in targets),
                                           return_exceptions=True)
            for w, result in zip(alive, results):
                if isinstance(result, _actor_errors()):
                    self._drop_worker(w, result, [])
                elif isinstance(result, BaseException):
                    raise result
            for (w, actor), result in zip(joining.items(), results[len(alive):]):
                if isinstance(result, BaseException):  # it stays lost; the group tries again
                    logger.warning("the replacement of actor_infer rank %d did not load the weights (%s)",
                                   w, _first_line(result))
                else:
                    self._rejoin(w, actor)
            if not self._alive():
                raise self._all_lost()
            self.version = int(version)
        finally:
            self.resume()
        return self.version

    def _rejoin(self, worker: int, actor: Any) -> None:
        """A replacement takes lost ``worker``'s index; routes are dealt afresh over the live workers.

        Runs inside a weight sync, with every worker idle: a dispatcher is then waiting in
        :meth:`_collect` and holds no request, so the lost worker's one (if it still waits) is cancelled.
        """
        self.workers[worker] = actor
        del self.lost[worker]
        self.stats_["workers_rejoined"] += 1
        self.served[worker] = 0  # what the new actor serves
        self.routes.clear()
        self.route_load = [0] * len(self.workers)
        if self._dispatchers:
            old = self._dispatchers[worker]
            if not old.done():
                old.cancel()
            self._dispatchers[worker] = asyncio.get_running_loop().create_task(self._dispatch(worker))
        logger.warning("actor_infer rank %d rejoined; %d worker(s) serve", worker, len(self._alive()))

    async def close(self) -> dict[int, str]:
        """The run is ending: stop dispatching before the workers are killed; returns :meth:`lost_workers`.

        Awaited by :meth:`InferGroup.shutdown <roll_core.workers.infer_group.InferGroup.shutdown>` before
        its ``ray.kill`` calls. From now on no worker is reported or counted lost and no worker is pinged;
        requests still waiting, and any sent later, fail with :class:`SchedulerClosed`.
        """
        self.closed = True
        running = [t for t in self._dispatchers if not t.done()]
        for task in running:  # a batch in flight is abandoned: its worker's death is not looked at
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for future in list(self._waiting):
            if not future.done():
                future.set_exception(self._closed_error())
        return self.lost_workers()

    def _closed_error(self) -> SchedulerClosed:
        return SchedulerClosed("the generate scheduler is closed: the run is shutting down")

    def lost_workers(self) -> dict[int, str]:
        """Dropped workers (index = actor_infer rank) and why."""
        return dict(self.lost)

    async def check_workers(self, timeout_s: float = 5.0) -> dict[int, str]:
        """Ping every live worker, drop the dead ones (moving their work), return :meth:`lost_workers`
        (closed: no ping, the workers are being killed)."""
        alive = [] if self.closed else self._alive()
        pings = [asyncio.wait_for(asyncio.ensure_future(self.workers[w].policy_version.remote()), timeout_s)
                 for w in alive]
        for w, result in zip(alive, await asyncio.gather(*pings, return_exceptions=True)):
            if isinstance(result, _actor_errors()):
                self._drop_worker(w, result, [])
        return self.lost_workers()

    def activity(self) -> dict[str, float]:
        """Cumulative generating time and answered requests; differences over a window of the
        driver's (a train step) say how much generation overlapped it."""
        running = time.perf_counter() - self.busy_since if any(self.busy) else 0.0
        return {"busy_s": self.busy_s + running, "completed": float(self.completed),
                "workers": float(len(self._alive())), "requeued_lost": float(self.stats_["requeued_lost"]),
                "rejoined": float(self.stats_["workers_rejoined"]),
                "lockstep_timeouts": float(self.stats_["lockstep_timeouts"])}

    def stats(self) -> dict[str, Any]:
        batches = max(self.stats_["batches"], 1)
        return {**self.stats_, "mean_batch_size": self.stats_["batched_requests"] / batches,
                "queued": sum(len(q) for q in self.queues) + len(self.round), "players": self.players,
                "paused": not self.resumed.is_set(),
                "version": self.version, "routes": len(self.routes), "workers": len(self._alive()),
                "served": list(self.served)}


def _actor_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors for a worker actor that is gone (died, or unreachable with its node)."""
    from ray.exceptions import RayActorError

    return (RayActorError,)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
