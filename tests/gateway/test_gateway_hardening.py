"""What careless or hostile clients, and careless agent authors, do to the gateway (issue 38).

Every client here talks to 127.0.0.1 and every wait is bounded: raw sockets for what the ``openai``
client will not send (a nested body, a body cut short, a client that leaves mid-call).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time

import httpx
import openai
import pytest
from gateway_helpers import MODEL, Served, status

from roll_core.errors import ConfigError
from roll_core.rollout.engine.spec import GatewaySpec

USER = [{"role": "user", "content": "hi"}]


def post(served, session, body: bytes, timeout: float = 10.0) -> httpx.Response:
    return httpx.post(f"{served.gateway.url(session)}/chat/completions", content=body, timeout=timeout,
                      headers={"Authorization": f"Bearer {served.gateway.spec.api_key}",
                               "Content-Type": "application/json"})


def raw_request(served, session, body: bytes, *, declared: int | None = None) -> socket.socket:
    """A connection that has sent the request line, headers and ``body`` (perhaps less than ``declared``)."""
    path = f"/s/{session.id}/v1/chat/completions"
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {served.gateway.spec.api_key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared or len(body)}\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", served.gateway.port), timeout=5)
    sock.sendall(head + body)
    return sock


def wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def server_errors(caplog):
    """The ERROR records (tracebacks) the server's loggers wrote during the test."""
    caplog.set_level(logging.WARNING)
    return lambda: [r for r in caplog.records if r.levelno >= logging.ERROR]


# -- finding 6: inputs that used to escape as plain-text 500s with a traceback --------------------
def test_deeply_nested_json_is_a_400(served, server_errors):
    session, _ = served.session(["x"])
    nested = b'{"model": "roll-tiny", "messages": ' + b"[" * 20000 + b"]" * 20000 + b"}"
    reply = post(served, session, nested)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "nested_too_deeply"
    shallow_enough = {"model": MODEL, "messages": [{"role": "user", "content": "hi", "name": "a"}],
                      "metadata": {"observation": "x"}, "tools": [{"type": "function", "function": {
                          "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "object"}}}}}]}
    deep_args = {"type": "object"}
    for _ in range(70):  # 70 levels inside a tool's parameters: under Python's recursion limit, over roll's
        deep_args = {"type": "object", "properties": {"a": deep_args}}
    shallow_enough["tools"][0]["function"]["parameters"] = deep_args
    reply = post(served, session, json.dumps(shallow_enough).encode())
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "nested_too_deeply"
    assert session.calls == [] and not server_errors()


def test_malformed_tool_calls_in_messages_are_a_400(served, server_errors):
    session, _ = served.session(["x"])
    for calls in (5, "call", {"function": {}}):
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": None, "tool_calls": calls},
                                             {"role": "user", "content": "go on"}]}
        reply = post(served, session, json.dumps(body).encode())
        assert reply.status_code == 400, (calls, reply.text)
        assert reply.json()["error"]["param"] == "messages[1].tool_calls"
    assert not server_errors()


def test_a_client_that_leaves_mid_body_leaves_no_traceback(served, server_errors):
    session, client = served.session(["still here"])
    sock = raw_request(served, session, b'{"model": "roll-tiny", "mess', declared=4000)
    time.sleep(0.2)
    sock.close()
    time.sleep(0.3)
    assert not server_errors()
    assert client.chat.completions.create(model=MODEL, messages=USER).choices[0].message.content == "still here"


# -- finding 7: a large body must not stall the other episodes of the worker ----------------------
def _latency_while(served, big_request) -> tuple[float, threading.Thread]:
    """Seconds another episode's call takes while ``big_request()`` runs in a thread."""
    _, other = served.session(["quick"])
    thread = threading.Thread(target=big_request, daemon=True)
    thread.start()
    time.sleep(0.4)  # the big body is uploaded and being parsed / rendered / tokenised
    started = time.perf_counter()
    assert other.chat.completions.create(model=MODEL, messages=USER).choices[0].message.content == "quick"
    return time.perf_counter() - started, thread


@pytest.fixture(scope="module")
def roomy(codec):
    served = Served(codec, max_request_bytes=4 << 20)
    yield served
    served.close()


def _many(n: int) -> bytes:  # serialised here: the openai client takes tens of seconds over 100,000 messages
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}] * n}).encode()


def test_many_messages_are_refused_before_rendering(roomy):
    session, _ = roomy.session(["never"], sequence_length=2048)
    body, results = _many(100_000), []
    latency, thread = _latency_while(roomy, lambda: results.append(post(roomy, session, body, timeout=60)))
    thread.join(60)
    assert results[0].status_code == 400 and results[0].json()["error"]["code"] == "context_length_exceeded"
    assert "100000 messages" in results[0].json()["error"]["message"] and session.calls == []
    assert latency < 1.0, f"another episode's call waited {latency:.2f} s"


def test_rendering_a_large_prompt_leaves_the_event_loop_free(roomy):
    session, _ = roomy.session(["done"], sequence_length=10**6)  # room for it: it is rendered and tokenised
    body, results = _many(40_000), []
    latency, thread = _latency_while(roomy, lambda: results.append(post(roomy, session, body, timeout=60)))
    thread.join(60)
    assert results[0].status_code == 200 and results[0].json()["choices"][0]["message"]["content"] == "done"
    assert len(session.calls[0].prompt_ids) > 40_000
    assert latency < 1.0, f"another episode's call waited {latency:.2f} s"


