"""roll's code-sandbox service: :mod:`roll_core.sandbox` over HTTP (``roll sandbox serve``).

It answers the requests ROLL's code-sandbox reward sends to ``code_url`` (the ``/run_code`` shape
of a SandboxFusion-style service), so a ROLL config's ``code_url`` works against it, and roll's own
client (:mod:`roll_core.rewards.code_remote`) uses the same shape.

Request (JSON, ``POST /run_code``)::

    {"code": "...", "language": "python" | "pytest", "stdin": "...",
     "run_timeout": 30, "compile_timeout": 30, "expected_stdout": "..."}

``language: pytest`` runs the code, then calls each of its top-level ``test*`` functions (no pytest
needed). ``run_timeout`` may only shorten the server's wall limit; every other limit is the
server's (:class:`~roll_core.sandbox.Limits`): a client cannot raise what the server allows.
``compile_timeout`` and ``expected_stdout`` are accepted and not used (the client compares output).

Response::

    {"status": "Success" | "Failed" | "SandboxError", "message": "...", "compile_result": null,
     "run_result": {"status": "Finished" | "TimeLimitExceeded", "execution_time": 0.1,
                    "return_code": 0, "stdout": "...", "stderr": "..."},
     "reason": "ok"}

``Success``: the program exited 0; ``Failed``: it did not (``run_result`` says how);
``SandboxError``: the sandbox itself failed (the client retries). ``reason`` is roll's
(:data:`~roll_core.sandbox.REASONS`: ``timeout``, ``memory_limit``...), so roll's client counts the
same reasons as the local sandbox; other clients ignore it. A malformed request gets HTTP 400 with
what is wrong. With an API key (``$ROLL_SANDBOX_API_KEY`` when serving) every request must carry
``Authorization: Bearer <key>``.
"""

# no ``from __future__ import annotations``: FastAPI reads the handlers' annotations (Request) at runtime
import hmac
import threading
from collections.abc import Mapping
from typing import Any

from roll_core.sandbox.limits import CODE_LIMITS, Limits
from roll_core.sandbox.runner import SandboxError, python_executable, run_sandboxed

#: where ROLL's client posts (the full ``code_url`` is ``http://host:port/run_code``)
RUN_PATH = "/run_code"
#: the server's key, read by ``roll sandbox serve``; the client's is ``ROLL_CODE_SANDBOX_API_KEY``
SERVER_KEY_ENV = "ROLL_SANDBOX_API_KEY"
#: reasons whose run ended on a time limit (SandboxFusion's ``TimeLimitExceeded``)
_TIME_LIMITS = ("timeout", "cpu_limit")

# pytest-style tests without pytest: each top-level test function, in definition order
_PYTEST_RUNNER = """

def _roll_run_tests():
    import types
    for _name, _fn in list(globals().items()):
        if _name.startswith("test") and isinstance(_fn, types.FunctionType):
            _fn()


_roll_run_tests()
"""
#: ``language`` -> how the code becomes the program run
LANGUAGES = {"python": lambda code: code, "python3": lambda code: code, "pytest": lambda code: code + _PYTEST_RUNNER}


class BadRequest(ValueError):
    """A request the service cannot run; the message says which field is wrong."""


def parse_request(body: Any, limits: Limits) -> tuple[str, str | None, Limits]:
    """``(program, stdin, limits of this run)`` from a request body, or :class:`BadRequest`."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object with at least 'code'")
    code, language = body.get("code"), body.get("language") or "python"
    if not isinstance(code, str):
        raise BadRequest("'code' must be a string (the program to run)")
    if language not in LANGUAGES:
        raise BadRequest(f"language {language!r} is not supported; roll's sandbox service runs "
                         f"{', '.join(LANGUAGES)}")
    stdin = body.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        raise BadRequest("'stdin' must be a string")
    wall = body.get("run_timeout")
    if wall is not None:
        if isinstance(wall, bool) or not isinstance(wall, (int, float)) or wall <= 0:
            raise BadRequest(f"'run_timeout' must be a positive number of seconds, got {wall!r}")
        limits = limits.with_(wall_s=min(float(wall), limits.wall_s))
    return LANGUAGES[language](code), stdin or None, limits


def run_code(body: Any, limits: Limits = CODE_LIMITS) -> dict[str, Any]:
    """One request's response (see the module docstring); :class:`BadRequest` for a malformed one."""
    program, stdin, run_limits = parse_request(body, limits)
    python, binds = python_executable()
    try:
        result = run_sandboxed([python, "-I", "main.py"], {"main.py": program}, stdin=stdin, limits=run_limits,
                               ro_binds=binds)
    except SandboxError as exc:
        return {"status": "SandboxError", "message": str(exc), "compile_result": None, "run_result": None}
    run_status = "TimeLimitExceeded" if result.reason in _TIME_LIMITS else "Finished"
    return {
        "status": "Success" if result.ok else "Failed",
        "message": "" if result.ok else result.summary(),
        "compile_result": None,
        "run_result": {"status": run_status, "execution_time": round(result.wall_s, 4),
                       "return_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr},
        "reason": result.reason,
    }


def create_app(limits: Limits = CODE_LIMITS, *, api_key: str | None = None, max_concurrency: int = 4) -> Any:
    """The FastAPI app: ``POST /run_code``, ``GET /health``. At most ``max_concurrency`` programs run
    at once (the others wait), so a burst of requests cannot start more sandboxes than the machine holds."""
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse

    app = FastAPI(title="roll sandbox", description=__doc__)
    slots = threading.BoundedSemaphore(max(1, int(max_concurrency)))

    def run_one(body: Any) -> dict[str, Any]:
        with slots:
            return run_code(body, limits)

    def authorized(request: Request) -> bool:
        if not api_key:
            return True
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())

    @app.post(RUN_PATH)
    async def run(request: Request) -> Any:
        if not authorized(request):  # the answer never repeats what was sent
            return JSONResponse({"status": "SandboxError", "message": "missing or wrong API key"}, status_code=401)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"status": "SandboxError", "message": "the request body is not JSON"}, status_code=400)
        try:
            return await run_in_threadpool(run_one, body)
        except BadRequest as exc:
            return JSONResponse({"status": "SandboxError", "message": str(exc)}, status_code=400)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "limits": {k: v for k, v in vars(limits).items()}}

    return app
