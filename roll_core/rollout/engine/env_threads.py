"""Env calls in threads that a hung call cannot use up.

An env's ``reset`` / ``step`` runs in a worker thread so that the env manager's event loop can stop
waiting for it after ``env_step_timeout_s``. Python cannot kill a thread, and a
``ThreadPoolExecutor`` keeps a hung call's thread for good: after as many hangs as it has threads,
every later call would wait in its queue and time out, and the rollout would stall. Here a call
that times out is *abandoned*: its slot is released and a fresh thread takes its place, while the
hung thread leaves the pool once its call returns (if ever). The env it was running is discarded by
the caller, so nothing touches it again. ``abandoned`` counts such threads (the rollout reports it).

Why not a process per env: envs hold arbitrary Python state (and an env manager may host hundreds
of them); a thread per call slot keeps a step at its plain cost, and hangs are the rare case.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any


class EnvCallTimeout(TimeoutError):
    """An env call took longer than its timeout and was abandoned."""


class _Job:
    __slots__ = ("fn", "future", "abandoned", "finished")

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.abandoned = False  # the caller gave up on it (set and read under the pool's lock)
        self.finished = False  # its thread is done with it


class EnvThreads:
    """At most ``size`` env calls run at once, each in a pooled thread; see the module docstring."""

    def __init__(self, size: int, *, name: str = "roll-env"):
        self.size = int(size)
        self.name = name
        self.abandoned = 0
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._slots: asyncio.Semaphore | None = None  # bound to the event loop on first use
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    async def call(self, fn: Callable[[], Any], timeout: float | None) -> Any:
        """``fn()`` in a pool thread; raises :class:`EnvCallTimeout` after ``timeout`` seconds.

        Waiting for a free slot does not count towards the timeout: only the call itself does.
        """
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.size)
        async with self._slots:
            job = _Job(fn)
            self._submit(job)
            try:
                return await asyncio.wait_for(asyncio.wrap_future(job.future), timeout)
            except TimeoutError:
                self._abandon(job)
                raise EnvCallTimeout(f"no answer after {timeout} s") from None
            except asyncio.CancelledError:
                if not job.future.done():
                    self._abandon(job)
                raise

    def _submit(self, job: _Job) -> None:
        with self._lock:
            if self._threads < self.size:  # lazily grow to ``size`` threads
                self._spawn()
        self._jobs.put(job)

    def _spawn(self) -> None:
        self._threads += 1
        threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()

    def _abandon(self, job: _Job) -> None:
        """The call's thread is given up: a fresh one takes its place in the pool."""
        if job.future.cancel():  # never started: no thread is lost
            return
        with self._lock:
            if job.finished:  # it returned just after the timeout: its thread is still good
                return
            job.abandoned = True
            self.abandoned += 1
            self._threads -= 1
            if not self._closed:
                self._spawn()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                result = job.fn()
            except BaseException as exc:  # handed to the caller, who decides what it costs
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)
            with self._lock:
                job.finished = True
                if job.abandoned:  # replaced while it hung: this thread leaves the pool
                    return

    def shutdown(self) -> None:
        """Let idle threads exit (hung ones leave when their call returns)."""
        with self._lock:
            self._closed = True
            count = self._threads
        for _ in range(count):
            self._jobs.put(None)
