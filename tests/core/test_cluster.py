"""The Ray cluster roll starts: loopback only, token authentication, nothing left behind after kill -9;
errors from its workers reach the user as one paragraph (issue 19)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from roll_core.distributed.cluster import AUTH_ENV, worker_error
from roll_core.errors import ConfigError, RollError

# -- errors from workers --------------------------------------------------------------------------------

TRACEBACK = textwrap.dedent("""\
    Traceback (most recent call last):
      File "/site-packages/roll_core/pipeline/workers.py", line 40, in __init__
        self.strategy = build(...)
      File "/site-packages/roll_core/strategies/hf_common.py", line 52, in apply_strategy_config
        raise ConfigError(
    roll_core.errors.ConfigError: actor_train.strategy_args.strategy_config: unknown key 'learnin_rate'. \
Did you mean 'learning_rate'?""")


def task_error(cause: BaseException, function: str = "TrainWorker.train_actor"):
    from ray.exceptions import RayTaskError

    # in a worker, Ray's process title is ray::<function>, and the error text starts with it
    return RayTaskError(function, TRACEBACK, cause, proctitle=f"ray::{function}").as_instanceof_cause()


def test_roll_error_raised_in_a_worker_keeps_its_message():
    error = task_error(ConfigError("actor_train.strategy_args.strategy_config: unknown key 'x'."))
    assert isinstance(error, ConfigError) and "\n" in str(error)  # what the CLI used to print: the traceback
    unwrapped = worker_error(error)
    assert isinstance(unwrapped, ConfigError)
    assert str(unwrapped) == "actor_train.strategy_args.strategy_config: unknown key 'x'."


def test_other_worker_errors_name_the_task_and_the_cause():
    unwrapped = worker_error(task_error(FileNotFoundError("no such file: /data/x.jsonl")))
    assert str(unwrapped) == ("the Ray task TrainWorker.train_actor failed: FileNotFoundError: no such file: "
                              "/data/x.jsonl (run roll with --debug for the traceback)")
    assert worker_error(ValueError("not from Ray")) is None


def test_actor_that_failed_to_start_gives_its_last_exception():
    from ray.exceptions import ActorDiedError, RayTaskError

    cause = RayTaskError("TrainWorker.__init__", TRACEBACK, ConfigError("x"), proctitle="ray::TrainWorker.__init__")
    error = ActorDiedError(cause)
    assert str(worker_error(error)).startswith("actor_train.strategy_args.strategy_config: unknown key 'learnin_rate'")
    os_error = ActorDiedError(RayTaskError("InferWorker.__init__", "Traceback ...\nOSError: disk full", OSError(),
                                           proctitle="ray::InferWorker.__init__"))
    assert str(worker_error(os_error)) == ("the InferWorker actor, while starting, failed: OSError: disk full "
                                           "(run roll with --debug for the traceback)")


def test_cli_prints_worker_errors_in_one_paragraph(capsys, monkeypatch):
    from roll_core import cli

    def failing(args):
        raise task_error(RollError("pretrain '/nope' is neither a model directory nor a built-in name."))

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.set_defaults(func=failing)
    assert cli.main([]) == 1
    err = capsys.readouterr().err
    assert err == "roll: error: pretrain '/nope' is neither a model directory nor a built-in name.\n"


# -- the local cluster ------------------------------------------------------------------------------------

CHILD = textwrap.dedent("""\
    import json, os, sys, time
    import ray
    from roll_core.distributed.cluster import start_ray, worker_priority_note
    os.nice(3)  # a driver that is itself niced: its workers follow it, not Ray's absolute default
    assert start_ray(num_cpus=1, log_to_driver=False)

    @ray.remote(num_cpus=0)
    class Probe:
        def niceness(self):
            return os.getpriority(os.PRIO_PROCESS, 0)

    from ray._raylet import AuthenticationMode, get_authentication_mode
    context = ray.get_runtime_context()
    print(json.dumps({"gcs": context.gcs_address, "node_ip": ray.util.get_node_ip_address(),
                      "token_auth": get_authentication_mode() == AuthenticationMode.TOKEN,
                      "token": os.environ.get("RAY_AUTH_TOKEN"),
                      "driver_nice": os.getpriority(os.PRIO_PROCESS, 0),
                      "worker_nice": ray.get(Probe.remote().niceness.remote()),
                      "note": worker_priority_note()}), flush=True)
    time.sleep(600)
""")


#: one request to the GCS, as any client on the machine could send it
GCS_PROBE = textwrap.dedent("""\
    from ray._raylet import GcsClient
    try:
        GcsClient(address={address!r}).internal_kv_get(b"probe", None, timeout=10)
        print("answered")
    except Exception as exc:
        print(type(exc).__name__)
""")


def machine_address() -> str | None:
    """This machine's address on its network (what other machines would connect to), if any."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            address = probe.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.ray
def test_local_cluster_is_private_and_leaves_nothing_after_kill_9():
    psutil = pytest.importorskip("psutil")
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV and k != "RAY_ADDRESS"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=env)
    descendants: list = []
    try:
        info = json.loads(child.stdout.readline())
        host, port = info["gcs"].rsplit(":", 1)
        assert host == info["node_ip"] == "127.0.0.1"
        assert connects("127.0.0.1", int(port))
        outside = machine_address()
        if outside is not None:
            assert not connects(outside, int(port))  # the GCS does not listen on the network
        assert info["token_auth"] and len(info["token"]) == 64  # a fresh token, in the environment only
        # workers run at the driver's priority (Ray's default would be the driver's + 15), so the header is quiet
        assert info["driver_nice"] == info["worker_nice"] == 3 and info["note"] is None

        for token, expected in (("0" * 64, "AuthenticationError"), (info["token"], "answered")):
            probe = subprocess.run([sys.executable, "-c", GCS_PROBE.format(address=info["gcs"])], capture_output=True,
                                   text=True, timeout=60, env={**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})
            assert probe.stdout.strip() == expected, probe.stdout + probe.stderr

        descendants = [p for p in psutil.Process(child.pid).children(recursive=True)]
        names = " ".join(p.name() for p in descendants)
        assert "raylet" in names and "gcs_server" in names
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.time() + 30
        alive = descendants
        while time.time() < deadline:
            alive = [p for p in descendants if _running(psutil, p)]
            if not alive:
                break
            time.sleep(0.5)
        assert not alive, f"left behind after kill -9: {[(p.pid, p.name()) for p in alive]}"
    finally:
        if child.poll() is None:
            child.kill()
        for process in descendants:  # only what this test started
            if _running(psutil, process):
                process.kill()


