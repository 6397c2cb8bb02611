"""The sandbox against hostile programs: real processes, real limits, each run a few seconds at most.

Each test shows one attack contained (a counted reason, nothing escapes) and that the caller goes on.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from roll_core.sandbox import REASONS, Limits, Sandbox, SandboxUnavailable, check_available, run_sandboxed

pytestmark = pytest.mark.sandbox

FAST = Limits(wall_s=4, cpu_s=2, memory_mb=256, processes=32, output_bytes=4096)


def py(code: str, **kw) -> object:
    return run_sandboxed(["python3", "-c", textwrap.dedent(code)], limits=kw.pop("limits", FAST), **kw)


def processes_of(uid: int) -> list[int]:
    """Host processes still running as ``uid`` (the sandbox's own user id under root)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "status").read_text().split("Uid:")[1].split()[0] == str(uid):
                pids.append(int(entry.name))
        except (OSError, IndexError):
            pass
    return pids


def test_a_plain_command_runs_in_its_work_directory():
    result = run_sandboxed("wc -l < data.txt; pwd; printf err >&2; head -c 3 /dev/zero | wc -c; echo gone >/dev/null;"
                           " exit 3", {"data.txt": "a\nb\nc\n"})
    assert (result.stdout, result.stderr, result.exit_code, result.reason) == ("3\n/sandbox\n3\n", "err", 3,
                                                                               "exit_nonzero")
    assert result.reason in REASONS and result.mode == "namespaces"


def test_files_persist_between_runs_of_one_sandbox_and_nothing_else_does():
    with Sandbox() as box:
        assert box.run("echo 42 > answer.txt; sleep 30 & echo started").stdout == "started\n"
        assert box.read_text("answer.txt") == "42\n"
        later = box.run("cat answer.txt; ps -e -o comm= | grep -c sleep || true")
        assert later.stdout == "42\n0\n"  # the background sleep died with its command


def test_an_infinite_loop_is_stopped_at_its_cpu_limit_and_a_sleeper_at_its_wall_limit():
    started = time.monotonic()
    spin = py("while True: pass", limits=FAST.with_(cpu_s=1, wall_s=60))  # wall: room for a loaded machine
    assert spin.reason == "cpu_limit" and spin.cpu_s > 0.5  # RLIMIT_CPU counts in ticks
    sleeper = run_sandboxed("sleep 100", limits=FAST.with_(wall_s=1.5))
    assert sleeper.reason == "timeout" and 1.5 <= sleeper.wall_s < 10
    assert time.monotonic() - started < 90


def test_a_fork_bomb_is_capped_then_killed_and_leaves_no_process_behind():
    with Sandbox(limits=FAST.with_(wall_s=3, processes=16)) as box:
        bomb = box.run(":(){ :|:& };:; sleep 10")
        assert bomb.reason == "timeout"
        time.sleep(0.2)
        assert processes_of(box.uid) == [] if os.geteuid() == 0 else True
        counted = box.run(["python3", "-c", textwrap.dedent("""
            import os, time
            n = 0
            try:
                while True:
                    if os.fork() == 0:
                        time.sleep(5); os._exit(0)
                    n += 1
            except OSError as e:
                print(n, e.errno)
        """)])
        forked, errno = counted.stdout.split()
        assert int(forked) < 16 and errno == "11"  # EAGAIN at the process limit
        assert box.run("echo alive").stdout == "alive\n"


def test_a_1_gb_allocation_fails_with_memory_limit():
    result = py("x = bytearray(1 << 30); print('allocated')")
    assert result.reason == "memory_limit" and "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_100_mb_of_output_is_truncated_and_stopped_quickly():
    started = time.monotonic()
    result = py("import sys\nfor _ in range(100): sys.stdout.write('x' * (1 << 20))")
    assert result.reason == "output_limit" and result.truncated
    assert result.stdout.startswith("x" * 4096) and result.stdout.endswith("[output truncated at 4096 bytes]")
    assert time.monotonic() - started < 4


def test_files_outside_the_sandbox_cannot_be_read(tmp_path):
    secret = tmp_path / "run" / "secret.txt"  # stands for the run's directory
    secret.parent.mkdir()
    secret.write_text("TOPSECRET")
    paths = [str(secret), "/etc/shadow", "/etc/hostname", "/root", sys.prefix, os.path.dirname(os.path.abspath(
        __file__)), "/proc/1/environ", "/sys/class"]
    result = py(f"""
        import os
        for p in {paths!r}:
            try:
                print(p, 'READ', open(p).read(50) if os.path.isfile(p) else os.listdir(p)[:3])
            except OSError as e:
                print(p, 'denied', e.strerror)
    """)
    assert "TOPSECRET" not in result.stdout
    lines = result.stdout.splitlines()
    assert len(lines) == len(paths) and all(" denied " in line for line in lines), result.stdout


def test_the_trainers_environment_variables_do_not_leak(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-roll-test-0123456789")
    monkeypatch.setenv("WANDB_API_KEY", "fake-wandb-key")
    result = run_sandboxed("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'", limits=FAST)
    assert result.ok and "PATH=" in result.stdout
    assert "sk-fake-roll-test" not in result.stdout + result.stderr and "fake-wandb" not in result.stdout


def test_writes_outside_the_work_directory_fail_or_vanish(tmp_path):
    outside = tmp_path / "escaped.txt"
    targets = [str(outside), "/etc/escaped", "/usr/escaped", "/escaped", "/dev/escaped"]
    result = py(f"""
        for p in {targets!r}:
            try:
                open(p, 'w').write('x'); print(p, 'WROTE')
            except OSError as e:
                print(p, 'denied')
        open('/tmp/scratch', 'w').write('private tmp works')
        open('/sandbox/inside.txt', 'w').write('ok')
    """)
    assert result.ok and result.stdout.count("denied") == len(targets), result.stdout
    assert not outside.exists() and not Path("/escaped").exists() and not Path("/tmp/scratch").exists()


def test_sockets_reach_neither_the_hosts_loopback_nor_the_internet():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        result = py(f"""
            import socket
            for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 80), ('8.8.8.8', 53)):
                s = socket.socket()
                s.settimeout(1)
                try:
                    s.connect((host, port)); print(host, 'CONNECTED')
                except OSError as e:
                    print(host, 'failed', e.errno)
            try:
                socket.getaddrinfo('example.com', 80); print('RESOLVED')
            except OSError:
                print('no dns')
        """)
        assert result.stdout.splitlines() == ["127.0.0.1 failed 101", "1.1.1.1 failed 101", "8.8.8.8 failed 101",
                                              "no dns"]  # ENETUNREACH: no interface is up, nothing is sent
        with pytest.raises(BlockingIOError):
            listener.accept()  # the host's listener saw no connection
    finally:
        listener.close()


def test_new_namespaces_tracing_and_kernel_keyrings_are_denied_by_seccomp():
    """A user namespace of its own would give the program capabilities over it (mounts, more kernel
    surface): unshare, clone with namespace flags, ptrace and keyctl get EPERM; fork and threads work."""
    result = py("""
        import ctypes, os, subprocess, threading
        libc = ctypes.CDLL(None, use_errno=True)
        def errno(ret):
            return ctypes.get_errno() if ret == -1 else 0
        print(errno(libc.unshare(0x10000000)), errno(libc.ptrace(16, 1, 0, 0)), errno(libc.syscall(250, 0, 0, 0, 0)))
        print(subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode)
        thread = threading.Thread(target=print, args=("thread",)); thread.start(); thread.join()
    """)
    assert result.stdout.splitlines() == ["1 1 1", "1", "thread"], result.stdout + result.stderr  # 1: EPERM
    assert not any("seccomp" in note for note in result.notes)


def test_stdin_reaches_the_program():
    assert run_sandboxed(["python3", "-c", "print(int(input()) * 2)"], stdin="21\n").stdout == "42\n"


def test_paths_outside_the_work_directory_are_refused_on_the_host_side():
    with Sandbox() as box, pytest.raises(Exception, match="outside the sandbox"):
        box.write_files({"../escape.txt": "x"})
    with Sandbox() as box:
        box.run("ln -s /etc/passwd link")
        assert box.read_text("link") is None  # a link the program made is not followed on the host


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="needs root (to become another user), setpriv and a system python3")
def test_a_non_root_user_gets_the_user_namespace_path():
    """The sandbox's modules (standard library only) copied where uid 65534 can read them, run by it."""
    import roll_core.errors
    import roll_core.sandbox

    tree = Path(tempfile.mkdtemp(prefix="roll-sandbox-nonroot-"))
    try:
        shutil.copytree(Path(roll_core.sandbox.__file__).parent, tree / "roll_core" / "sandbox",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(roll_core.errors.__file__, tree / "roll_core" / "errors.py")
        (tree / "roll_core" / "__init__.py").write_text("")  # the real one imports pluggy, which is not needed
        for path in (tree, *tree.rglob("*")):
            path.chmod(0o755)
        code = ("from roll_core.sandbox import run_sandboxed\n"
                "r = run_sandboxed('id -u; cat /etc/shadow 2>&1 | head -1; ls /root 2>&1; "
                "cat /proc/1/environ >/dev/null 2>&1 || echo environ-denied')\n"
                "print(r.reason, r.mode, r.stdout.split()[0], 'root:' in r.stdout, 'environ-denied' in r.stdout)")
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                              code], capture_output=True, text=True, timeout=60, cwd="/",
                             env={"PYTHONPATH": str(tree), "HOME": "/tmp", "PATH": "/usr/bin:/bin"})
    finally:
        shutil.rmtree(tree)
    assert out.stdout.split() == ["ok", "namespaces", "1000", "False", "True"], out.stdout + out.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_without_namespaces_it_refuses_naming_the_fix_unless_told_to_run_weaker():
    code = ("from roll_core.sandbox import run_sandboxed, SandboxUnavailable\n"
            "try:\n    run_sandboxed('true')\nexcept SandboxUnavailable as e:\n    print('REFUSED', e)\n"
            "r = run_sandboxed('curl --version >/dev/null 2>&1; echo weak', mode='rlimits')\n"
            "print(r.reason, r.mode, r.stdout.strip())")
    out = subprocess.run(["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", sys.executable, "-c",
                          code], capture_output=True, text=True, timeout=60, cwd="/")
    assert out.stdout.startswith("REFUSED the sandbox cannot isolate programs"), out.stdout + out.stderr
    assert "CAP_SYS_ADMIN" in out.stdout and "ROLL_SANDBOX=rlimits" in out.stdout
    assert out.stdout.splitlines()[-1] == "ok rlimits weak"


def test_unknown_modes_are_named():
    with pytest.raises(Exception, match="unknown sandbox mode 'chroot'.*namespaces"):
        check_available("chroot")
    assert issubclass(SandboxUnavailable, Exception)


def test_without_a_system_python_the_trainers_base_interpreter_is_bound_read_only(monkeypatch):
    from roll_core.sandbox import python_executable, runner

    real_exists = os.path.exists
    monkeypatch.setattr(runner.os.path, "exists", lambda p: p != "/usr/bin/python3" and real_exists(p))
    python, binds = python_executable()
    assert binds == (os.path.realpath(sys.base_prefix),) and python.startswith(binds[0])
    monkeypatch.undo()
    result = run_sandboxed([python, "-c", f"import sys; print(sys.version_info[:2] == {sys.version_info[:2]!r})"],
                           ro_binds=binds, limits=FAST)
    assert (result.reason, result.stdout) == ("ok", "True\n"), result.stderr
    assert not run_sandboxed(["sh", "-c", f"echo x > {binds[0]}/escaped"], ro_binds=binds, limits=FAST).ok
