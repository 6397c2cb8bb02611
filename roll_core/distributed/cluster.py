"""The Ray cluster a run uses, and what its errors look like to the user.

:func:`start_ray` starts a local cluster (``roll run``, ``roll rollout``, the test fixtures) or
joins the one at ``address`` / ``RAY_ADDRESS``. A cluster roll starts for itself is private to
the machine and to the run:

* every Ray server (GCS, raylets, workers) listens on 127.0.0.1 only: nothing on the network can
  reach it (Ray's own switch, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes Ray use the
  loopback address as the node's address);
* Ray's token authentication is on, with a random token made for this run and handed to Ray's
  processes in their environment (nothing is written to ``~/.ray``), unless ``RAY_AUTH_MODE`` or a
  token (``RAY_AUTH_TOKEN`` / ``RAY_AUTH_TOKEN_PATH``) is set explicitly: then Ray's setting wins
  (the test suite runs with ``RAY_AUTH_MODE=disabled``);
* a small reaper process (:mod:`roll_core.distributed.reaper`) kills what is left of the cluster when roll is
  killed with ``kill -9`` (Ray's agent processes otherwise outlive it);
* its workers run at the driver's priority (``worker_niceness``, default 0: the driver's niceness plus
  0). Ray's own default lowers every worker to nice 15, which protects a cluster's raylet but, on a
  laptop or a shared CPU box, lets any other busy process (a browser, a build) starve training while
  the driver, not niced, keeps running: the slowdown was 4x and more with two competing processes.

A joined cluster is used as it is: on a shared cluster, start it with token authentication
(``RAY_AUTH_MODE=token``, ``ray get-auth-token --generate``) and give roll the token through
``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH`` (see docs/guides/guarantees.md). Its workers' priority is
the cluster's: ``RAY_worker_niceness=0 ray start ...`` on each node gives them the raylet's.

:func:`worker_error` turns an error raised inside a Ray worker into the one-paragraph message the
CLI prints: Ray wraps it in a ``RayTaskError`` (or, when an actor's constructor raised, an
``ActorDiedError``) whose text holds two tracebacks; the user needs the innermost message.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import sys
from typing import Any

from roll_core.errors import RollError

#: Ray's switch for single-machine clusters: the node's address is the loopback address
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: Ray's token authentication settings (an explicit one is respected)
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")

#: Ray's setting for how much its workers' niceness exceeds the raylet's (Ray's default: 15)
NICENESS_SETTING = "worker_niceness"

_reaper: subprocess.Popen | None = None
#: what this process's cluster does with worker priority: None (no cluster yet), "joined", or the
#: niceness increment over the driver's that roll gave the workers of the cluster it started
_workers_niceness: int | str | None = None


def start_ray(address: str | None = None, *, reap: bool = True, worker_niceness: int = 0, **options: Any) -> bool:
    """Join ``address`` (or ``RAY_ADDRESS``), else start a private local cluster; True when started here.

    ``options`` go to ``ray.init`` (``num_cpus``, ``log_to_driver`` ...); ``reap`` starts the
    reaper for a local cluster; ``worker_niceness`` is how much lower than the driver's the local
    cluster's workers' priority is (0: the same; see the module docstring). A joined cluster keeps
    its own setting.
    """
    global _workers_niceness
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    options.setdefault("include_dashboard", False)
    if address:  # the cluster has its resources already; ray.init refuses them when joining
        for key in ("num_cpus", "num_gpus", "resources", "object_store_memory"):
            options.pop(key, None)
        ray.init(address=address, **options)
        _workers_niceness = "joined"
        return False
    # the raylet inherits the driver's niceness and adds this to its workers' (Ray's default adds 15)
    system_config = {**options.pop("_system_config", {}), NICENESS_SETTING: int(worker_niceness)}
    options["_system_config"] = system_config
    own_token = private_cluster_environment()
    if reap:
        start_reaper()
    # with roll's own token, Ray's notice that it turned authentication on (and how to opt out) is noise
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    if own_token:
        notice.setLevel(logging.ERROR)
    try:
        ray.init(address="local", **options)
    finally:
        notice.setLevel(level)
    _workers_niceness = int(worker_niceness)
    return True


def worker_priority_note() -> str | None:
    """What the run header says about the workers' priority when it is not the driver's, else None."""
    if _workers_niceness == "joined":
        return ("workers at the joined cluster's priority (Ray's default is nice 15 under a busy machine's "
                "other processes; RAY_worker_niceness=0 on `ray start` gives them the raylet's)")
    if isinstance(_workers_niceness, int) and _workers_niceness != 0:
        driver = os.getpriority(os.PRIO_PROCESS, 0)
        return f"workers at nice {min(19, driver + _workers_niceness)} (the driver's {driver} + worker_niceness)"
    return None


def private_cluster_environment() -> bool:
    """Loopback-only addresses and (unless configured otherwise) a fresh auth token, for this process
    and every Ray process it starts; True when the token is roll's."""
    os.environ[LOOPBACK_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:  # read at import: an already imported Ray needs to be told too
        constants.ENABLE_RAY_CLUSTER = False
    if any(os.environ.get(key) for key in AUTH_ENV):
        return False
    # RAY_AUTH_MODE stays unset: Ray then turns token authentication on for the cluster it starts
    # (setting it here would not reach an already imported Ray's cached settings), and finds this
    # token instead of writing one to ~/.ray
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    return True


def start_reaper() -> None:
    """The process that cleans up after this one if it is killed (once per process)."""
    global _reaper
    if _reaper is not None and _reaper.poll() is None:
        return
    _reaper = subprocess.Popen(
        [sys.executable, "-m", "roll_core.distributed.reaper", str(os.getpid())],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in the terminal must not reach it first
    )


# -- errors from workers ------------------------------------------------------------------------

#: the task or actor method Ray names in its error text (``ray::TrainWorker.__init__()``)
_TASK = re.compile(r"ray::(?P<name>[\w.]+)\(")
#: the last "module.ExceptionType: message" line of a traceback text
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault)\w*)"
                             r"(?:: (?P<message>.*))?$")


