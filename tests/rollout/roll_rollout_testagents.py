"""Small agents for the agent-rollout tests, registered as a plugin module (importable by Ray workers).

Failures happen once per (mode, group, episode, member) and process, so a retried episode succeeds:
what the tests check is that a failure costs one attempt, is counted by reason, and the group still
completes with the episode's seed.
"""

from __future__ import annotations

import asyncio
import time

import openai

from roll_core.hookspecs import hookimpl

_failed: set[tuple] = set()


def _first_attempt(task) -> bool:
    key = (task.mode, task.tag, task.group_id, task.episode_id, task.member)
    if key in _failed:
        return False
    _failed.add(key)
    return True


async def _ask(client, task, messages):
    reply = await client.chat.completions.create(model=task.model, messages=messages)
    return reply.choices[0].message.content or ""


async def rewriting(task, client: openai.AsyncOpenAI) -> dict:
    """Two turns of one conversation, then a fresh conversation that summarises them (history rewritten)."""
    messages = [{"role": "system", "content": "Count."}, {"role": "user", "content": f"Start at {task.seed % 7}."}]
    first = await _ask(client, task, messages)
    messages += [{"role": "assistant", "content": first}, {"role": "user", "content": "Next."}]
    second = await _ask(client, task, messages)
    summary = [{"role": "system", "content": "Count."}, {"role": "user", "content": "Two numbers said. Next?"}]
    await _ask(client, task, summary)
    return {"reward": float(task.member), "step_rewards": [0.0, 0.5, float(task.member) - 0.5],
            "metrics": {"second_len": float(len(second))}}


async def flaky(task, client) -> float:
    """Raises on an episode's first attempt."""
    await _ask(client, task, [{"role": "user", "content": "hi"}])
    if _first_attempt(task):
        raise RuntimeError("the agent's tool server is down")
    return 1.0


async def sleepy(task, client) -> float:
    """Spends 30 s in its own code on an episode's first attempt (past step_timeout_s)."""
    await _ask(client, task, [{"role": "user", "content": "hi"}])
    if _first_attempt(task):
        await asyncio.sleep(30)
    return 1.0


def blocking(task, client) -> float:
    """A plain function: roll runs it in a thread with a synchronous OpenAI client."""
    assert isinstance(client, openai.OpenAI)
    time.sleep(0.01)
    reply = client.chat.completions.create(model=task.model, messages=[{"role": "user", "content": "hi"}])
    return float(len(reply.choices[0].message.content or "") > 0)


async def scored(task, client) -> dict:
    """Returns no reward, only the reference: the tag's reward function scores the conversation."""
    question = f"What is {task.seed % 5} + 1?"
    await _ask(client, task, [{"role": "user", "content": question}])
    return {"reference": str(task.seed % 5 + 1)}


def answer_expert(task, messages, tools) -> str:
    """The scripted policy of the test agents: the right answer when asked a sum, else a count."""
    text = messages[-1]["content"]
    if text.startswith("What is "):
        return f"<answer>{task.seed % 5 + 1}</answer>"
    return "<answer>1</answer>"


@hookimpl
def roll_register_agents(register):
    for name in ("rewriting", "flaky", "sleepy", "blocking", "scored"):
        register(f"test_{name}_agent", f"roll_rollout_testagents:{name}", expert="roll_rollout_testagents:answer_expert",
                 description=f"test agent: {name}")