def test_worker_priority_note_names_a_lowered_or_joined_cluster(monkeypatch):
    from roll_core.distributed import cluster

    driver = os.getpriority(os.PRIO_PROCESS, 0)
    monkeypatch.setattr(cluster, "_workers_niceness", 5)
    assert cluster.worker_priority_note() == f"workers at nice {driver + 5} (the driver's {driver} + worker_niceness)"
    monkeypatch.setattr(cluster, "_workers_niceness", "joined")
    assert "RAY_worker_niceness=0" in cluster.worker_priority_note()
    monkeypatch.setattr(cluster, "_workers_niceness", 0)
    assert cluster.worker_priority_note() is None


def test_worker_niceness_reaches_ray_as_its_system_setting(monkeypatch):
    """start_ray hands the config's value to the local cluster and leaves a joined one's alone."""
    import ray

    from roll_core.distributed import cluster

    calls = []
    monkeypatch.setattr(cluster, "_workers_niceness", None)  # restored after the test
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(cluster, "start_reaper", lambda: None)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster.start_ray(worker_niceness=4)
    assert calls[-1]["_system_config"] == {"worker_niceness": 4}
    assert not cluster.start_ray("127.0.0.1:1234", worker_niceness=4)
    assert "_system_config" not in calls[-1]


def _running(psutil, process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