# -- finding 5: what a refused call costs --------------------------------------------------------
def test_a_refused_request_uses_no_call_and_recovering_clears_the_truncation(served):
    session, client = served.session(["short answer"], sequence_length=40, max_calls=1)
    too_long = [{"role": "user", "content": "tell me " * 20}]
    assert status(lambda: client.chat.completions.create(model=MODEL, messages=too_long)) == (
        400, "context_length_exceeded")
    assert session.end_reason == "sequence_length" and session.requests == 0 and session.counts["refused"] == 1
    # the agent caught the error and shortened its history: that call is the episode's first
    reply = client.chat.completions.create(model=MODEL, messages=USER)
    assert reply.choices[0].message.content == "short answer"
    assert [c.request for c in session.calls] == [0] and session.end_reason is None
    assert status(lambda: client.chat.completions.create(model=MODEL, messages=USER)) == (400, "max_steps_exceeded")
    assert session.end_reason == "max_steps" and session.counts["refused"] == 2


# -- finding 8: replies the agent never received are not trained on -------------------------------
def _slow(reply: str, seconds: float):
    async def expert(task, messages, tools):
        await asyncio.sleep(seconds)
        return reply

    return expert


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_whose_client_left_is_not_recorded(served, stream):
    session, client = served.session(expert=_slow("too late", 0.6))
    body = {"model": MODEL, "messages": USER, **({"stream": True} if stream else {})}
    sock = raw_request(served, session, json.dumps(body).encode())
    assert wait_for(lambda: session.in_flight == 1)
    sock.close()  # the agent gave up (a timeout, a cancelled task) while the call generated
    assert wait_for(lambda: session.counts["undelivered_calls"] == 1)
    assert session.calls == [] and session.requests == 1  # generated, counted, not a training row
    session.backend.agent.expert_fn = _slow("on time", 0.0)
    reply = client.chat.completions.create(model=MODEL, messages=USER, stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in reply if c.choices) if stream else \
        reply.choices[0].message.content
    assert text == "on time" and [c.request for c in session.calls] == [1] and session.calls[0].index == 0


def test_concurrent_calls_of_one_episode_are_delivered_and_counted(served):
    session, _ = served.session(expert=_slow("same", 0.3))
    client = openai.AsyncOpenAI(base_url=served.gateway.url(session), api_key=served.gateway.spec.api_key,
                                max_retries=0)

    async def burst():
        try:
            return await asyncio.gather(*(client.chat.completions.create(model=MODEL, messages=USER)
                                          for _ in range(4)))
        finally:
            await client.close()

    replies = asyncio.run(burst())
    assert [r.choices[0].message.content for r in replies] == ["same"] * 4
    assert len(session.calls) == 4 and session.counts["concurrent_calls"] == 3  # all but the first overlapped
    assert sorted(c.request for c in session.calls) == [0, 1, 2, 3]


# -- finding 1: an expert reply longer than a call may be is an error, not a cut demonstration -----
def test_an_expert_reply_over_the_cap_stops_the_run_with_the_numbers(served):
    call = '<tool_call>{"name": "calc", "arguments": {"expr": "12345 + 67890"}}</tool_call>'
    session, client = served.session([call], cap=20, max_new_tokens_cap=20)
    assert status(lambda: client.chat.completions.create(model=MODEL, messages=USER)) == (
        500, "expert_reply_too_long")
    assert isinstance(session.error, ConfigError) and session.calls == []
    message = str(session.error)
    assert "max_tokens_per_step" in message and "at most 20" in message
    tokens = len(served.codec.encode(call)) + len(served.codec.end_of_turn_ids)
    assert f"a reply of {tokens} tokens" in message and f"at least {tokens}" in message


# -- finding 9: listening beyond loopback needs an explicit opt-in -------------------------------
def test_a_non_loopback_host_needs_allow_remote():
    from roll_core.config import validate_config

    base = {"pretrain": "roll-tiny", "sequence_length": 256}
    for host in ("0.0.0.0", "::", "192.168.1.5", "gateway.example"):
        with pytest.raises(ConfigError, match=r"agent_gateway\.allow_remote"):
            validate_config({**base, "agent_gateway": {"host": host}})
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert validate_config({**base, "agent_gateway": {"host": host}}).agent_gateway.host == host
    opted = validate_config({**base, "agent_gateway": {"host": "0.0.0.0", "allow_remote": True}})
    assert opted.agent_gateway.allow_remote is True


def test_the_gateway_itself_refuses_a_remote_host_without_the_opt_in(codec, caplog):
    with pytest.raises(PermissionError, match="allow_remote"):
        Served(codec, GatewaySpec(model_name=MODEL, host="0.0.0.0"))
    caplog.set_level(logging.WARNING, logger="roll.gateway")
    opted = Served(codec, GatewaySpec(model_name=MODEL, host="0.0.0.0", allow_remote=True))
    try:
        assert any("plain HTTP" in r.getMessage() for r in caplog.records if r.name == "roll.gateway")
        _, client = opted.session(["ok"])
        assert str(client.base_url).startswith("http://127.0.0.1:")  # the agents still use loopback
        assert client.chat.completions.create(model=MODEL, messages=USER).choices[0].message.content == "ok"
    finally:
        opted.close()
