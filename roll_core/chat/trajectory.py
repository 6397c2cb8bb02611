"""Trajectories assembled token-in/token-out, turn by turn.

A multi-turn episode becomes the token stream ``p_1 r_1 p_2 r_2 ... p_K r_K`` (docs/algorithms.md §0):
``r_k`` are the ids the policy generated, kept exactly (never re-tokenised), and ``p_k`` is the
text the chat template puts between turns, tokenised once. The final observation (after the last
action) is not part of the stream.

Two prompt builders:

* :class:`IncrementalPrompt` (trajectory-wise rows, or step-wise rows with the whole history): the
  prompt of turn k is the stream so far plus ``p_k``, where ``p_k`` is the suffix of
  ``render(all messages, add_generation_prompt=True)`` after the text already emitted. So the
  stream always equals the full chat-template render of the conversation.
* :class:`WindowedPrompt` (step-wise rows with a history window): every turn renders its own
  prompt from the system message and the last ``history_window`` turns; each step row is that
  prompt plus the response the model produced *for that prompt* (on-policy rows).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from roll_core.chat.codec import ChatCodec, Message


@dataclass
class PromptPiece:
    """Tokens to append before the next response (``ids``), and the text they encode."""

    ids: list[int]
    text: str
    template_mismatch: bool = False


@dataclass
class Turn:
    """One agent step: the prompt tokens added for it, the response, and what the env said."""

    prompt_ids: list[int]  # IncrementalPrompt: the delta p_k; WindowedPrompt: the whole prompt
    response_ids: list[int]
    logprobs: list[float]  # sampling log-prob of each response token
    version: int  # policy version that generated the response's first token (its turn start)
    finish_reason: str
    observation: str  # the observation this action answered (GiGPO's anchor state)
    prompt_text: str = ""
    response_text: str = ""  # decoded without special tokens: what the env parsed
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    #: version of each response token when a weight sync split the response (partial rollout);
    #: ``None``: every token is ``version``
    token_versions: list[int] | None = None
    #: False: a demonstrator's slip (warm-start demonstrations): context only, its tokens are masked
    trainable: bool = True

    def versions(self) -> list[int]:
        """The policy version of each response token."""
        return list(self.token_versions) if self.token_versions is not None else [self.version] * len(self.response_ids)


@dataclass
class Trajectory:
    """One finished episode of one env, with everything the batch builder and the dump need."""

    traj_id: str
    traj_group_id: str
    group_id: int
    episode_id: int
    member: int
    tag: str
    seed: int
    mode: str
    turns: list[Turn]
    incremental: bool  # True: concatenating prompt_ids + response_ids over turns gives the stream
    terminated: bool
    truncated: bool
    end_reason: str  # "terminated" | "max_steps" | "sequence_length"
    episode_reward: float
    metrics: dict[str, float]
    messages: list[Message]
    template_mismatches: int = 0
    frames_path: str | None = None

    @property
    def num_steps(self) -> int:
        return len(self.turns)

    @property
    def min_version(self) -> int:
        return min((t.version for t in self.turns), default=-1)

    @property
    def max_version(self) -> int:
        return max((max(t.versions(), default=t.version) for t in self.turns), default=-1)

    @property
    def response_length(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)

    def token_stream(self) -> tuple[list[int], list[int], list[float]]:
        """``(ids, trainable mask, log-probs)`` of the whole episode (IncrementalPrompt only)."""
        if not self.incremental:
            raise ValueError(
                "this trajectory was generated with a history window: each turn has its own prompt, so "
                "it has no single token stream; build step-wise samples instead"
            )
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        for turn in self.turns:
            ids += turn.prompt_ids
            mask += [0] * len(turn.prompt_ids)
            logprobs += [0.0] * len(turn.prompt_ids)
            ids += turn.response_ids
            mask += [int(turn.trainable)] * len(turn.response_ids)
            logprobs += list(turn.logprobs)
        return ids, mask, logprobs

    def step_tokens(self, k: int) -> tuple[list[int], list[int], list[float]]:
        """``(ids, mask, log-probs)`` of step ``k``'s row: its prompt (with history) and response.

        Only the response of step ``k`` is trainable (unless it is a demonstrator's slip, see
        :attr:`Turn.trainable`); earlier responses are context.
        """
        turn = self.turns[k]
        if self.incremental:
            ids, _, _ = self.token_stream_prefix(k)
        else:
            ids = list(turn.prompt_ids)
        prompt_len = len(ids)
        ids = ids + turn.response_ids
        mask = [0] * prompt_len + [int(turn.trainable)] * len(turn.response_ids)
        logprobs = [0.0] * prompt_len + list(turn.logprobs)
        return ids, mask, logprobs

    def token_stream_prefix(self, k: int) -> tuple[list[int], list[int], list[float]]:
        """The stream up to and including the prompt of turn ``k`` (IncrementalPrompt only)."""
        ids: list[int] = []
        for turn in self.turns[:k]:
            ids += turn.prompt_ids + turn.response_ids
        ids += self.turns[k].prompt_ids
        return ids, [0] * len(ids), [0.0] * len(ids)


def state_hash(observation: str) -> str:
    """A stable hash of an observation text (GiGPO groups steps by it); same in every process."""
    return hashlib.blake2b(observation.encode("utf-8"), digest_size=8).hexdigest()


class IncrementalPrompt:
    """Full-history prompts: each turn appends only the new template tokens (see module doc)."""

    incremental = True

    def __init__(self, codec: ChatCodec, ids: list[int] | None = None, text: str = "", closed: bool = True):
        """A new stream, or (``ids``, ``text``) continued: the agent gateway resumes a call's stream."""
        self.codec = codec
        self.ids: list[int] = list(ids or [])  # everything emitted so far (prompts and responses)
        self.text = text  # the text those ids encode
        self._last_response_closed = closed

    @property
    def length(self) -> int:
        return len(self.ids)

    def prompt(self, messages: list[Message], *, history: int | None = None,
               tools: list[dict] | None = None) -> PromptPiece:
        """The tokens to append so that the stream renders ``messages`` plus a generation prompt.

        ``history``: how many of ``messages`` the stream already holds (default: all but the last);
        ``tools`` are rendered by the template as well.
        """
        full = self.codec.render(messages, add_generation_prompt=True, tools=tools)
        if full.startswith(self.text):
            delta = full[len(self.text):]
            return PromptPiece(self.codec.encode(delta), delta)
        # The template renders an earlier turn differently from what was generated (it strips
        # reasoning, normalises whitespace, or the model stopped on a different special token).
        # Keep the generated tokens and append what the template puts after the last assistant
        # message: the rest of its end-of-turn text, then the new messages.
        held = len(messages) - 1 if history is None else history
        base = self.codec.render(messages[:held], add_generation_prompt=False, tools=tools)
        start = len(base) if full.startswith(base) else _common_prefix_length(full, base)
        eot = self.codec.decode(self.codec.end_of_turn_ids)
        cut = base.rfind(eot, 0, start) if eot else -1
        closing = base[cut + len(eot):start] if cut >= 0 else ""
        delta = (closing if self._last_response_closed else eot + closing) + full[start:]
        return PromptPiece(self.codec.encode(delta), delta, template_mismatch=True)

    def request_ids(self, piece: PromptPiece) -> list[int]:
        """What the model is conditioned on: the whole stream plus ``piece``."""
        return self.ids + piece.ids

    def length_with(self, piece: PromptPiece) -> int:
        return len(self.ids) + len(piece.ids)

    def commit(self, piece: PromptPiece) -> None:
        self.ids += piece.ids
        self.text += piece.text

    def add_response(self, ids: list[int], text: str) -> None:
        """Append generated ``ids``; ``text`` is their decoding (special tokens kept)."""
        self.ids += ids
        self.text += text
        self._last_response_closed = self.codec.ends_turn(ids)


