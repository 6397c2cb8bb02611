"""The OpenAI-compatible HTTP server (FastAPI on uvicorn) in front of the rollout's generation.

Imported only where an agent plays (it imports fastapi). One :class:`Gateway` runs in each env-manager worker that hosts agent tags, in the worker's own
event loop, listening on ``agent_gateway.host`` (loopback by default) and a free port. Every agent
episode gets a :class:`~roll_core.gateway.session.Session` and a base URL of its own,
``http://127.0.0.1:PORT/s/<session>/v1``: that is how a call is tied to its episode. Routes:

``POST /s/<session>/v1/chat/completions``
    OpenAI's chat completions (``messages``, ``tools``, ``tool_choice``, ``temperature``, ``top_p``,
    ``max_tokens`` / ``max_completion_tokens``, ``stop``, ``n``, ``seed``, ``logprobs``,
    ``stream``), answered by the run's policy; ``system_fingerprint`` and ``policy_version`` name
    the policy version that answered.
``GET /v1/models`` (and under a session)
    the one served model.

Every request needs ``Authorization: Bearer <the run's API key>``. Bad requests get OpenAI's error
body with a 4xx status: 400 (invalid or unsupported parameters, malformed tools, JSON nested deeper
than :data:`~roll_core.gateway.openai_wire.MAX_JSON_DEPTH`, prompts beyond ``sequence_length``), 401
(key), 404 (unknown model or session), 409 (the episode is over), 413 (a body over
``max_request_bytes``); anything else that goes wrong in the gateway is a 500 with the same body and
one log line, never a traceback in the run's console.

Large bodies (over :data:`OFFLOAD_BYTES`) are parsed, rendered and tokenised in a few threads of
the gateway, not on the worker's event loop, which the other episodes of the worker share. A reply is recorded (trained on) only
when it is delivered: the server watches the connection while the call generates, and a reply
whose client has gone is discarded and counted (:meth:`~roll_core.gateway.session.Session.discard`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from roll_core.chat.codec import ChatCodec
from roll_core.gateway.exposure import is_loopback, remote_host_error
from roll_core.gateway.openai_wire import (
    Choice,
    GatewayError,
    completion_body,
    models_body,
    parse_request,
    stream_chunks,
)
from roll_core.gateway.session import Backend, Session, SessionSettings
from roll_core.gateway.tools import ToolCallParser

logger = logging.getLogger("roll.gateway")

#: threads per gateway that parse, render and tokenise large request bodies (off the event loop)
PREPARE_THREADS = 4
#: bodies up to this size are handled on the event loop: a hop to a thread costs more than they do
#: (about a millisecond a call when the agents' own threads hold the GIL), and rendering them
#: takes a few milliseconds at most
OFFLOAD_BYTES = 64 << 10


class Gateway:
    """See the module docstring. ``await start()`` in the event loop that will serve it."""

    def __init__(self, spec: Any, codec: ChatCodec, *, port_offset: int = 0):
        self.spec = spec  # roll_core.rollout.engine.spec.GatewaySpec
        self.codec = codec
        self.parser = ToolCallParser(codec.tokenizer)
        self.port_offset = port_offset
        self.sessions: dict[str, Session] = {}
        self.port: int | None = None
        self.server: Any = None
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self.executor = ThreadPoolExecutor(max_workers=PREPARE_THREADS, thread_name_prefix="roll-gateway")

    @property
    def model(self) -> str:
        return self.spec.model_name

    @property
    def base_url(self) -> str:
        host = self.spec.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind and serve (idempotent); raises with the bind error when the port is taken."""
        async with self._lock:
            if self.server is not None:
                return
            import uvicorn

            self.check_host()
            port = self.spec.port + self.port_offset if self.spec.port else 0
            family, kind, proto, _, address = socket.getaddrinfo(self.spec.host, port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                sock.close()
                raise OSError(f"the agent gateway cannot listen on {self.spec.host}:{port} ({exc}); choose "
                              "another agent_gateway.port (0 picks a free one)") from exc
            self.port = sock.getsockname()[1]
            config = uvicorn.Config(create_app(self), log_config=None, log_level="warning", access_log=False,
                                    lifespan="off", timeout_keep_alive=60)
            self.server = uvicorn.Server(config)
            self._task = asyncio.ensure_future(self.server.serve(sockets=[sock]))
            while not self.server.started:
                if self._task.done():
                    self._task.result()  # raises the start-up error
                    raise RuntimeError("the agent gateway stopped while starting")
                await asyncio.sleep(0.005)
            logger.info("agent gateway listening on %s", self.base_url)

    def check_host(self) -> None:
        """Loopback, or an explicit ``allow_remote`` (then a warning): the key travels in plain HTTP."""
        host = self.spec.host
        if is_loopback(host):
            return
        if not getattr(self.spec, "allow_remote", False):
            raise PermissionError(remote_host_error(host))
        logger.warning("the agent gateway listens on %s (agent_gateway.allow_remote): anyone who can reach this "
                       "machine can call the policy with the run's API key, which travels in plain HTTP; use it "
                       "on a trusted network only", host)

    async def offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the gateway's threads (parsing, rendering, tokenising), not on the loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, partial(fn, *args))

    async def stop(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = ThreadPoolExecutor(max_workers=PREPARE_THREADS, thread_name_prefix="roll-gateway")
        if self.server is None:
            return
        self.server.should_exit = True
        for session in list(self.sessions.values()):
            session.close()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 10)
            except Exception as exc:  # shutting down: nothing left to save
                logger.debug("gateway stop: %s", exc)
        self.server = None

    # -- sessions -----------------------------------------------------------------------------
    def open_session(self, backend: Backend, settings: SessionSettings, *, label: str = "episode") -> Session:
        session_id = f"{label}-{uuid.uuid4().hex[:10]}"
        session = Session(session_id, self.codec, self.parser, backend, settings)
        self.sessions[session_id] = session
        return session

    def close_session(self, session: Session) -> None:
        session.close()
        self.sessions.pop(session.id, None)

    def url(self, session: Session) -> str:
        """The OpenAI ``base_url`` of ``session``."""
        return f"{self.base_url}/s/{session.id}/v1"

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise GatewayError(404, f"no running episode {session_id!r} on this gateway (it finished or was "
                                    "cancelled); use the client roll handed to the agent.", code="session_not_found")
        return session

    def check_model(self, model: str) -> None:
        if model != self.model:
            raise GatewayError(404, f"The model {model!r} does not exist; this gateway serves {self.model!r} "
                                    "(task.model).", param="model", code="model_not_found")

    def check_key(self, header: str | None) -> None:
        scheme, _, key = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), self.spec.api_key.encode()):
            raise GatewayError(401, "Incorrect API key provided: use the key roll configured for this run "
                                    "(the client handed to the agent carries it).", code="invalid_api_key")

    async def read_body(self, request: Any) -> bytes:
        limit = self.spec.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise _too_large(int(length), limit)
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(size, limit)
                chunks.append(chunk)
        except ClientDisconnect:  # nobody is left to answer
            raise GatewayError(400, "The client disconnected before sending the whole body.",
                               code="client_disconnected") from None
        return b"".join(chunks)

    async def chat_completions(self, session_id: str, request: Any) -> Any:
        self.check_key(request.headers.get("authorization"))
        session = self.session(session_id)
        raw = await self.read_body(request)
        offload = self.offload if len(raw) > OFFLOAD_BYTES else None
        body = await offload(parse_request, raw) if offload else parse_request(raw)
        self.check_model(body.model)
        gone = asyncio.ensure_future(_disconnected(request))  # the body is read: only a disconnect is left
        try:
            completion = await session.complete(body, offload=offload)
        finally:
            left = gone.done()
            gone.cancel()
        if left:  # the client went away while the call generated: the reply reaches nobody
            session.discard(completion)
            raise GatewayError(400, "The client disconnected before the reply was ready.", code="client_disconnected")
        choices = [self.choice(session, call, bool(body.logprobs)) for call in completion.calls]
        tokens = sum(len(call.completion_ids) for call in completion.calls)
        common = dict(model=self.model, choices=choices, prompt_tokens=completion.prompt_tokens,
                      completion_tokens=tokens, version=completion.version, with_logprobs=bool(body.logprobs))
        if not body.stream:
            session.commit(completion)  # handed to the open connection now
            return JSONResponse(completion_body(**common))
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        chunks = stream_chunks(**common, include_usage=include_usage)
        sent = {"done": False}

        async def events():
            for chunk in chunks:
                yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
            # runs once the last chunk was handed on: the reply is delivered, and recorded before the
            # client can see [DONE] (so the agent's next request never overtakes it)
            session.commit(completion)
            sent["done"] = True
            yield "data: [DONE]\n\n"

        def finished() -> None:
            if not sent["done"]:
                session.discard(completion)

        return DeliveredStream(events(), finished, media_type="text/event-stream")

    def choice(self, session: Session, call: Any, logprobs: bool) -> Choice:
        return Choice(index=call.choice, content=call.reply.content, tool_calls=call.reply.tool_calls,
                      finish_reason=call.finish_reason,
                      tokens=session.token_strings(call.completion_ids) if logprobs else [],
                      logprobs=call.logprobs if logprobs else [])


