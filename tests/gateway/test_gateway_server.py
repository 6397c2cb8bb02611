"""The agent gateway as agent code sees it: the real ``openai`` client against the real server.

The server runs in its own event-loop thread, as in an env-manager worker. Replies come from the
scripted policy of agent tags (:class:`roll_core.rollout.agents.agent.ExpertBackend`: text tokenised and
closed like a model reply), so each test knows what the "model" says: tool calls, malformed tool
calls, answers. The model itself is exercised by tests/rollout/test_agent_rollout.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import openai
import pytest
from gateway_helpers import MODEL, TOOLS, Served, status

from roll_core.gateway.merge import merge_calls
from roll_core.gateway.openai_wire import ChatCompletionRequest
from roll_core.rollout.engine.spec import GatewaySpec
from roll_core.strategies.base import SamplingParams


def test_tool_calls_round_trip_through_the_template(served, codec):
    session, client = served.session(['<tool_call>{"name": "calc", "arguments": {"expr": "2+3"}}</tool_call>',
                                      "<answer>5</answer>"])
    messages = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "What is 2+3?"}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "calc"
    assert json.loads(call.function.arguments) == {"expr": "2+3"}  # a JSON string, as OpenAI sends it
    assert reply.system_fingerprint == "roll-policy-v3" and reply.model_extra["policy_version"] == 3
    first = session.calls[0]
    assert '"name": "calc"' in first.prompt_text and "<tools>" in first.prompt_text  # the template rendered them
    assert first.prompt_ids == codec.encode(codec.render(messages, add_generation_prompt=True, tools=TOOLS))
    messages += [choice.message, {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert answer.choices[0].message.content == "<answer>5</answer>" and answer.choices[0].finish_reason == "stop"
    second = session.calls[1]
    assert second.parent == 0 and not second.template_mismatch  # the reply re-renders as generated
    assert second.prompt_ids[:len(first.stream_ids)] == first.stream_ids  # extends prompt + completion exactly
    samples = merge_calls(session.calls)
    assert len(samples) == 1 and [s.call.index for s in samples[0].segments] == [0, 1]
    stream = samples[0].stream
    final = [*second.messages, second.reply.message()]
    assert codec.decode(stream) + "\n" == codec.render(final, add_generation_prompt=False, tools=TOOLS)
    assert session.counts["tool_calls"] == 1 and session.counts["malformed_tool_calls"] == 0


@pytest.mark.parametrize("text", ['<tool_call>{"name": calc}</tool_call>',  # not JSON
                                  '<tool_call>{"name": "rm", "arguments": {"path": "/"}}</tool_call>',  # no such tool
                                  '<tool_call>{"name": "calc", "arguments": "2+3"}</tool_call>'])  # not an object
def test_malformed_tool_calls_come_back_as_text_and_are_counted(served, text):
    session, client = served.session([text])
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "2+3?"}], tools=TOOLS)
    assert reply.choices[0].message.content == text and reply.choices[0].message.tool_calls is None
    assert reply.choices[0].finish_reason == "stop"
    assert session.counts["malformed_tool_calls"] == 1 and session.counts["tool_calls"] == 0


def test_choices_and_rewritten_history_split_into_samples(served):
    session, client = served.session(["A", "B", "C", "D"])
    messages = [{"role": "system", "content": "Talk."}, {"role": "user", "content": "one"}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, n=2)
    assert [c.message.content for c in reply.choices] == ["A", "B"]
    # continue from the second choice: it extends call 1; call 0 stays a sample of its own
    messages += [{"role": "assistant", "content": "B"}, {"role": "user", "content": "two"}]
    client.chat.completions.create(model=MODEL, messages=messages)
    # rewrite: the system prompt changed, nothing earlier is a prefix any more
    client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "Summary: A, B."},
                                                          {"role": "user", "content": "three"}])
    assert [c.parent for c in session.calls] == [None, None, 1, None]
    samples = merge_calls(session.calls)
    assert [[seg.call.index for seg in s.segments] for s in samples] == [[0], [1, 2], [3]]
    sampled = sum(len(c.completion_ids) for c in session.calls)
    assert sum(len(seg.call.completion_ids) for s in samples for seg in s.segments) == sampled  # each once


def test_merge_is_decided_by_token_ids_alone():
    from types import SimpleNamespace as Call

    calls = [Call(prompt_ids=[1, 2], completion_ids=[3]), Call(prompt_ids=[1, 2, 3, 4], completion_ids=[5]),
             Call(prompt_ids=[1, 2, 3, 9], completion_ids=[6]),  # branches off after call 0: a new sample
             Call(prompt_ids=[1, 2, 3, 4, 5, 7], completion_ids=[8])]
    samples = merge_calls(calls)
    assert [[seg.prompt_ids for seg in s.segments] for s in samples] == [[[1, 2], [4], [7]], [[1, 2, 3, 9]]]
    assert samples[0].stream == [1, 2, 3, 4, 5, 7, 8]


def test_streaming_and_logprobs(served, codec):
    session, client = served.session(["<answer>Left</answer>", "<answer>Up</answer>"])
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}], stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "<answer>Left</answer>"
    assert chunks[-1].usage.completion_tokens == len(session.calls[0].completion_ids)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "go"}], logprobs=True)
    tokens = reply.choices[0].logprobs.content
    assert len(tokens) == len(session.calls[1].completion_ids)
    assert "".join(t.token for t in tokens) == codec.decode(session.calls[1].completion_ids)
    assert all(t.logprob == 0.0 for t in tokens)  # the scripted policy's log-probs
    assert client.models.list().data[0].id == MODEL


def test_bad_requests_get_openai_errors(served):
    session, client = served.session(["x"] * 8, sequence_length=40, max_calls=3)
    user = [{"role": "user", "content": "hi"}]
    ask = client.chat.completions.create
    assert status(lambda: ask(model="gpt-4o", messages=user)) == (404, "model_not_found")
    assert status(lambda: ask(model=MODEL, messages=user, temperature=3)) == (400, "invalid_value")
    assert status(lambda: ask(model=MODEL, messages=user, extra_body={"guided_json": {}}))[0] == 400
    assert status(lambda: ask(model=MODEL, messages=user, frequency_penalty=0.5)) == (400, "unsupported_parameter")
    assert status(lambda: ask(model=MODEL, messages=user, tools=TOOLS, tool_choice="required"))[0] == 400
    assert status(lambda: ask(model=MODEL, messages=user, tools=[{"type": "function", "function": {}}]))[0] == 400
    assert status(lambda: ask(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]))[0] == 400
    assert status(lambda: ask(model=MODEL, messages=[{"role": "robot", "content": "hi"}]))[0] == 400
    assert status(lambda: ask(model=MODEL, messages=[{"role": "user", "content": "hi " * 60000}])) == (
        413, "request_too_large")
    assert session.calls == [] and session.end_reason is None  # refused requests cost nothing
    assert status(lambda: ask(model=MODEL, messages=[{"role": "user", "content": "tell me " * 20}])) == (
        400, "context_length_exceeded")
    assert session.end_reason == "sequence_length"  # the episode ends there, truncated (rows kept)
    wrong_key = openai.OpenAI(base_url=str(client.base_url), api_key="roll-guess", max_retries=0)
    assert status(lambda: wrong_key.chat.completions.create(model=MODEL, messages=user)) == (401, "invalid_api_key")
    served.gateway.close_session(session)
    assert status(lambda: ask(model=MODEL, messages=user)) == (404, "session_not_found")


def test_calls_beyond_max_steps_are_refused_and_end_the_episode(served):
    session, client = served.session(["a", "b", "c"], max_calls=2)
    for _ in range(2):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert status(lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
                   ) == (400, "max_steps_exceeded")
    assert session.end_reason == "max_steps" and len(session.calls) == 2


def test_templates_that_cannot_render_tools_are_refused(tokenizer):
    from roll_core.chat.codec import ChatCodec

    plain = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    plain.chat_template = ("{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
                           "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}"
                           "{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
    other = Served(ChatCodec(plain))
    try:
        session, client = other.session(["x"])
        refused = status(lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                                tools=TOOLS))
        assert refused == (400, "tools_not_supported")
        assert other.gateway.parser.supported is False
    finally:
        other.close()


def test_generation_waits_while_paused(served):
    resumed = asyncio.Event()  # the env manager's "resumed" flag, cleared during weight sync
    session, client = served.session(["late"], wait_resumed=resumed.wait)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]), done.set()))
    thread.start()
    time.sleep(0.5)
    assert not done.is_set() and session.in_flight == 1 and session.idle_s() == 0.0
    served.loop.call_soon_threadsafe(resumed.set)
    thread.join(10)
    assert done.is_set() and session.calls[0].reply.content == "late"


def test_sampling_follows_the_run_and_the_request(served):
    session, _ = served.session([], sequence_length=100, max_new_tokens_cap=20,
                                sampling=SamplingParams(max_new_tokens=16, temperature=1.0, stop_strings=("</a>",)))
    request = ChatCompletionRequest(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=0.3,
                                    max_tokens=50, stop=["\n"])
    params = session.sampling(request, budget=30, number=2, choice=1, stops=("\n",))
    assert (params.temperature, params.max_new_tokens, params.seed) == (0.3, 20, 1021)  # capped; derived seed
    assert params.stop_strings == ("</a>", "\n")
    assert session.sampling(request.model_copy(update={"seed": 5}), 30, 0, 1, ()).seed == 6
    greedy, _ = served.session([], sampling=SamplingParams(temperature=0.0), greedy_only=True)
    assert greedy.sampling(request, budget=8, number=0, choice=0, stops=()).temperature == 0.0  # validation
    assert greedy.sampling(request, budget=8, number=0, choice=0, stops=()).max_new_tokens == 8  # room left


def test_the_gateway_listens_on_loopback_with_a_key_per_run(served):
    host, port = served.gateway.server.servers[0].sockets[0].getsockname()[:2]
    assert host == "127.0.0.1" and port == served.gateway.port
    assert served.gateway.spec.api_key.startswith("roll-") and GatewaySpec().api_key != GatewaySpec().api_key


def test_stale_and_cancelled_episodes_are_stopped(served):
    session, client = served.session(["a", "b"], stale=lambda first, latest: latest - first > 1)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    session.backend.version = 5  # new weights arrived: the episode's first call is now too old (k=1)
    assert status(lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
                   ) == (409, "episode_stale")
    assert session.failure == "stale" and len(session.calls) == 1  # the stale call is not recorded
    gone = {"cancelled": False}
    session, client = served.session(["a"], cancelled=lambda: gone["cancelled"])
    gone["cancelled"] = True  # the group completed without this episode
    assert status(lambda: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
                   ) == (409, "episode_cancelled")
    assert session.failure == "cancelled" and session.calls == []


def test_agent_gateway_config_reaches_the_gateway(codec):
    import socket

    from roll_core.config import validate_config
    from roll_core.rollout.engine.spec_from_run import gateway_spec

    with socket.socket() as probe:  # a port free right now, for worker 1 of a gateway configured at port - 1
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = validate_config({"pretrain": "roll-tiny", "sequence_length": 256, "agent_gateway": {
        "port": port - 1, "api_key": "secret", "model_name": "policy", "max_request_bytes": 2048}})
    spec = gateway_spec(config)
    assert (spec.host, spec.port, spec.api_key, spec.model_name, spec.max_request_bytes) == (
        "127.0.0.1", port - 1, "secret", "policy", 2048)
    assert gateway_spec(validate_config({"pretrain": "roll-tiny", "sequence_length": 256})).model_name == "roll-tiny"
    served = Served(codec, spec, port_offset=1)  # env-manager worker 1
    try:
        assert served.gateway.port == port
        session, client = served.session(["ok"])
        assert client.api_key == "secret"
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
        assert reply.model == "policy"
        assert status(lambda: client.chat.completions.create(model="policy", messages=[
            {"role": "user", "content": "x" * 3000}])) == (413, "request_too_large")
    finally:
        served.close()