class WindowedPrompt:
    """Each turn renders its own prompt from the system message and the last ``window`` turns."""

    incremental = False

    def __init__(self, codec: ChatCodec, window: int | None):
        self.codec = codec
        self.window = window

    @property
    def length(self) -> int:
        return 0  # rows do not accumulate: each step row is its own prompt plus response

    def prompt(self, messages: list[Message]) -> PromptPiece:
        text = self.codec.render(_window(messages, self.window), add_generation_prompt=True)
        return PromptPiece(self.codec.encode(text), text)

    def request_ids(self, piece: PromptPiece) -> list[int]:
        return list(piece.ids)

    def length_with(self, piece: PromptPiece) -> int:
        return len(piece.ids)

    def commit(self, piece: PromptPiece) -> None:
        pass

    def add_response(self, ids: list[int], text: str) -> None:
        pass


def _window(messages: list[Message], turns: int | None) -> list[Message]:
    """The system message, the last ``turns`` complete turns, and the current user message."""
    if turns is None:
        return messages
    system, body = messages[:1], messages[1:]
    current, history = body[-1:], body[:-1]
    user_starts = [i for i, m in enumerate(history) if m["role"] == "user"]
    keep = history[user_starts[-turns]:] if 0 < turns <= len(user_starts) else (history if turns else [])
    return system + keep + current


def _common_prefix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def make_prompt_builder(codec: ChatCodec, granularity: str, history_window: int | None) -> Any:
    """IncrementalPrompt unless step-wise rows with a history window were asked for."""
    if granularity == "step" and history_window is not None:
        return WindowedPrompt(codec, history_window)
    return IncrementalPrompt(codec)
