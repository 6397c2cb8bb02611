"""Threading pieces the engine-backed infer strategies (``vllm``, ``sglang``) share.

Those engines live on an asyncio loop of their own while roll calls them from several threads (a
Ray actor with ``max_concurrency > 1``): :class:`BackgroundLoop` is that loop, :class:`WeightGate`
keeps weight / memory changes apart from running generations, :class:`AbortTracker` maps roll's
request ids to the engine's so that :meth:`abort` can find them, and :func:`shutdown_at_exit`
stops an engine at interpreter exit without keeping its strategy alive. Standard library only.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import itertools
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any


class WeightGate:
    """Many readers at once (``generate`` calls), or one writer alone (a weight or memory change).

    Writers go first: once a writer waits, new readers wait behind it, so a steady stream of
    generations cannot starve a weight update. Not re-entrant: a reader that enters again while a
    writer waits deadlocks.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate together with other readers (waits while a writer holds or waits)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the gate alone (waits for running readers and writers to leave)."""
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class BackgroundLoop:
    """An asyncio event loop running forever in a daemon thread, driven from other threads.

    Engines that bind to the loop they are created on (vLLM's ``AsyncLLM``, SGLang's ``Engine``)
    are created and called through :meth:`run`, so synchronous callers on any thread share them.
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the loop and wait for its result (its exception is raised here)."""
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Schedule ``coro`` on the loop without waiting; the returned future holds its outcome."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        """Call ``callback(*args)`` on the loop's thread, soon."""
        self.loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout: float = 30.0) -> None:
        """Stop the loop, wait up to ``timeout`` seconds for its thread, close it; no-op when closed."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=timeout)
        self.loop.close()


class AbortTracker:
    """Roll request ids -> the engine request ids now running for them, and what was aborted.

    A ``generate`` call takes the abort *epoch* when it starts (:meth:`generation`): aborting
    everything bumps the epoch, so requests of calls started before then count as aborted, even
    those not yet submitted to the engine. Aborting named requests marks them until their call ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self._aborted: set[str] = set()
        self._inflight: dict[str, set[str]] = {}
        self._ids = itertools.count()

    @contextlib.contextmanager
    def generation(self, request_ids: Iterable[str]) -> Iterator[int]:
        """One ``generate`` call over ``request_ids``: yields its epoch, forgets their aborts after."""
        with self._lock:
            epoch = self._epoch
        try:
            yield epoch
        finally:
            with self._lock:
                self._aborted -= set(request_ids)

    def is_aborted(self, request_id: str, epoch: int) -> bool:
        return self._epoch != epoch or request_id in self._aborted

    @contextlib.contextmanager
    def engine_request(self, request_id: str) -> Iterator[str]:
        """A fresh engine id (``"<request_id>#<n>"``) registered for ``request_id`` while inside."""
        engine_id = f"{request_id}#{next(self._ids)}"
        with self._lock:
            self._inflight.setdefault(request_id, set()).add(engine_id)
        try:
            yield engine_id
        finally:
            with self._lock:
                ids = self._inflight.get(request_id, set())
                ids.discard(engine_id)
                if not ids:
                    self._inflight.pop(request_id, None)

    def abort(self, request_ids: Iterable[str] | None = None) -> list[str]:
        """Mark ``request_ids`` (all when ``None``) aborted; returns the engine ids to abort now."""
        with self._lock:
            if request_ids is None:
                self._epoch += 1
                return [e for ids in self._inflight.values() for e in ids]
            wanted = set(request_ids) & set(self._inflight)
            self._aborted |= wanted
            return [e for r in wanted for e in self._inflight[r]]


def shutdown_at_exit(owner: Any) -> None:
    """Call ``owner.shutdown()`` at interpreter exit if it is still alive then (held weakly)."""
    atexit.register(_shutdown_if_alive, weakref.ref(owner))


def _shutdown_if_alive(ref: weakref.ref) -> None:
    owner = ref()
    if owner is not None:
        owner.shutdown()
