"""The sandbox's launcher: a standalone script (standard library only) that the runner starts as
``python -I -S launcher.py`` with the run's spec (JSON) as its only environment variable, so
nothing of the trainer (threads, imports, environment) reaches the sandboxed program. The spec is
not in argv (``/proc/1/cmdline`` is readable inside), and the launcher makes itself non-dumpable
(its memory and ``environ`` are closed to the program even where both share a host uid).

What it does, in order (docs/sandbox.md has the why):

1. new mount, network, PID, IPC and UTS namespaces: as root directly (``CAP_SYS_ADMIN``), as any
   other user inside a new user namespace;
2. the first process of the new PID namespace (the sandbox's init) builds a root file system on
   a small tmpfs: the host's ``/usr`` (and the ``/bin``, ``/lib``... links or directories) and the
   extra ``ro_binds`` read-only, a made-up ``/etc`` with a handful of read-only files, ``/dev``
   with null/zero/full/random/urandom, a fresh ``/proc``, a private size-limited ``/tmp``, and the
   work directory read-write at ``/sandbox``; then ``pivot_root`` into it and drops the host's tree;
3. the init forks the program: resource limits, a new session, every file descriptor above 2
   closed, a user id of its own with no capabilities (root: ``setuid`` to the sandbox's uid;
   others: a nested user namespace mapping them to uid 1000), ``no_new_privs``, a seccomp filter
   (:data:`DENIED_SYSCALLS`, when libseccomp is installed), then ``execve`` with the environment
   the runner chose;
4. the init reaps every process, and when the program exits it writes the program's status as
   one JSON line to ``status_fd`` and exits: the kernel kills whatever the program left running.

Every step that fails writes ``{"error": ...}`` and exits non-zero; the runner raises it. The
``rlimits`` mode (an explicit opt-in) skips steps 1-2: limits, session and user id only.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SPEC_VARIABLE = "ROLL_SANDBOX_SPEC"
#: pivot_root has no libc wrapper; where the number is unknown the root is moved and chroot'ed into
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
#: statvfs flags -> mount flags a read-only remount must keep (a user namespace may not drop them)
KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
              (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))
#: the host's top-level system directories the sandbox sees (read-only), or their links into /usr
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: the only host files under /etc the sandbox sees (read-only): the dynamic linker's cache and the
#: alternatives links (awk, editors); passwd, group and hosts are written fresh
ETC_BINDS = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")
DEVICES = ("null", "zero", "full", "random", "urandom")
RLIMITS = {"cpu_s": resource.RLIMIT_CPU, "memory_mb": resource.RLIMIT_AS, "processes": resource.RLIMIT_NPROC,
           "file_size_mb": resource.RLIMIT_FSIZE, "open_files": resource.RLIMIT_NOFILE}
INNER_UID = 1000  # what a non-root user is inside the sandbox
#: system calls the program gets EPERM for (seccomp, through libseccomp when it is installed): new
#: namespaces and mounts (a user namespace would hand the program capabilities over it), tracing,
#: kernel keyrings, modules, BPF, perf, userfaultfd, io_uring and other rarely needed kernel surface
DENIED_SYSCALLS = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
                   "fsopen", "fsmount", "fsconfig", "fspick", "ptrace", "process_vm_readv", "process_vm_writev",
                   "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
                   "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module",
                   "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl",
                   "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "lookup_dcookie", "personality")
SCMP_ACT_ALLOW, SCMP_ACT_ERRNO_EPERM = 0x7FFF0000, 0x00050000 | 1
SCMP_CMP_MASKED_EQ = 7


class _ArgCmp(ctypes.Structure):  # libseccomp's struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _load_seccomp() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def _apply_seccomp(lib: ctypes.CDLL) -> None:
    """Deny :data:`DENIED_SYSCALLS` and clone/clone3 with new namespaces; everything else is allowed."""
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SetupError("seccomp_init failed")
    try:
        for name in DENIED_SYSCALLS:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number >= 0:  # a call this architecture does not have needs no rule
                _check(-lib.seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO_EPERM, number, 0, None), f"seccomp {name}")
        clone = lib.seccomp_syscall_resolve_name(b"clone")
        for flag in (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET):
            cmp = _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag)
            _check(-lib.seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO_EPERM, clone, 1, ctypes.byref(cmp)), "seccomp clone")
        clone3 = lib.seccomp_syscall_resolve_name(b"clone3")
        if clone3 >= 0:  # its flags are behind a pointer: ENOSYS makes libc fall back to clone, filtered above
            _check(-lib.seccomp_rule_add_array(ctx, 0x00050000 | 38, clone3, 0, None), "seccomp clone3")
        _check(-lib.seccomp_load(ctx), "seccomp_load")
    finally:
        lib.seccomp_release(ctx)

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)} (errno {err})")


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = _enc
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source or fstype or ''} on {target}")


def _bind(source: str, target: str, *, readonly: bool, device: bool = False) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    kept = os.statvfs(target).f_flag
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (0 if device else MS_NODEV) | (MS_RDONLY if readonly else 0)
    flags |= sum(ms for st, ms in KEPT_FLAGS if kept & st)
    _mount(None, target, None, flags)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _map_ids(inside: int, outside_uid: int, outside_gid: int) -> None:
    """Map one id of the user namespace just entered (the only mapping an unprivileged user may write)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{inside} {outside_uid} 1")
    _write("/proc/self/gid_map", f"{inside} {outside_gid} 1")


