"""A tool-using agent: arithmetic questions answered with the help of a ``calculate`` tool.

Each episode asks one question ("What is 37*41?") drawn from the task's seed. The agent offers the
model one tool through the OpenAI ``tools`` parameter, runs every tool call the model makes and
sends the result back as a ``tool`` message, until the model answers ``<answer>N</answer>`` or the
turn budget runs out. Reward 1 for the right number. A tiny model cannot multiply two-digit
numbers, but it can learn to copy the question into a tool call and the tool's result into its
answer: the reward is earned by calling the tool.

The class form of an agent: roll builds one per env slot with its validated config, calls
:meth:`CalculatorAgent.run` per episode, and :meth:`CalculatorAgent.expert` writes the reply a
demonstrator would (the ``scripted`` policy, used by ``warmup_sft``).
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re

import openai
from pydantic import BaseModel, ConfigDict, Field

TOOLS = [{
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]},
    },
}]
SYSTEM = "Answer the question. Call calculate, then answer <answer>N</answer>."
ANSWER = re.compile(r"<answer>\s*(-?\d+)\s*</answer>")
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


class CalculatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    low: int = Field(10, ge=0, description="Smallest operand.")
    high: int = Field(99, ge=1, description="Largest operand.")
    operators: str = Field("+-*", min_length=1, description="Operators questions use.")
    max_turns: int = Field(3, ge=1, description="Model calls per episode (custom_envs max_steps caps it too).")


def question(seed: int, config: CalculatorConfig) -> tuple[str, int]:
    """The expression asked for in episode ``seed``, and its value."""
    rng = random.Random(seed)
    a, b = rng.randint(config.low, config.high), rng.randint(config.low, config.high)
    expression = f"{a}{rng.choice(config.operators)}{b}"
    return expression, calculate(expression)


def calculate(expression: str) -> int:
    """Integer arithmetic (+, -, *) without eval: anything else raises ValueError."""
    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(f"not integer arithmetic: {expression!r}")

    try:
        return value(ast.parse(str(expression).strip(), mode="eval"))
    except SyntaxError as exc:
        raise ValueError(f"not integer arithmetic: {expression!r}") from exc


class CalculatorAgent:
    config_model = CalculatorConfig

    def __init__(self, config: CalculatorConfig):
        self.config = config

    async def run(self, task, client: openai.AsyncOpenAI) -> dict:
        expression, truth = question(task.seed, self.config)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {expression}?"}]
        calls = tool_errors = 0
        answer = None
        for _ in range(min(self.config.max_turns, task.max_steps or self.config.max_turns)):
            try:
                reply = await client.chat.completions.create(model=task.model, messages=messages, tools=TOOLS)
            except openai.BadRequestError:  # out of context
                break
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                found = ANSWER.search(message.content or "")
                answer = int(found.group(1)) if found else None
                break
            for call in message.tool_calls:
                calls += 1
                try:
                    result = str(calculate(json.loads(call.function.arguments).get("expression", "")))
                except (ValueError, AttributeError):
                    result, tool_errors = "error: give an expression such as 12*34", tool_errors + 1
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        correct = answer == truth
        return {"reward": float(correct),
                "metrics": {"success": float(correct), "used_tool": float(calls > 0), "tool_errors": float(tool_errors),
                            "answered": float(answer is not None)}}

    def expert(self, task, messages: list[dict], tools: list[dict]) -> str:
        """Call the tool on the question, then answer with its result."""
        if messages[-1]["role"] == "tool":
            return f"<answer>{messages[-1]['content']}</answer>"
        expression, _ = question(task.seed, self.config)
        call = {"name": "calculate", "arguments": {"expression": expression}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"
