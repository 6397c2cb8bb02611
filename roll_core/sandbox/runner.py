"""Run commands in an isolated process: :class:`Sandbox` (a work directory used by many runs) and
:func:`run_sandboxed` (one run in a fresh directory). docs/sandbox.md has the guarantees.

Each run starts ``launcher.py`` with the trainer's interpreter in isolated mode and an empty
environment; the launcher builds the namespaces and the file system and reports the program's
status on a pipe. This module reads the program's output under the limits and decides the reason.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from roll_core.errors import RollError
from roll_core.sandbox.limits import MEMORY_ERRORS, Limits, Result

logger = logging.getLogger("roll.sandbox")

LAUNCHER = Path(__file__).with_name("launcher.py")
#: where the work directory is inside the sandbox (the program's cwd and $HOME)
INSIDE_WORKDIR = "/sandbox"
#: the environment a program starts with: nothing of the trainer's (API keys stay out)
BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": INSIDE_WORKDIR, "LANG": "C.UTF-8",
            "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
#: root's sandboxes each take a user id from this range (RLIMIT_NPROC counts per user id)
UID_RANGE = (2_000_000, 3_000_000)
#: ``mode`` (or ``$ROLL_SANDBOX``) -> what isolates the program; see docs/sandbox.md
MODES = {
    "namespaces": "mount, network, PID, IPC and UTS namespaces, a private root file system, its own user id, "
                  "no capabilities, no_new_privs, resource limits (the default)",
    "rlimits": "resource limits, its own user id when roll runs as root, a clean environment and a fresh "
               "directory only: NO network or file-system isolation (explicit opt-in)",
}
ENV_MODE = "ROLL_SANDBOX"


class SandboxError(RollError):
    """The sandbox itself failed (not the program in it)."""


class SandboxUnavailable(SandboxError):
    """This machine cannot isolate programs the way the chosen mode needs; the message says why and what to do."""


def resolve_mode(mode: str | None = None) -> str:
    """``mode``, else ``$ROLL_SANDBOX``, else ``namespaces``; unknown names are an error naming the modes."""
    chosen = mode or os.environ.get(ENV_MODE) or "namespaces"
    if chosen not in MODES:
        raise SandboxError(f"unknown sandbox mode {chosen!r} (from {'the argument' if mode else '$' + ENV_MODE}); "
                           f"modes: " + "; ".join(f"{k}: {v}" for k, v in MODES.items()))
    return chosen


def _launcher_mode(mode: str) -> str:
    if mode == "rlimits":
        return "rlimits"
    return "root" if os.geteuid() == 0 else "userns"


def _unavailable_message(mode: str, error: str) -> str:
    how = {
        "root": ("roll runs as root without CAP_SYS_ADMIN (a container's default). Give the container that "
                 "capability (docker run --cap-add SYS_ADMIN --security-opt seccomp=unconfined, or --privileged), "
                 "or run the trainer as a non-root user on a kernel that allows unprivileged user namespaces"),
        "userns": ("unprivileged user namespaces are not allowed here. Enable them (sysctl "
                   "kernel.unprivileged_userns_clone=1 on Debian/Ubuntu, user.max_user_namespaces > 0, "
                   "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04; in Docker "
                   "--security-opt seccomp=unconfined), or run the trainer as root with CAP_SYS_ADMIN"),
    }[mode]
    return (f"the sandbox cannot isolate programs on this machine ({error}): {how}. roll refuses to run "
            f"untrusted code unisolated; to accept a sandbox WITHOUT network or file-system isolation set "
            f"{ENV_MODE}=rlimits (docs/sandbox.md).")


@functools.cache
def _probe(mode: str) -> str | None:
    """Run ``true`` once per process and mode: ``None`` when it works, else the launcher's error."""
    work = Path(tempfile.mkdtemp(prefix="roll-sandbox-probe-"))
    try:
        _launch(work, ["true"], mode=mode, uid=_pick_uid(), limits=Limits(wall_s=20), env={}, stdin=None,
                ro_binds=())
    except SandboxError as exc:
        return str(exc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return None


def check_available(mode: str | None = None) -> str:
    """The mode that will run programs; raises :class:`SandboxUnavailable` (why, and how to fix it) if none can."""
    mode = resolve_mode(mode)
    error = _probe(mode)
    if error is not None:
        raise SandboxUnavailable(_unavailable_message(_launcher_mode(mode), error))
    if mode == "rlimits":
        _warn_weak()
    return mode


@functools.lru_cache(maxsize=1)
def _warn_weak() -> None:
    logger.warning("sandbox mode 'rlimits' (%s=rlimits): sandboxed programs can use the network and read any file "
                   "their user id can read", ENV_MODE)


def _pick_uid() -> int:
    return random.SystemRandom().randrange(*UID_RANGE) if os.geteuid() == 0 else os.geteuid()


def python_executable() -> tuple[str, tuple[str, ...]]:
    """A Python interpreter the sandbox can run, and the host paths it needs bound read-only.

    The system's ``/usr/bin/python3`` when there is one (nothing extra to expose); otherwise the
    base interpreter of the trainer's Python (never its virtualenv: its site-packages are the
    trainer's files), with its installation prefix.
    """
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3", ()
    base = getattr(sys, "_base_executable", sys.executable)
    return os.path.realpath(base), (os.path.realpath(sys.base_prefix),)


class Sandbox:
    """A fresh work directory, seeded with ``files``, in which commands run isolated.

    Commands share the directory (files persist from one run to the next) and nothing else: each
    run is a new set of namespaces, so no process outlives its command. ``run`` never raises for
    what the program does; it raises :class:`SandboxError` only when the sandbox itself fails.

        with Sandbox({"data.txt": "a\\nb\\n"}) as box:
            result = box.run("wc -l data.txt")   # a string runs under bash -c
            result.stdout, result.reason         # '2 data.txt\\n', 'ok'
    """

    def __init__(self, files: Mapping[str, str | bytes] | None = None, *, limits: Limits | None = None,
                 mode: str | None = None, ro_binds: Sequence[str] = (), env: Mapping[str, str] | None = None):
        self.mode = check_available(mode)
        self.limits = limits or Limits()
        self.ro_binds = tuple(ro_binds)
        self.env = dict(env or {})
        self.uid = _pick_uid()
        self._base = Path(tempfile.mkdtemp(prefix="roll-sandbox-"))
        self._base.chmod(0o711)  # the rlimits mode's program (another uid) reaches work/ by its host path
        self._remove = weakref.finalize(self, shutil.rmtree, str(self._base), True)  # also if never closed
        self.path = self._base / "work"
        self.path.mkdir()
        self.write_files(files or {})

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write ``files`` (relative path -> content) into the work directory, owned by the sandbox's user."""
        for rel, content in files.items():
            target = self._resolve(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else content.encode())
        self._own()

    def read_text(self, rel: str, default: str | None = None) -> str | None:
        """A work-directory file's text (``default`` when missing or not a regular file)."""
        path = self.path / rel
        # a link the program made could point at the host's files: never followed
        if path.is_symlink() or not path.resolve().is_relative_to(self.path.resolve()) or not path.is_file():
            return default
        return path.read_text(errors="replace")

    def run(self, command: str | Sequence[str], *, stdin: str | bytes | None = None, limits: Limits | None = None,
            env: Mapping[str, str] | None = None) -> Result:
        """Run ``command`` (a string: ``bash -c``; a list: argv) in the work directory."""
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        return _launch(self.path, argv, mode=self.mode, uid=self.uid, limits=limits or self.limits,
                       env={**self.env, **(env or {})}, stdin=stdin, ro_binds=self.ro_binds)

    def close(self) -> None:
        """Remove the work directory (also done when the object is collected or the process exits)."""
        self._remove()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _resolve(self, rel: str) -> Path:
        target = (self.path / rel).resolve()
        if not target.is_relative_to(self.path.resolve()):
            raise SandboxError(f"{rel!r} is outside the sandbox's work directory")
        return target

    def _own(self) -> None:
        if os.geteuid() == 0:  # root's sandboxes run as a uid of their own; others as the user
            for root, dirs, names in os.walk(self.path):
                for name in (*dirs, *names):
                    os.lchown(os.path.join(root, name), self.uid, self.uid)
            os.chown(self.path, self.uid, self.uid)


def run_sandboxed(command: str | Sequence[str], files: Mapping[str, str | bytes] | None = None, *,
                  stdin: str | bytes | None = None, limits: Limits | None = None, mode: str | None = None,
                  ro_binds: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Result:
    """One run in a fresh sandbox, removed afterwards."""
    with Sandbox(files, limits=limits, mode=mode, ro_binds=ro_binds, env=env) as box:
        return box.run(command, stdin=stdin)


def _launch(workdir: Path, argv: list[str], *, mode: str, uid: int, limits: Limits, env: Mapping[str, str],
            stdin: str | bytes | None, ro_binds: Sequence[str]) -> Result:
    launcher_mode = _launcher_mode(mode)
    status_r, status_w = os.pipe()
    root = Path(tempfile.mkdtemp(prefix="roll-sandbox-root-"))
    spec = {
        "mode": launcher_mode, "argv": argv, "env": {**BASE_ENV, **env}, "uid": uid,
        "inner_uid": uid if launcher_mode == "root" else 1000, "inner_gid": uid if launcher_mode == "root" else 1000,
        "workdir": str(workdir), "root": str(root), "ro_binds": list(ro_binds), "tmp_mb": limits.tmp_mb,
        "limits": limits.for_launcher(), "status_fd": status_w,
        "cwd": str(workdir) if launcher_mode == "rlimits" else INSIDE_WORKDIR,
    }
    if launcher_mode == "rlimits":
        spec["env"]["HOME"] = str(workdir)
    stdin_file = tempfile.TemporaryFile()
    if stdin is not None:
        stdin_file.write(stdin if isinstance(stdin, bytes) else stdin.encode())
        stdin_file.seek(0)
    started = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", str(LAUNCHER)], stdin=stdin_file,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(status_w,),
                                env={"ROLL_SANDBOX_SPEC": json.dumps(spec)},
                                cwd="/", start_new_session=True)
    finally:
        os.close(status_w)
        stdin_file.close()
    try:
        out, err, stopped = _collect(proc, started + limits.wall_s, limits.output_bytes)
        wall = time.monotonic() - started
        with os.fdopen(status_r, "rb") as f:
            lines = f.read().decode(errors="replace").strip().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    status = json.loads(lines[-1]) if lines else {}
    if "error" in status:
        raise SandboxError(f"the sandbox could not start ({launcher_mode} mode): {status['error']}")
    if not status and stopped is None:
        raise SandboxError(f"the sandbox's launcher exited ({proc.returncode}) without a status: "
                           f"{err[-2000:].decode(errors='replace')}")
    return _result(status, stopped, out, err, limits, wall, mode)


def _collect(proc: subprocess.Popen, deadline: float, cap: int) -> tuple[bytes, bytes, str | None]:
    """Read stdout and stderr until both close, the deadline passes or one passes ``cap`` bytes
    (then the sandbox is killed). Returns the kept bytes and why it was stopped, if it was."""
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    stopped = None
    with selectors.DefaultSelector() as sel:
        for stream in kept:
            sel.register(stream, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                stopped = "timeout"
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = kept[key.fileobj]
                buf += chunk[: max(0, cap + 1 - len(buf))]
                if len(buf) > cap:
                    stopped = "output_limit"
            if stopped:
                break
    if stopped:
        _kill(proc)
    else:  # both streams closed: the program and everything it started are gone
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped = "timeout"
            _kill(proc)
    for stream in kept:
        stream.close()
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), stopped


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher's session; the sandbox's init dies with its parent (PDEATHSIG), and the
    kernel kills every process of the sandbox's PID namespace with it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _result(status: dict, stopped: str | None, out: bytes, err: bytes, limits: Limits, wall: float,
            mode: str) -> Result:
    cap = limits.output_bytes
    truncated = len(out) > cap or len(err) > cap
    stdout = out[:cap].decode(errors="replace")
    stderr = err[:cap].decode(errors="replace")
    code, sig = status.get("exit_code"), status.get("signal")
    cpu = status.get("cpu_s")
    if stopped:
        reason = stopped
    elif sig in (signal.SIGXCPU,) or (sig == signal.SIGKILL and limits.cpu_s and cpu and cpu >= limits.cpu_s):
        reason = "cpu_limit"
    elif code != 0 and any(m in stderr[-4000:] for m in MEMORY_ERRORS):
        reason = "memory_limit"
    elif sig is not None:
        reason = "signal"
    else:
        reason = "ok" if code == 0 else "exit_nonzero"
    if truncated:
        note = f"\n[output truncated at {cap} bytes]"
        stdout, stderr = (stdout + note if len(out) > cap else stdout), (stderr + note if len(err) > cap else stderr)
    return Result(reason=reason, exit_code=code, signal=sig, stdout=stdout, stderr=stderr, truncated=truncated,
                  wall_s=wall, cpu_s=cpu, mode=mode, notes=list(status.get("skipped", [])), wall_limit_s=limits.wall_s)