class DeliveredStream(StreamingResponse):
    """A stream that calls ``finished()`` when it ends, sent in full or not (the session decides
    from what the stream itself saw whether the reply was delivered)."""

    def __init__(self, content: Any, finished: Callable[[], None], **kwargs: Any):
        super().__init__(content, **kwargs)
        self.finished = finished

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.finished()


async def _disconnected(request: Any) -> None:
    """Returns when the client of ``request`` (whose body was read) disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _too_large(size: int, limit: int) -> GatewayError:
    return GatewayError(413, f"The request body has {size} bytes; this gateway accepts at most {limit} "
                             "(agent_gateway.max_request_bytes).", code="request_too_large")


def create_app(gateway: Gateway) -> Any:
    """The FastAPI application of ``gateway`` (routes in the module docstring)."""
    app = FastAPI(title="roll agent gateway", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):  # unknown routes, wrong methods
        error = GatewayError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}. The gateway "
                                              "serves POST <base_url>/chat/completions and GET <base_url>/models.",
                             code="not_found" if exc.status_code == 404 else None)
        return JSONResponse(error.body(), status_code=exc.status_code)

    @app.get("/v1/models")
    async def models(request: Request):
        gateway.check_key(request.headers.get("authorization"))
        return models_body(gateway.model)

    @app.get("/s/{session_id}/v1/models")
    async def session_models(session_id: str, request: Request):
        gateway.check_key(request.headers.get("authorization"))
        gateway.session(session_id)
        return models_body(gateway.model)

    @app.post("/s/{session_id}/v1/chat/completions")
    async def chat(session_id: str, request: Request):
        try:
            return await gateway.chat_completions(session_id, request)
        except GatewayError:
            raise
        except Exception as exc:  # a bug or an input nothing above foresaw: one line, an OpenAI-style 500
            logger.warning("agent gateway: %s answering %s: %s", type(exc).__name__, request.url.path, exc)
            raise GatewayError(500, f"The gateway failed on this request ({type(exc).__name__}: {exc}).",
                               type="server_error", code="internal_error") from None

    @app.post("/v1/chat/completions")
    async def chat_without_episode(request: Request):
        gateway.check_key(request.headers.get("authorization"))
        raise GatewayError(404, "Calls must go through an episode's base URL (http://HOST:PORT/s/<session>/v1), "
                                "which ties them to their episode; use the client roll handed to the agent.",
                           code="session_not_found")

    return app

