"""Shared-memory weight files and their owners: a file names the process that writes it, so files left
by dead runs can be found and removed without touching a live run's.

Low in the layers (the reaper, which runs after a killed run, sweeps them). :class:`OwnedPaths` makes
such files and directories: the trainer's handoff file (:mod:`roll_core.workers.weight_handoff`) and
what inference engines read weights or adapters from (vLLM's).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil

logger = logging.getLogger(__name__)

#: where shared-memory weights are written (tmpfs on Linux)
SHM_DIR = "/dev/shm"
#: a handoff file's name: its owner's pid and start time (centiseconds since the epoch), then a tag
SHM_NAME = "roll-weights-{pid}-{start}-{tag}"
_SHM_NAME = re.compile(r"^roll-weights-(?P<pid>\d+)-(?P<start>\d+)-.+$")


def process_start(pid: int) -> int | None:
    """``pid``'s start time in centiseconds since the epoch; None when no such process runs (a zombie
    is dead); -1 when it cannot be read (another user's process: taken as alive)."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return round(process.create_time() * 100)
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:
        return -1


def remove_stale_weight_files(directory: str = SHM_DIR) -> list[str]:
    """Remove the handoff files (``roll-weights-<pid>-<start>-<tag>``) whose owning process is gone,
    logged in one line; returns their paths. A file stays when its owner lives (same pid, same start
    time), when a process holds the lock its writer takes on it (a writer this process cannot see),
    or when its name names no owner. An owned directory (:class:`OwnedPaths`) goes the same way, with
    what it holds."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    removed, freed = [], 0
    for name in names:
        match = _SHM_NAME.match(name)
        if match is None:
            continue
        start = process_start(int(match["pid"]))
        if start is not None and (start == -1 or abs(start - int(match["start"])) <= 1):
            continue  # its owner lives
        path = os.path.join(directory, name)
        if _locked(path):
            continue  # its owner lives where this process cannot see it (another pid namespace)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                size = _tree_size(path)
                shutil.rmtree(path)
            else:
                size = os.stat(path).st_size
                os.unlink(path)
        except OSError:  # removed meanwhile, or not ours to remove
            continue
        removed.append(path)
        freed += size
    if removed:
        logger.warning("weight sync: removed %d weight file(s) left by dead runs (%.2f GB): %s", len(removed),
                       freed / 1e9, ", ".join(removed))
    return removed


def _tree_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _locked(path: str) -> bool:
    """Whether a process holds the lock its writer takes on the file (an unreadable file counts as locked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def owned_file_name(tag: str) -> str:
    """The handoff file name of this process (see :func:`remove_stale_weight_files`)."""
    return SHM_NAME.format(pid=os.getpid(), start=process_start(os.getpid()), tag=tag)


class OwnedPaths:
    """Files and directories this process writes in shared memory for another process to read, named
    for their owner (:func:`owned_file_name`) and locked while they live, as the weight handoff's file.

    :meth:`remove_all` removes them when their user is done (a strategy's shutdown); should this
    process die first (a killed actor), :func:`remove_stale_weight_files` removes them: at the next
    :meth:`create` of any owner on the machine, and in the driver's reaper after the run.
    ``parent``: where they are made (``/dev/shm`` by default; files there never touch the disk).
    """

    def __init__(self, parent: str = SHM_DIR):
        self.parent = parent
        self.locks: dict[str, int] = {}  # path -> the open, locked descriptor that keeps it owned

    def create(self, tag: str, *, directory: bool = False, size: int = 0) -> str:
        """A new empty file (or directory) named for this process and ``tag`` (unique among the live
        ones of this process), after removing what dead owners left in ``parent``; returns its path.
        ``size``: bytes reserved for a file now, so a full ``/dev/shm`` fails here (ENOSPC, nothing
        left behind) rather than as SIGBUS on a later write through a mapping."""
        remove_stale_weight_files(self.parent)  # room for this one: what killed runs left behind goes first
        path = os.path.join(self.parent, owned_file_name(tag))
        if directory:
            os.mkdir(path, 0o700)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        else:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held while this process lives: see remove_stale_weight_files
            if size and not directory:
                os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            _remove(path)
            raise
        self.locks[path] = fd
        return path

    def remove(self, path: str | None) -> None:
        """Remove ``path`` (one of :meth:`create`'s; gone already is fine) and release its lock."""
        if path is None:
            return
        fd = self.locks.pop(path, None)
        try:
            _remove(path)
        finally:
            if fd is not None:
                os.close(fd)

    def remove_all(self) -> None:
        for path in list(self.locks):
            self.remove(path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
