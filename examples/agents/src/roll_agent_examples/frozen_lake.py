"""FrozenLake played by agent code that knows only the OpenAI API.

The game is the one roll's built-in ``frozen_lake`` env plays (the same maps per seed, the same
rules and rewards), but the loop lives here, in user code: reset, ask the model, step, repeat.
Nothing here imports roll's rollout machinery; roll hands :func:`play` a task (seed, config,
model name, turn budget) and an ``openai.AsyncOpenAI`` client pointed at its gateway, records
every completion token by token, and trains on them. The prompts are written out below; by
default they are word for word the built-in env's, so both paths produce the same training rows
(roll's tests check that, token for token).
"""

from __future__ import annotations

import openai
from pydantic import Field
from roll_env_frozenlake.env import FrozenLakeConfig, FrozenLakeEnv


class AgentConfig(FrozenLakeConfig):
    """The game's settings, plus how this agent words its turns."""

    turn_template: str | None = Field(None, description="Each turn's user message as a format string, e.g. \"{state}\" (default: the full prompt).")


def turn_message(observation: str, *, turn: int, actions_left: int, last_reward: float | None, example: str,
                 max_tokens: int | None, template: str | None = None) -> str:
    """One turn's user message."""
    if template is not None:
        return template.format(state=observation, turn_idx=turn, actions_left=actions_left, reward=last_reward,
                               max_response_length=max_tokens, format_example=example)
    lines = [] if last_reward is None else [f"Reward of your last action: {last_reward:g}"]
    lines += [f"Turn {turn}. State:", observation, f"You have {actions_left} action{'s' if actions_left != 1 else ''} left."]
    hint = f"Think briefly if you need to, then give exactly one action in the form {example}"
    if max_tokens:
        hint += f", in at most {max_tokens} tokens"
    return "\n".join(lines + [hint + "."])


async def play(task, client: openai.AsyncOpenAI, game: FrozenLakeEnv | None = None) -> dict:
    """One episode: the reward, the reward of every move, and the usual FrozenLake metrics."""
    game = game or FrozenLakeEnv(task.config)
    observation, info = game.reset(seed=task.seed)
    messages = [{"role": "system", "content": info["instruction"]}]
    example = game.parser.format("Left")
    turns = task.max_steps or game.config.max_steps
    rewards, valid, effective = [], [], []
    last_reward, terminated = None, False
    for turn in range(1, turns + 1):
        messages.append({"role": "user", "content": turn_message(
            observation, turn=turn, actions_left=turns - turn + 1, last_reward=last_reward, example=example,
            max_tokens=task.max_tokens, template=task.config.turn_template)})
        try:
            reply = await client.chat.completions.create(model=task.model, messages=messages,
                                                         metadata={"observation": observation})
        except openai.BadRequestError:  # the conversation no longer fits the model's context
            break
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        observation, reward, terminated, truncated, step = game.step(text)
        rewards.append(reward)
        valid.append(step["metrics"]["action_is_valid"])
        effective.append(step["metrics"]["action_is_effective"])
        last_reward = reward
        if terminated or truncated:
            break
    n = max(len(rewards), 1)
    return {"reward": sum(rewards), "step_rewards": rewards, "truncated": not terminated,
            "metrics": {"success": float(game.success), "action_is_valid": sum(valid) / n,
                        "action_is_effective": sum(effective) / n}}


def expert(task, messages: list[dict], tools: list[dict]) -> str:
    """The solver's next move in the conversation's game (replayed from the seed and the moves so far):
    demonstrations for a warm start (``warmup_sft.policy: scripted``)."""
    game = FrozenLakeEnv(task.config)
    game.reset(seed=task.seed)
    for message in messages:
        if message["role"] == "assistant":
            game.step(message["content"])
    plan = game.solve() if not game.done else None
    return game.parser.format(plan[0] if plan else game.valid_actions()[0])
