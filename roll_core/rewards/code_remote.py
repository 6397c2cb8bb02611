"""The code reward's remote sandbox: ROLL's ``code_url`` (with ``use_local: false``).

Each test program is POSTed to ``code_url`` in the request shape ROLL's code-sandbox client sends
(``{"code", "language", "stdin", "run_timeout", "compile_timeout"}``; the service side is
:mod:`roll_core.sandbox.service`, ``roll sandbox serve``), and the answer is read the way ROLL reads
it (``status``, ``run_result.stdout`` / ``stderr`` / ``return_code``). roll's service also says
roll's own ``reason``, so a remote run is counted exactly like a local one; any other
SandboxFusion-style service works too, its reason derived from ``status`` and ``run_result``.

Failures cost the sample, not the run: a connection error, a timeout, an HTTP 5xx and a
``SandboxError`` answer are retried (``attempts``, with a short backoff); what still fails raises
:class:`~roll_core.rewards.failures.RewardFailure` (score 0, counted) as ``sandbox_unreachable``
(no answer), ``sandbox_error`` (the service said its sandbox failed, or HTTP 4xx/5xx) or
``sandbox_bad_response`` (an answer that is not the expected JSON). The key
(``$ROLL_CODE_SANDBOX_API_KEY``, sent as a bearer header) and any credentials or query in the URL
never reach a log line or an error message: they show the URL as ``scheme://host:port/path``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from roll_core.rewards.failures import RewardFailure
from roll_core.sandbox import REASONS, Limits
from roll_core.sandbox.limits import MEMORY_ERRORS

logger = logging.getLogger("roll.rewards.code")

#: the bearer key sent to the sandbox service, when set
API_KEY_ENV = "ROLL_CODE_SANDBOX_API_KEY"
UNREACHABLE = "sandbox_unreachable"
SANDBOX_ERROR = "sandbox_error"
BAD_RESPONSE = "sandbox_bad_response"
#: seconds a request may take beyond the run's wall limit (queueing, start-up, transfer)
SLACK_S = 30.0


@dataclass(frozen=True)
class RemoteRun:
    """What the service said about one run, as the local sandbox's ``Result`` would say it."""

    reason: str
    stdout: str
    stderr: str


def shown_url(url: str) -> str:
    """``url`` without user info, query or fragment: what logs and messages may show."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


class RemoteSandbox:
    """``run(program, stdin, limits) -> RemoteRun`` against a ``code_url`` service."""

    def __init__(self, url: str, *, api_key: str | None = None, attempts: int = 3, backoff_s: float = 0.5):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"code_url must be an http(s) URL such as http://host:8080/run_code, got "
                             f"{shown_url(url)!r}")
        self.url = url
        self.shown = shown_url(url)
        self._key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self.attempts = max(1, int(attempts))
        self.backoff_s = float(backoff_s)

    def __repr__(self) -> str:
        return f"RemoteSandbox({self.shown!r})"

    def run(self, program: str, stdin: str | None, limits: Limits) -> RemoteRun:
        body = json.dumps({"code": program, "language": "python", "stdin": stdin or "",
                           "run_timeout": limits.wall_s, "compile_timeout": limits.wall_s}).encode()
        timeout = limits.wall_s + SLACK_S
        last_reason, last = UNREACHABLE, ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff_s * attempt)
            try:
                answer = self._post(body, timeout)
            except _Retry as exc:
                last_reason, last = exc.reason, str(exc)
                continue
            if answer.get("status") == "SandboxError":
                last_reason, last = SANDBOX_ERROR, f"the service's sandbox failed: {str(answer.get('message'))[:200]}"
                continue
            return _as_run(answer)
        logger.warning("code sandbox at %s: %s (after %d attempts); the response scores 0", self.shown, last,
                       self.attempts)
        raise RewardFailure(last_reason, f"code sandbox at {self.shown}: {last}")

    def _post(self, body: bytes, timeout: float) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as exc:  # the body may echo the request: never shown
            exc.close()
            raise _Retry(SANDBOX_ERROR, f"HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, DNS, timeout, reset
            why = getattr(exc, "reason", exc)
            raise _Retry(UNREACHABLE, f"no answer ({type(why).__name__})") from None
        try:
            answer = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise _Retry(BAD_RESPONSE, f"the answer is not JSON ({len(raw)} bytes)") from None
        if not isinstance(answer, dict) or answer.get("status") not in ("Success", "Failed", "SandboxError"):
            raise _Retry(BAD_RESPONSE, "the answer has no status Success / Failed / SandboxError")
        return answer


class _Retry(Exception):
    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


def _as_run(answer: dict[str, Any]) -> RemoteRun:
    """A ``Success`` / ``Failed`` answer as the local sandbox's reason and streams."""
    run = answer.get("run_result") or {}
    if not isinstance(run, dict):
        raise RewardFailure(BAD_RESPONSE, "the sandbox's run_result is not an object")
    stdout, stderr = str(run.get("stdout") or ""), str(run.get("stderr") or "")
    reason = answer.get("reason")
    if reason not in REASONS:  # not roll's service: derive it as ROLL does from status and run_result
        if answer["status"] == "Success":
            reason = "ok"
        elif run.get("status") == "TimeLimitExceeded":
            reason = "timeout"
        elif any(m in stderr for m in MEMORY_ERRORS):
            reason = "memory_limit"
        else:
            reason = "exit_nonzero"
    return RemoteRun(reason, stdout, stderr)
