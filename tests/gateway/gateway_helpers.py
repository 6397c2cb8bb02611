"""A gateway served in its own event-loop thread (as in an env-manager worker), for the gateway tests.

Replies come from the scripted policy of agent tags (:class:`roll_core.rollout.agents.agent.ExpertBackend`:
text tokenised and closed like a model reply), so each test knows what the "model" says.
"""

from __future__ import annotations

import asyncio
import threading

import openai
import pytest

from roll_core.gateway.server import Gateway
from roll_core.gateway.session import SessionSettings
from roll_core.rollout.agents.agent import Agent, AgentTask, ExpertBackend
from roll_core.rollout.engine.spec import GatewaySpec
from roll_core.strategies.base import SamplingParams

MODEL = "roll-tiny"
TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Evaluate arithmetic",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}]
TASK = AgentTask(seed=1, config={}, model=MODEL, tag="T", mode="train", group_id=0, episode_id=0, member=0)


class Served:
    """A gateway in its own event-loop thread, and helpers to open sessions on it."""

    def __init__(self, codec, spec=None, port_offset=0, **settings):
        self.codec = codec
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.gateway = Gateway(spec or GatewaySpec(model_name=MODEL, **settings), codec, port_offset=port_offset)
        try:
            self.call(self.gateway.start())
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            raise

    def call(self, coroutine, timeout=30):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def session(self, replies=(), *, expert=None, cap=None, sequence_length=2048, **settings):
        """A session answered with ``replies`` in turn (or by ``expert(task, messages, tools)``)."""
        replies = iter(replies)
        agent = Agent("scripted", run=None, expert=expert or (lambda task, messages, tools: next(replies)),
                      reward=None)
        backend = ExpertBackend(agent, TASK, self.codec, version=3, **({"cap": cap} if cap else {}))
        values = dict(sequence_length=sequence_length, sampling=SamplingParams(max_new_tokens=96),
                      seed=lambda number, choice: 1000 + 10 * number + choice)
        values.update(settings)
        session = self.gateway.open_session(backend, SessionSettings(**values))
        client = openai.OpenAI(base_url=self.gateway.url(session), api_key=self.gateway.spec.api_key, max_retries=0)
        return session, client

    def close(self):
        self.call(self.gateway.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def status(call) -> tuple[int, str | None]:
    """The HTTP status and OpenAI error code ``call()`` raised."""
    with pytest.raises(openai.APIStatusError) as info:
        call()
    return info.value.status_code, (info.value.body or {}).get("code")
