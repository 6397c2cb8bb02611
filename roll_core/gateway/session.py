"""One episode's calls to the gateway: prompts tokenised once, completions recorded token by token.

A :class:`Session` belongs to one agent episode (its base URL names it). For every request it

1. renders the messages (and ``tools``) with the model's chat template;
2. picks the *parent* call: the latest earlier call whose request messages plus the reply it
   returned are the start of this request (the usual multi-turn case). The prompt is then the
   parent's exact token stream (prompt + sampled completion, never re-tokenised) plus the tokens
   of what the template adds after the reply, as the env path builds its streams
   (:class:`~roll_core.chat.trajectory.IncrementalPrompt`). Without a parent (the agent rewrote
   or dropped history) the whole render is tokenised afresh;
3. refuses prompts that leave no room under ``sequence_length`` and calls beyond ``max_steps``
   (OpenAI-style 400s that also end the episode as truncated, like the env path);
4. waits while generation is paused (weight sync), generates through its backend with the run's
   sampling settings (request parameters override them in training; validation stays greedy)
   and a per-call seed derived from the episode, and stamps every call with its policy version;
5. parses tool calls out of the reply (malformed ones stay text and are counted).

:mod:`roll_core.gateway.merge` turns the recorded calls into training samples.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from roll_core.chat.codec import ChatCodec
from roll_core.chat.trajectory import IncrementalPrompt
from roll_core.gateway.openai_wire import ChatCompletionRequest, GatewayError, bad_request, stop_strings
from roll_core.gateway.tools import (
    ParsedReply,
    ToolCallParser,
    message_key,
    normalize_messages,
    normalize_tools,
    tools_key,
)
from roll_core.strategies.base import GenerationOutput, GenerationRequest, SamplingParams


class Backend(Protocol):
    """Who generates: the run's generation scheduler, or a model-free demonstrator."""

    async def generate(self, request: GenerationRequest, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]]) -> GenerationOutput: ...


@dataclass
class Call:
    """One generated choice: its prompt and completion tokens, log-probs and policy version."""

    index: int  # order of arrival in the session (the choices of one request are consecutive)
    request: int  # the request it answered (the seed stream)
    choice: int
    parent: int | None  # the call whose stream this prompt continues (None: tokenised afresh)
    prompt_ids: list[int]
    prompt_text: str
    completion_ids: list[int]
    completion_text: str  # decoded with special tokens, as the stream holds it
    logprobs: list[float]
    version: int
    finish_reason: str  # OpenAI's: stop | length | tool_calls
    messages: list[dict[str, Any]]
    message_keys: list[tuple]
    tools_key: str
    reply: ParsedReply
    observation: str  # what this call answered (GiGPO's anchor state)
    template_mismatch: bool = False
    token_versions: list[int] | None = None  # per completion token, when a weight sync split it

    @property
    def reply_key(self) -> tuple:
        return message_key(self.reply.message())

    @property
    def stream_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


@dataclass
class Completion:
    """What one request produced: a call per choice."""

    calls: list[Call]
    prompt_tokens: int
    version: int


@dataclass
class Prompt:
    ids: list[int]
    text: str
    parent: int | None
    template_mismatch: bool = False


@dataclass
class SessionSettings:
    """What a session needs from the rollout: limits, sampling, seeds and the episode's hooks."""

    sequence_length: int
    sampling: SamplingParams  # the run's generating_args for this tag (greedy in validation)
    seed: Callable[[int, int], int]  # (request, choice) -> sampling seed
    route_key: str | None = None
    request_prefix: str = "agent"
    greedy_only: bool = False  # validation: request sampling parameters do not apply
    max_new_tokens_cap: int | None = None  # max_tokens_per_step
    max_calls: int | None = None  # max_steps: requests per episode
    wait_resumed: Callable[[], Awaitable[None]] | None = None
    cancelled: Callable[[], bool] = lambda: False
    stale: Callable[[int, int], bool] | None = None