def _build_root(spec: dict) -> list[str]:
    """Mount the sandbox's file system at spec["root"] and pivot into it; returns what was left out."""
    root, skipped = spec["root"], []
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,mode=0755")
    for name in SYSTEM_DIRS:
        host = "/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), os.path.join(root, name))
        elif os.path.isdir(host):
            _bind(host, os.path.join(root, name), readonly=True)
    for path in spec.get("ro_binds", ()):
        if os.path.exists(path):
            _bind(path, root + os.path.abspath(path), readonly=True)
    etc = os.path.join(root, "etc")
    os.makedirs(etc)
    for name in ETC_BINDS:
        if os.path.exists("/etc/" + name):
            _bind("/etc/" + name, os.path.join(etc, name), readonly=True)
    uid, gid = spec["inner_uid"], spec["inner_gid"]
    _write(os.path.join(etc, "passwd"), f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:sandbox:/sandbox:"
                                        "/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    _write(os.path.join(etc, "group"), f"root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n")
    _write(os.path.join(etc, "hosts"), "127.0.0.1 localhost sandbox\n::1 localhost\n")
    dev = os.path.join(root, "dev")
    os.makedirs(dev)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        _bind("/dev/" + name, os.path.join(dev, name), readonly=False, device=True)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{i}", os.path.join(dev, name))
    os.symlink("/proc/self/fd", os.path.join(dev, "fd"))
    os.makedirs(os.path.join(dev, "shm"))
    _mount("tmpfs", os.path.join(dev, "shm"), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           f"size={spec['tmp_mb']}m,mode=1777")
    os.makedirs(os.path.join(root, "proc"))
    try:
        _mount("proc", os.path.join(root, "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except SetupError as exc:  # e.g. a container that masks parts of the host's /proc
        skipped.append(f"/proc ({exc})")
    os.makedirs(os.path.join(root, "tmp"))
    _mount("tmpfs", os.path.join(root, "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['tmp_mb']}m,mode=1777")
    _bind(spec["workdir"], os.path.join(root, "sandbox"), readonly=False)
    os.chdir(root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is not None:
        _check(_libc.syscall(number, b".", b"."), "pivot_root")  # the old root is stacked under the new one
        _check(_libc.umount2(b".", MNT_DETACH), "detach the host's root")
    else:
        _mount(".", "/", None, 1 << 13)  # MS_MOVE
        os.chroot(".")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _check(_libc.sethostname(b"sandbox", 7), "sethostname")
    return skipped


def _which(program: str, path: str) -> str:
    """``program`` looked up on ``path`` (os.execvpe would import modules the new root does not have)."""
    if "/" in program:
        return program
    for folder in path.split(":"):
        candidate = os.path.join(folder or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(program)


def _exec_program(spec: dict, status_fd: int, seccomp: ctypes.CDLL | None) -> None:
    """In the forked child: limits, session, identity, then the program. Never returns."""
    try:
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own id maps (userns); execve decides for the program
        os.setsid()
        os.closerange(3, 1 << 16)
        for key, which in RLIMITS.items():
            value = spec["limits"].get(key)
            if value is not None:
                value = int(value) * (1 << 20) if key.endswith("_mb") else int(value)
                hard = value + 1 if key == "cpu_s" else value  # SIGXCPU at the soft limit, SIGKILL a second later
                resource.setrlimit(which, (value, hard))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        if spec["mode"] == "userns":
            _check(_libc.unshare(CLONE_NEWUSER), "a nested user namespace")
            _map_ids(INNER_UID, 0, 0)
        elif os.geteuid() == 0:
            os.setgroups([])
            os.setgid(spec["uid"])
            os.setuid(spec["uid"])  # from root to a plain uid: every capability is gone
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        if seccomp is not None:
            _apply_seccomp(seccomp)
        os.chdir(spec["cwd"])
        os.execve(_which(spec["argv"][0], spec["env"].get("PATH", "")), spec["argv"], spec["env"])
    except FileNotFoundError:
        os.write(2, f"sandbox: {spec['argv'][0]}: command not found\n".encode())
        os._exit(127)
    except Exception as exc:  # noqa: BLE001 - reported to the caller, whatever it is
        os.write(2, f"sandbox: cannot start {spec['argv'][0]}: {exc}\n".encode())
        os._exit(126)


def _init(spec: dict, status_fd: int) -> int:
    """PID 1 of the sandbox: build the root, run the program, reap everyone, report its status."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    seccomp = _load_seccomp() if spec["mode"] != "rlimits" else None  # before the host's /usr is gone
    skipped = _build_root(spec) if spec["mode"] != "rlimits" else []
    if seccomp is None and spec["mode"] != "rlimits":
        skipped.append("seccomp (libseccomp.so.2 not found: install libseccomp2)")
    child = os.fork()
    if child == 0:
        _exec_program(spec, status_fd, seccomp)
    while True:
        pid, status, usage = os.wait4(-1, 0)
        if pid == child:
            break
    report = {"cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_kb": usage.ru_maxrss, "skipped": skipped}
    if os.WIFSIGNALED(status):
        report["signal"] = os.WTERMSIG(status)
    else:
        report["exit_code"] = os.WEXITSTATUS(status)
    os.write(status_fd, (json.dumps(report) + "\n").encode())
    return 0


def main() -> int:
    spec = json.loads(os.environ.pop(SPEC_VARIABLE))
    status_fd = spec["status_fd"]
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if spec["mode"] == "rlimits":
            return _init(spec, status_fd)
        flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
        if spec["mode"] == "userns":
            uid, gid = os.geteuid(), os.getegid()
            _check(_libc.unshare(flags | CLONE_NEWUSER), "unshare a user namespace")
            _map_ids(0, uid, gid)
        else:
            _check(_libc.unshare(flags), "unshare namespaces as root")
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # after the id maps: a non-dumpable process cannot write its own
        pid = os.fork()
        if pid == 0:
            try:
                os._exit(_init(spec, status_fd))
            except BaseException as exc:  # noqa: BLE001 - any failure of the setup is reported
                os.write(status_fd, (json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    except Exception as exc:  # noqa: BLE001
        os.write(status_fd, (json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
        return 1


if __name__ == "__main__":
    sys.exit(main())
