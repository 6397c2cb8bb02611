"""The chat messages a model sees while it plays an env: one place, used by rollout and ``env play``.

An episode is a conversation: the env's instruction is the system message, every observation a
user message (:func:`format_turn_prompt` adds the turn number, the reward of the last action, the
actions left and the answer format), every model response an assistant message. Keeping this in
one function is what makes ``roll env play`` print *exactly* what the model is trained on.

A config can replace both texts, ROLL-style, with ``agent_system_template`` and ``agent_template``
(``custom_envs`` entries). Templates are ``str.format`` strings; the turn template's placeholders
are :data:`TURN_PLACEHOLDERS` (ROLL's ``{turn_idx}``, ``{state}``, ``{actions_left}``,
``{max_response_length}`` among them), the system template's ``{instruction}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roll_core.errors import ConfigError

Message = dict[str, str]

#: placeholders a turn template may use
TURN_PLACEHOLDERS = ("turn_idx", "state", "actions_left", "max_response_length", "reward", "format_example")


def _fill(template: str, values: dict[str, Any], what: str) -> str:
    try:
        return template.format_map(values)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"The {what} {template!r} cannot be filled ({type(exc).__name__}: {exc}); it may use "
            f"{', '.join('{' + k + '}' for k in values)}, and literal braces must be doubled."
        ) from exc


def format_example(env: Any) -> str:
    """A correctly formatted response for ``env`` (``<answer>Left</answer>``), shown to the model."""
    return env.parser.format(env.example_action())


def format_turn_prompt(observation: str, *, turn: int, actions_left: int | None = None,
                       last_reward: float | None = None, format_example: str | None = None,
                       max_tokens: int | None = None, template: str | None = None) -> str:
    """The user message for one turn: last reward (after turn 1), the state, and how to answer.

    With ``template`` (a config's ``agent_template``) the message is that template filled in.
    """
    if template is not None:
        values = {"turn_idx": turn, "state": observation, "actions_left": actions_left,
                  "max_response_length": max_tokens, "reward": last_reward, "format_example": format_example}
        return _fill(template, values, "agent_template")
    lines = []
    if last_reward is not None:
        lines.append(f"Reward of your last action: {last_reward:g}")
    lines.append(f"Turn {turn}. State:")
    lines.append(observation)
    if actions_left is not None:
        lines.append(f"You have {actions_left} action{'s' if actions_left != 1 else ''} left.")
    if format_example:
        hint = f"Think briefly if you need to, then give exactly one action in the form {format_example}"
        if max_tokens:
            hint += f", in at most {max_tokens} tokens"
        lines.append(hint + ".")
    return "\n".join(lines)


class Conversation:
    """The messages of one episode in chat format (``[{"role": ..., "content": ...}, ...]``)."""

    def __init__(self, instruction: str, *, format_example: str | None = None,
                 max_tokens: int | None = None, system_template: str | None = None,
                 turn_template: str | None = None):
        self.format_example = format_example
        self.max_tokens = max_tokens
        self.turn_template = turn_template
        system = instruction
        if system_template is not None:
            system = (_fill(system_template, {"instruction": instruction}, "agent_system_template")
                      if "{instruction}" in system_template else f"{system_template}\n{instruction}")
        self.messages: list[Message] = [{"role": "system", "content": system}]
        self.turn = 0

    @classmethod
    def for_env(cls, env: Any, *, max_tokens: int | None = None, system_template: str | None = None,
                turn_template: str | None = None) -> Conversation:
        """A conversation using ``env``'s instruction and answer format."""
        return cls(env.instruction, format_example=format_example(env), max_tokens=max_tokens,
                   system_template=system_template, turn_template=turn_template)

    def observe(self, observation: str, *, actions_left: int | None = None,
                last_reward: float | None = None) -> Message:
        """Append the next turn's user message and return it."""
        self.turn += 1
        message = {
            "role": "user",
            "content": format_turn_prompt(
                observation, turn=self.turn, actions_left=actions_left, last_reward=last_reward,
                format_example=self.format_example, max_tokens=self.max_tokens, template=self.turn_template,
            ),
        }
        self.messages.append(message)
        return message

    def respond(self, response: str) -> Message:
        """Append the model's response to the current turn and return it."""
        message = {"role": "assistant", "content": response}
        self.messages.append(message)
        return message

    def window(self, last_turns: int | None) -> list[Message]:
        """The system message plus the last ``last_turns`` turns (step-wise rollouts' history window)."""
        if last_turns is None:
            return list(self.messages)
        body = self.messages[1:]
        starts = [i for i, m in enumerate(body) if m["role"] == "user"]
        if last_turns <= 0 or not starts:
            return self.messages[:1]
        keep_from = starts[-last_turns] if last_turns < len(starts) else 0
        return self.messages[:1] + body[keep_from:]


def render_messages(messages: Sequence[Message]) -> str:
    """Plain-text view of chat messages, for terminals and logs."""
    return "\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
