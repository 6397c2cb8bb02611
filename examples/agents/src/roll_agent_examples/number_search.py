"""A tool-using agent: find a hidden number with a ``guess`` tool that answers higher, lower or correct.

Each episode hides a number (from the task's seed). The agent offers the model one tool through the
OpenAI ``tools`` parameter, runs every ``guess`` call the model makes and sends the verdict back as
a ``tool`` message, until the model hits the number, stops calling the tool, or runs out of turns.
Reward 1 for finding it. Calling the tool is the only way to act, and reading its verdicts the only
way to find the number in time (binary search needs 4 calls for 1-15; 4 random guesses find it about
a quarter of the time), so the reward measures how well the model learnt to call it.

The class form of an agent: roll builds one per env slot with its validated config, calls
:meth:`NumberSearchAgent.run` per episode, and :meth:`NumberSearchAgent.expert` writes the call a
demonstrator would (binary search; the ``scripted`` policy, used by ``warmup_sft``).
"""

from __future__ import annotations

import json
import random
from typing import Literal

import openai
from pydantic import BaseModel, ConfigDict, Field

TOOLS = [{
    "type": "function",
    "function": {
        "name": "guess",
        "description": "Guess the number; the answer is higher, lower or correct",
        "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
    },
}]


class SearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    low: int = Field(1, description="Smallest hidden number.")
    high: int = Field(15, description="Largest hidden number.")
    max_turns: int = Field(4, ge=1, description="Model calls per episode (custom_envs max_steps caps it too).")
    demonstrator: Literal["binary_search", "random"] = Field(
        "binary_search", description="What the expert demonstrates: the search, or only the call format "
                                     "(random guesses, ignoring the verdicts).")


def hidden_number(seed: int, config: SearchConfig) -> int:
    return random.Random(seed).randint(config.low, config.high)


def verdict(guess: int, secret: int) -> str:
    return "correct" if guess == secret else ("higher" if secret > guess else "lower")


class NumberSearchAgent:
    config_model = SearchConfig

    def __init__(self, config: SearchConfig):
        self.config = config

    def system(self) -> str:
        return f"Find my number from {self.config.low} to {self.config.high}. Call guess; it says higher, lower or correct."

    async def run(self, task, client: openai.AsyncOpenAI) -> dict:
        secret = hidden_number(task.seed, self.config)
        messages = [{"role": "system", "content": self.system()}, {"role": "user", "content": "Go."}]
        guesses, found = 0, False
        for _ in range(min(self.config.max_turns, task.max_steps or self.config.max_turns)):
            try:
                reply = await client.chat.completions.create(model=task.model, messages=messages, tools=TOOLS)
            except openai.BadRequestError:  # out of context
                break
            message = reply.choices[0].message
            if not message.tool_calls:  # it answered in text instead of using the tool: the episode ends
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                guesses += 1
                try:
                    result = verdict(int(json.loads(call.function.arguments)["number"]), secret)
                except (ValueError, KeyError, TypeError):
                    result = "error: call guess with an integer number"
                found = found or result == "correct"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            if found:
                break
        return {"reward": float(found), "metrics": {"success": float(found), "guesses": float(guesses)}}

    def expert(self, task, messages: list[dict], tools: list[dict]) -> str:
        """Binary search over what the verdicts so far leave open (or a random guess: the format only)."""
        low, high = self.config.low, self.config.high
        if self.config.demonstrator == "random":
            number = random.Random(f"{task.seed}/{len(messages)}").randint(low, high)
            return f"<tool_call>{json.dumps({'name': 'guess', 'arguments': {'number': number}})}</tool_call>"
        last = None
        for message in messages:
            if message["role"] == "assistant" and message.get("tool_calls"):
                last = int(message["tool_calls"][-1]["function"]["arguments"]["number"])
            elif message["role"] == "tool" and last is not None:
                if message["content"] == "higher":
                    low = last + 1
                elif message["content"] == "lower":
                    high = last - 1
        call = {"name": "guess", "arguments": {"number": (low + high) // 2}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"