def worker_error(exc: BaseException) -> RollError | None:
    """The user-facing error an exception from a Ray worker stands for; None when ``exc`` is not one.

    A :class:`RollError` raised in a worker keeps its own message (it names the YAML path); any
    other exception becomes "``role`` failed: Type: message" without the tracebacks (``--debug``
    shows them).
    """
    if not type(exc).__module__.startswith("ray."):
        return None
    inner: BaseException = exc
    while getattr(inner, "cause", None) is not None and type(inner).__module__.startswith("ray."):
        inner = inner.cause
    text = str(getattr(exc, "error_msg", None) or exc)
    task = getattr(exc, "function_name", None) or (_TASK.search(text) or {"name": None})["name"]
    who = f"the Ray task {task}" if task else "a Ray worker"
    if task and task.endswith(".__init__"):
        who = f"the {task[: -len('.__init__')]} actor, while starting,"
    if inner is not exc and not type(inner).__module__.startswith("ray."):
        if isinstance(inner, RollError):
            return type(inner)(_one_paragraph(str(inner)))
        return RollError(f"{who} failed: {type(inner).__name__}: {_one_paragraph(str(inner))} "
                         "(run roll with --debug for the traceback)")
    found = _last_exception(text)
    where = f"{who} failed"
    if found is None:
        return RollError(f"{where}: {_one_paragraph(text.splitlines()[0] if text else type(exc).__name__)}")
    name, message = found
    if name.rsplit(".", 1)[-1] in ("ConfigError", "RollError", "PluginError", "UnknownComponentError"):
        return RollError(message)
    return RollError(f"{where}: {name.rsplit('.', 1)[-1]}: {message} (run roll with --debug for the traceback)")


def _last_exception(text: str) -> tuple[str, str] | None:
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines()]
    for i in range(len(lines) - 1, -1, -1):
        match = _EXCEPTION_LINE.match(lines[i])
        if match:
            rest = [line for line in lines[i + 1:] if line.strip() and not line.startswith(" ")]
            message = " ".join([match["message"] or "", *rest]).strip()
            return match["type"], _one_paragraph(message)
    return None


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())
