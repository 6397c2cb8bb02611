"""``code_url`` end to end: ``roll sandbox serve`` started for real, the code reward pointed at it.

The remote sandbox scores every program (correct, wrong, erroring, hostile) exactly as the local
one; ROLL's client request shape is answered the way ROLL reads it; a URL nobody answers and a
server that answers garbage cost the sample (counted reason), not the run; no secret is logged.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from roll_core.config.rlvr import RewardConfig
from roll_core.errors import ConfigError
from roll_core.plugins import PluginManager
from roll_core.rewards.code import CodeSandboxReward, reason_counts, score_code
from roll_core.rewards.code_remote import BAD_RESPONSE, UNREACHABLE, RemoteSandbox
from roll_core.rewards.dispatch import RewardDispatcher
from roll_core.rewards.failures import RewardFailure
from roll_core.rollout.rlvr.reward_scoring import RewardScoring
from roll_core.sandbox import Limits

pytestmark = pytest.mark.sandbox

# the server's limits (its flags) and the client's: the same, so local and remote must agree
LIMITS = Limits(wall_s=30, cpu_s=1, memory_mb=256, processes=16, output_bytes=4096)
SERVE_FLAGS = ["--wall-s", "30", "--cpu-s", "1", "--memory-mb", "256", "--processes", "16", "--output-bytes", "4096"]
ADD = [{"assert_code": "assert add(2, 3) == 5"}, {"assert_code": "assert add(-1, 1) == 0"}]
KEY = "sk-sandbox-secret-123"


def fenced(code: str) -> str:
    return f"Solution:\n```python\n{code}\n```\n"


# (response, test_cases, case_type): every kind of outcome the reward distinguishes
PROGRAMS = [
    (fenced("def add(a, b):\n    return a + b"), ADD, "assert"),                               # passed
    (fenced("def add(a, b):\n    return a - b"), ADD, "assert"),                               # wrong_answer
    (fenced("def add(a, b):\n    return a +"), ADD, "assert"),                                 # error (syntax)
    (fenced("def add(a, b):\n    while True: pass"), ADD[:1], "assert"),                       # cpu_limit
    (fenced("def add(a, b):\n    x = bytearray(1 << 30)\n    return a + b"), ADD[:1], "assert"),  # memory_limit
    (fenced("def add(a, b):\n    print('x' * (1 << 20))"), ADD[:1], "assert"),                 # output_limit
    (fenced("input()\nprint(sum(map(int, input().split())))"),
     [{"stdin": "2\n1 2\n", "expected_stdout": "3\n"}, {"stdin": "1\n5\n", "expected_stdout": "6"}], "input"),
    (fenced("def sq(x):\n    return x * x"), {"assert_code": "def test_a():\n    assert sq(3) == 9\n"}, "pytest"),
]


@pytest.fixture(scope="module")
def service():
    """``roll sandbox serve --port 0`` in a subprocess, requiring a bearer key; yields its code_url."""
    env = {**os.environ, "ROLL_SANDBOX_API_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "roll_core", "sandbox", "serve", "--port", "0",
                             "--max-concurrency", "4", *SERVE_FLAGS], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/run_code"), proc.stderr.read()
        _wait_healthy(url.removesuffix("/run_code") + "/health")
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_healthy(url: str) -> None:
    import time

    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                assert json.loads(reply.read())["status"] == "ok"
                return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def post(url: str, body: dict, key: str | None = KEY) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_remote_scores_equal_local_scores_on_correct_wrong_and_hostile_programs(service, monkeypatch):
    monkeypatch.setenv("ROLL_CODE_SANDBOX_API_KEY", KEY)
    remote = RemoteSandbox(service)
    local = [score_code(r, cases, kind, partial_credit=True, limits=LIMITS) for r, cases, kind in PROGRAMS]
    far = [score_code(r, cases, kind, partial_credit=True, limits=LIMITS, remote=remote) for r, cases, kind in PROGRAMS]
    assert [(s.reward, s.reasons) for s in far] == [(s.reward, s.reasons) for s in local]
    assert [s.reasons for s in far] == [["passed", "passed"], ["wrong_answer", "wrong_answer"], ["error", "error"],
                                        ["cpu_limit"], ["memory_limit"], ["output_limit"],
                                        ["passed", "wrong_answer"], ["passed"]]


def test_the_reward_reads_use_local_and_code_url_and_dispatches_remotely(service, monkeypatch):
    monkeypatch.setenv("ROLL_CODE_SANDBOX_API_KEY", KEY)
    reg = PluginManager(autoload=False).registry.get("reward", "code_sandbox")
    remote = RewardConfig(code_url=service, use_local=False)
    dispatcher = RewardDispatcher({"code": remote}, {"code": reg})
    assert dispatcher.domains["code"].fn.remote.url == service
    row = {"case_type": "input", "test_cases": [{"stdin": "2 3", "expected_stdout": "5"}]}
    assert dispatcher.score_checked("code", "q", fenced("print(sum(map(int, input().split())))"), None, 0, row) \
        == (1.0, True, "")
    assert dispatcher.score_checked("code", "q", fenced("print(6)"), None, 0, row) == (0.0, False, "")
    assert CodeSandboxReward.from_reward_config(RewardConfig(code_url=service)).remote is None  # ROLL: use_local wins
    with pytest.raises(ValueError, match="code_url is not set"):
        RewardConfig(use_local=False)
    with pytest.raises(ConfigError, match="code_url, which is not set"):  # a section built without validation
        CodeSandboxReward.from_reward_config(SimpleNamespace(use_local=False, code_url=None))
    with pytest.raises(ConfigError, match="must be an http"):
        CodeSandboxReward.from_reward_config(SimpleNamespace(use_local=False, code_url="sandbox:8080"))


def test_rolls_request_shape_is_answered_as_rolls_client_reads_it(service):
    """What ROLL's code-sandbox client posts (imports prepended, language pytest for pytest cases)."""
    prefix = "import math\nfrom typing import *\n"
    ok = {"compile_timeout": 30, "run_timeout": 30, "code": prefix + "print(int(input()) * 2)", "language": "python",
          "stdin": "21\n", "expected_stdout": "42"}
    status, answer = post(service, ok)
    assert status == 200 and answer["status"] == "Success" and answer["run_result"]["stdout"].strip() == "42"
    failing = {**ok, "language": "pytest", "code": prefix + "def f():\n    return 1\ndef test_f():\n    assert f() == 2\n",
               "stdin": "", "expected_stdout": ""}
    status, answer = post(service, failing)
    assert status == 200 and answer["status"] == "Failed"
    assert answer["run_result"]["stderr"].strip().split("\n")[-1].split(":")[0] == "AssertionError"
    status, answer = post(service, {**ok, "code": "while True: pass", "run_timeout": 2})
    assert answer["status"] == "Failed" and answer["run_result"]["status"] == "TimeLimitExceeded"
    assert post(service, {**ok, "language": "fortran"})[0] == 400
    status, answer = post(service, ok, key="guessed-key-42")
    assert status == 401 and "guessed" not in json.dumps(answer)


