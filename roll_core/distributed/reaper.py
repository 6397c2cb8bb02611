"""``python -m roll_core.distributed.reaper PID``: kill what PID's local Ray cluster leaves behind when PID dies.

When ``roll run`` is killed with ``kill -9`` it cannot shut Ray down. Ray's GCS, raylet and workers
notice and exit, but its dashboard and runtime-env agents hang on their way out (they try to
report the raylet's death to the dead GCS) and stay forever. This process, started by
:func:`roll_core.distributed.cluster.start_ray` in a session of its own, watches PID: it records PID's
descendant processes while PID lives, and when PID is gone (its end of our stdin pipe closes, on
any exit) it terminates those still running, then kills them. After a clean shutdown there is
nothing left to kill. A process is matched by PID *and* start time, so a reused PID is never hit.
Then it removes the weight-sync files in ``/dev/shm`` whose owners are gone
(:func:`roll_core.distributed.weight_files.remove_stale_weight_files`): the trainer killed with the run
could not.
"""

from __future__ import annotations

import os
import sys
import threading

#: seconds between two looks at the watched process's descendants
POLL_S = 0.5
#: seconds the leftovers get to exit after SIGTERM before SIGKILL
GRACE_S = 3.0


def main(argv: list[str]) -> int:
    import psutil

    try:
        parent = psutil.Process(int(argv[0]))
    except (IndexError, ValueError, psutil.Error):
        return 2
    seen: dict[int, float] = {}  # pid -> create_time
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                for child in parent.children(recursive=True):
                    if child.pid == os.getpid():
                        continue
                    try:
                        seen.setdefault(child.pid, child.create_time())
                    except psutil.Error:
                        pass
            except psutil.Error:  # the parent is gone
                return
            done.wait(POLL_S)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    sys.stdin.buffer.read()  # returns at EOF: the parent exited or was killed
    done.set()
    watcher.join(timeout=5)
    leftovers = []
    for pid, created in seen.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE:
                leftovers.append(process)
        except psutil.Error:
            continue
    for process in leftovers:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(leftovers, timeout=GRACE_S)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=GRACE_S)
    from roll_core.distributed.weight_files import remove_stale_weight_files

    remove_stale_weight_files()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
