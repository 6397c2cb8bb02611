"""The threading pieces the engine-backed infer strategies share (roll_core.strategies.concurrency)."""

from __future__ import annotations

import asyncio
import atexit
import gc
import threading
import time

import pytest

from roll_core.strategies.concurrency import AbortTracker, BackgroundLoop, WeightGate, shutdown_at_exit

WAIT = 5.0  # seconds any expected event may take on a loaded machine
BLOCKED = 0.2  # how long "does not get in" is watched


def in_thread(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_readers_share_the_gate():
    gate, together = WeightGate(), threading.Barrier(3, timeout=WAIT)

    def reader():
        with gate.shared():
            together.wait()  # breaks (BrokenBarrierError) unless all three are inside at once

    threads = [in_thread(reader) for _ in range(2)]
    with gate.shared():
        together.wait()
    for t in threads:
        t.join(WAIT)
    assert not together.broken


def test_a_writer_waits_for_readers_and_excludes_them():
    gate, release, entered = WeightGate(), threading.Event(), threading.Event()
    inside: list[str] = []

    def reader():
        with gate.shared():
            inside.append("reader")
            release.wait(WAIT)
            inside.remove("reader")

    def writer():
        with gate.exclusive():
            entered.set()
            assert inside == []

    r = in_thread(reader)
    while not inside:
        time.sleep(0.01)
    w = in_thread(writer)
    assert not entered.wait(BLOCKED)  # the reader still holds the gate
    release.set()
    assert entered.wait(WAIT)
    for t in (r, w):
        t.join(WAIT)


def test_a_waiting_writer_goes_before_new_readers():
    gate, release = WeightGate(), threading.Event()
    order: list[str] = []
    first_in = threading.Event()

    def first_reader():
        with gate.shared():
            first_in.set()
            release.wait(WAIT)
            order.append("first reader")

    def writer():
        with gate.exclusive():
            order.append("writer")

    def late_reader():
        with gate.shared():
            order.append("late reader")

    threads = [in_thread(first_reader)]
    assert first_in.wait(WAIT)
    threads.append(in_thread(writer))
    while not gate._writers_waiting:  # the writer is queued
        time.sleep(0.01)
    threads.append(in_thread(late_reader))
    time.sleep(BLOCKED)
    assert order == []  # the late reader waits behind the writer, though only a reader holds the gate
    release.set()
    for t in threads:
        t.join(WAIT)
    assert order == ["first reader", "writer", "late reader"]


def test_writers_exclude_each_other_and_errors_release_the_gate():
    gate, release, second_in = WeightGate(), threading.Event(), threading.Event()

    def holder():
        with gate.exclusive():
            release.wait(WAIT)

    def second():
        with gate.exclusive():
            second_in.set()

    h = in_thread(holder)
    time.sleep(0.05)
    s = in_thread(second)
    assert not second_in.wait(BLOCKED)
    release.set()
    assert second_in.wait(WAIT)
    for t in (h, s):
        t.join(WAIT)

    for section in (gate.shared, gate.exclusive):
        with pytest.raises(ValueError), section():
            raise ValueError("boom")
    with gate.exclusive():  # neither failure left the gate held
        pass


def test_background_loop_runs_coroutines_from_any_thread_and_closes():
    loop = BackgroundLoop("roll-test-loop")
    try:
        async def where(x):
            await asyncio.sleep(0.01)
            return x, threading.current_thread().name

        assert loop.run(where(1)) == (1, "roll-test-loop")
        results: list = []
        threads = [in_thread(lambda i=i: results.append(loop.run(where(i))[0])) for i in range(4)]
        for t in threads:
            t.join(WAIT)
        assert sorted(results) == [0, 1, 2, 3]

        async def fail():
            raise KeyError("inside")

        with pytest.raises(KeyError, match="inside"):
            loop.run(fail())
        assert loop.submit(where(7)).result(WAIT) == (7, "roll-test-loop")
        called = threading.Event()
        loop.call_soon(called.set)
        assert called.wait(WAIT)
    finally:
        loop.close()
    assert loop.closed and not loop._thread.is_alive()
    loop.close()  # idempotent


def test_shutdown_at_exit_holds_its_owner_weakly(monkeypatch):
    registered: list = []
    monkeypatch.setattr(atexit, "register", lambda fn, *args: registered.append((fn, args)))

    class Owner:
        calls = 0

        def shutdown(self):
            Owner.calls += 1

    alive, gone = Owner(), Owner()
    shutdown_at_exit(alive)
    shutdown_at_exit(gone)
    del gone
    gc.collect()
    for fn, args in registered:
        fn(*args)
    assert Owner.calls == 1  # only the owner still alive at exit was shut down


def test_abort_tracker_all_and_named():
    tracker = AbortTracker()
    with tracker.generation(["a", "b"]) as epoch:
        with tracker.engine_request("a") as a1, tracker.engine_request("a") as a2, tracker.engine_request("b") as b1:
            assert len({a1, a2, b1}) == 3 and a1.startswith("a#") and b1.startswith("b#")
            assert sorted(tracker.abort(["a", "not-running"])) == sorted([a1, a2])
            assert tracker.is_aborted("a", epoch) and not tracker.is_aborted("b", epoch)
            assert sorted(tracker.abort()) == sorted([a1, a2, b1])
            assert tracker.is_aborted("b", epoch)  # aborting everything bumps the epoch
        assert tracker.abort() == []  # nothing in flight any more
    with tracker.generation(["a"]) as later:
        assert not tracker.is_aborted("a", later)  # a new call starts clean: its aborts were forgotten