class GarbageServer:
    """Answers every POST with 200 and a body that is not the sandbox's JSON."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"<html>I am not a sandbox</html>")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/run_code"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_or_garbage_service_costs_the_sample_counted_and_no_secret_is_logged(monkeypatch, caplog):
    monkeypatch.setenv("ROLL_CODE_SANDBOX_API_KEY", KEY)
    garbage = GarbageServer()
    unreachable = f"http://user:pw-secret@127.0.0.1:{closed_port()}/run_code?token=q-secret"
    reg = PluginManager(autoload=False).registry.get("reward", "code_sandbox")
    sections = {"down": RewardConfig(code_url=unreachable, use_local=False, score_timeout=30),
                "junk": RewardConfig(code_url=garbage.url, use_local=False, score_timeout=30),
                "local": RewardConfig()}
    dispatcher = RewardDispatcher(sections, {d: reg for d in sections})
    for spec in dispatcher.domains.values():
        if spec.fn.remote is not None:
            spec.fn.remote.backoff_s = 0.05
    scoring = RewardScoring(sections, dispatcher, threads=4)
    answer = fenced("def add(a, b):\n    return a + b")
    row = {"test_cases": ADD[:1]}
    before = dict(reason_counts)
    try:
        with caplog.at_level(logging.DEBUG):
            pending = [scoring.submit(d, "q", answer, None, 0, row) for d in ("down", "junk", "local", "down")]
            results = [scoring.result(p) for p in pending]
    finally:
        scoring.shutdown()
        garbage.close()
    assert results == [(0.0, False, UNREACHABLE), (0.0, False, BAD_RESPONSE), (1.0, True, ""),
                       (0.0, False, UNREACHABLE)]
    assert reason_counts[UNREACHABLE] == before.get(UNREACHABLE, 0) + 2
    assert reason_counts[BAD_RESPONSE] == before.get(BAD_RESPONSE, 0) + 1
    assert "127.0.0.1" in caplog.text and not any(s in caplog.text for s in ("secret", KEY, "pw-", "token"))
    with pytest.raises(RewardFailure) as failure:
        RemoteSandbox(unreachable, attempts=1).run("print(1)", None, LIMITS)
    assert "secret" not in str(failure.value) and "secret" not in repr(RemoteSandbox(unreachable))