class Session:
    """See the module docstring."""

    def __init__(self, session_id: str, codec: ChatCodec, parser: ToolCallParser, backend: Backend,
                 settings: SessionSettings):
        self.id = session_id
        self.codec = codec
        self.parser = parser
        self.backend = backend
        self.settings = settings
        self.calls: list[Call] = []
        self.requests = 0
        self.in_flight = 0
        self.last_activity = time.monotonic()
        self.closed = False
        #: why the episode ended early: max_steps | sequence_length (truncation, rows kept), or a
        #: failure (stale, cancelled, generation_error); None while it runs normally
        self.end_reason: str | None = None
        self.failure: str | None = None
        self.counts = {"tool_calls": 0, "malformed_tool_calls": 0, "template_mismatch": 0, "errors": 0}
        self.changed = asyncio.Event()
        self._tool_support: dict[str, bool] = {}

    # -- state ------------------------------------------------------------------------------
    def idle_s(self) -> float:
        """Seconds the agent has spent in its own code since its last call (0 while a call runs)."""
        return 0.0 if self.in_flight else time.monotonic() - self.last_activity

    @property
    def first_version(self) -> int | None:
        return min((c.version for c in self.calls), default=None)

    def truncate(self, reason: str) -> None:
        if self.end_reason is None:
            self.end_reason = reason

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    def _check_open(self) -> None:
        if self.closed or self.failure is not None:
            raise GatewayError(409, f"episode session {self.id} is over ({self.failure or 'finished'}); "
                                    "its client can make no more calls.", code="episode_over")
        if self.settings.cancelled():
            self.fail("cancelled")
            raise GatewayError(409, "this episode was cancelled (its group no longer needs it).",
                               code="episode_cancelled")

    # -- one request ------------------------------------------------------------------------
    async def complete(self, request: ChatCompletionRequest) -> Completion:
        self._check_open()
        messages = normalize_messages(request.messages)
        tools = normalize_tools(request.tools)
        stops = stop_strings(request)
        if tools:
            self._check_tool_support(tools)
        s = self.settings
        number = self.requests
        self.requests += 1
        if s.max_calls is not None and number >= s.max_calls:
            self.truncate("max_steps")
            raise bad_request(f"This episode allows {s.max_calls} model calls (custom_envs max_steps); the "
                              "episode ends here.", code="max_steps_exceeded")
        prompt = self.prompt(messages, tools)
        budget = s.sequence_length - len(prompt.ids)
        if budget < 1:
            self.truncate("sequence_length")
            raise bad_request(f"This model's maximum context length is {s.sequence_length} tokens (sequence_length); "
                              f"the messages take {len(prompt.ids)}. The episode ends here.",
                              param="messages", code="context_length_exceeded")
        requests = [GenerationRequest(request_id=f"{s.request_prefix}-c{number}" + (f"-{k}" if k else ""),
                                      prompt_ids=list(prompt.ids),
                                      sampling=self.sampling(request, budget, number, k, stops),
                                      route_key=s.route_key)
                    for k in range(request.n)]
        self.in_flight += 1
        try:
            if s.wait_resumed is not None:
                await s.wait_resumed()
            self._check_open()
            outputs = await asyncio.gather(*(self.backend.generate(r, messages, tools) for r in requests))
        except GatewayError:
            raise
        except Exception as exc:
            self.fail("generation_error")
            raise GatewayError(500, f"generation failed: {type(exc).__name__}: {exc}", type="server_error",
                               code="generation_error") from exc
        finally:
            self.in_flight -= 1
            self.last_activity = time.monotonic()
        if any(o.finish_reason == "abort" for o in outputs):
            self.fail("generation_aborted")
            raise GatewayError(500, "generation was aborted", type="server_error", code="generation_aborted")
        # the newest token's version; the episode's start: its oldest turn start (first token)
        version = max(max(o.versions(), default=int(o.policy_version)) for o in outputs)
        start = min(int(o.policy_version) for o in outputs)
        first = self.first_version
        if s.stale is not None and s.stale(min(first, start) if first is not None else start, version):
            self.fail("stale")
            raise GatewayError(409, f"this episode began on policy version {first}; version {version} is too far "
                                    "ahead for it to be trained on (async_generation_ratio).", code="episode_stale")
        self._check_open()
        return Completion([self._record(number, k, prompt, out, messages, tools, request, stops)
                           for k, out in enumerate(outputs)], len(prompt.ids), version)

    def _check_tool_support(self, tools: list[dict[str, Any]]) -> None:
        key = tools_key(tools)
        if key not in self._tool_support:
            probe = [{"role": "user", "content": "?"}]
            self._tool_support[key] = (self.codec.render(probe, add_generation_prompt=True, tools=tools)
                                       != self.codec.render(probe, add_generation_prompt=True))
        if not self._tool_support[key]:
            name = getattr(self.codec.tokenizer, "name_or_path", "this model")
            raise bad_request(f"The chat template of {name} does not render tools, so the model would never see "
                              "them; use a model whose template does (Qwen2.5/Hermes-style, roll-tiny).",
                              param="tools", code="tools_not_supported")

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Prompt:
        """The prompt tokens of ``messages``: a parent call's stream continued, or a fresh render."""
        keys = [message_key(m) for m in messages]
        tkey = tools_key(tools)
        for call in reversed(self.calls):
            n = len(call.message_keys)
            if (call.tools_key == tkey and len(keys) > n and keys[n] == call.reply_key
                    and keys[:n] == call.message_keys):
                builder = IncrementalPrompt(self.codec, call.stream_ids, call.prompt_text + call.completion_text,
                                            closed=self.codec.ends_turn(call.completion_ids))
                piece = builder.prompt(messages, history=n + 1, tools=tools)
                return Prompt(builder.ids + piece.ids, builder.text + piece.text, call.index, piece.template_mismatch)
        text = self.codec.render(messages, add_generation_prompt=True, tools=tools)
        return Prompt(self.codec.encode(text), text, None)

    def sampling(self, request: ChatCompletionRequest, budget: int, number: int, choice: int,
                 stops: tuple[str, ...]) -> SamplingParams:
        s = self.settings
        values: dict[str, Any] = {}
        if not s.greedy_only:
            if request.temperature is not None:
                values["temperature"] = request.temperature
            if request.top_p is not None:
                values["top_p"] = request.top_p
            if request.top_k is not None:
                values["top_k"] = max(0, request.top_k)
        wanted = request.max_completion_tokens or request.max_tokens or s.sampling.max_new_tokens
        caps = [c for c in (wanted, s.max_new_tokens_cap, budget) if c]
        if request.seed is not None:
            seed = int(request.seed) + choice
        elif s.sampling.seed is not None:
            seed = s.sampling.seed
        else:
            seed = s.seed(number, choice)
        return replace(s.sampling, max_new_tokens=min(caps), stop_strings=s.sampling.stop_strings + stops,
                       seed=seed, **values)

    def _record(self, number: int, choice: int, prompt: Prompt, output: GenerationOutput,
                messages: list[dict[str, Any]], tools: list[dict[str, Any]], request: ChatCompletionRequest,
                stops: tuple[str, ...]) -> Call:
        ids = list(output.token_ids)
        full_text, text = self.codec.response_texts(ids)
        cut = min((i for i in (text.find(stop) for stop in stops) if i >= 0), default=-1)
        if cut >= 0:  # OpenAI leaves the stop sequence out of the content
            text = text[:cut]
        parse = tools and request.tool_choice != "none"
        reply = self.parser.parse(text, prefix=prompt.text, tools=tools) if parse else ParsedReply(text)
        self.counts["tool_calls"] += len(reply.tool_calls)
        self.counts["malformed_tool_calls"] += int(reply.malformed)
        self.counts["template_mismatch"] += int(prompt.template_mismatch)
        finish = "length" if output.finish_reason == "length" else ("tool_calls" if reply.tool_calls else "stop")
        call = Call(index=len(self.calls), request=number, choice=choice, parent=prompt.parent,
                    prompt_ids=list(prompt.ids), prompt_text=prompt.text, completion_ids=ids,
                    completion_text=full_text, logprobs=[float(x) for x in output.logprobs],
                    version=int(output.policy_version), finish_reason=finish, messages=messages,
                    message_keys=[message_key(m) for m in messages], tools_key=tools_key(tools), reply=reply,
                    observation=observation(messages, request.metadata), template_mismatch=prompt.template_mismatch,
                    token_versions=None if output.token_versions is None else list(output.token_versions))
        self.calls.append(call)
        return call

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.codec.decode([i]) for i in ids]


def observation(messages: Sequence[Mapping[str, Any]], metadata: Mapping[str, str] | None) -> str:
    """The state a call answered: ``metadata["observation"]`` when the agent names it, else the
    messages after the last assistant turn (the new user / tool input)."""
    if metadata and "observation" in metadata:
        return str(metadata["observation"])
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return "\n".join(str(m.get("content") or "") for m in messages[last + 1:])

