"""One episode's calls to the gateway: prompts tokenised once, completions recorded token by token.

A :class:`Session` belongs to one agent episode (its base URL names it). For every request it

1. validates the body, renders the messages (and ``tools``) with the model's chat template and
   tokenises them (:meth:`Session.prepare`, run off the event loop by the server: a large body must
   not stall the other episodes of the worker);
2. picks the *parent* call: the latest earlier call whose request messages plus the reply it
   returned are the start of this request (the usual multi-turn case). The prompt is then the
   parent's exact token stream (prompt + sampled completion, never re-tokenised) plus the tokens
   of what the template adds after the reply, as the env path builds its streams
   (:class:`~roll_core.chat.trajectory.IncrementalPrompt`). Without a parent (the agent rewrote
   or dropped history) the whole render is tokenised afresh;
3. refuses prompts that leave no room under ``sequence_length`` and calls beyond ``max_steps``
   with OpenAI-style 400s. A refused request costs nothing: it is not a model call, takes none of
   the ``max_steps`` calls and shifts no seed. The refusal marks the episode truncated
   (``end_reason`` ``sequence_length`` / ``max_steps``) unless a later call succeeds (the agent
   caught the error and, say, summarised its history);
4. waits while generation is paused (weight sync), generates through its backend with the run's
   sampling settings (request parameters override them in training; validation stays greedy)
   and a per-call seed derived from the episode, and stamps every call with its policy version;
5. parses tool calls out of the reply (malformed ones stay text and are counted).

A reply becomes a recorded call (a training row) only once the server has delivered it
(:meth:`Session.commit`): a reply whose client went away first (a dropped connection, a cancelled
stream) is not an action the agent took, so it is counted (``undelivered_calls``) and not trained
on. :mod:`roll_core.gateway.merge` turns the recorded calls into training samples.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from jinja2.exceptions import TemplateError

from roll_core.chat.codec import ChatCodec
from roll_core.chat.trajectory import IncrementalPrompt
from roll_core.errors import InferenceLost
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

#: end reasons a refused request sets, cleared when a later call of the episode is delivered
REFUSALS = ("max_steps", "sequence_length")


class Backend(Protocol):
    """Who generates: the run's generation scheduler, or a model-free demonstrator."""

    async def generate(self, request: GenerationRequest, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]]) -> GenerationOutput: ...


@dataclass
class Call:
    """One generated choice: its prompt and completion tokens, log-probs and policy version."""

    index: int  # order of delivery in the session (-1 until committed; a request's choices are consecutive)
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
    text: str = ""  # the reply as generated, tool-call markup included (no trailing special tokens)
    token_versions: list[int] | None = None  # per completion token, when a weight sync split it

    @property
    def reply_key(self) -> tuple:
        return message_key(self.reply.message())

    @property
    def stream_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


@dataclass
class Completion:
    """What one request produced: a call per choice (recorded once delivered: :meth:`Session.commit`)."""

    calls: list[Call]
    prompt_tokens: int
    version: int
    number: int  # the request's number in the episode (its seed stream)


@dataclass
class Prompt:
    ids: list[int]
    text: str
    parent: int | None
    template_mismatch: bool = False


@dataclass
class Prepared:
    """A request validated, rendered and tokenised (:meth:`Session.prepare`, off the event loop)."""

    request: ChatCompletionRequest
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    stops: tuple[str, ...]
    prompt: Prompt


class Refused(GatewayError):
    """A 400 that ends the episode as truncated unless a later call succeeds (``end_reason``)."""

    def __init__(self, end_reason: str, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(400, message, param=param, code=code)
        self.end_reason = end_reason


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
        self.calls: list[Call] = []  # delivered replies, in order of delivery: the training rows
        self.requests = 0  # admitted requests (each is a model call: the seed stream, max_steps)
        self.in_flight = 0
        self.last_activity = time.monotonic()
        self.closed = False
        #: why the episode ended early: max_steps | sequence_length (truncation, rows kept), or a
        #: failure (stale, cancelled, generation_error, inference_lost); None while it runs normally
        self.end_reason: str | None = None
        self._refused_at = 0  # admitted requests when end_reason was set (later calls clear it)
        self.failure: str | None = None
        self.error: BaseException | None = None  # what caused the failure, when roll raised it
        #: refused: 400s that ended the episode; undelivered_calls: replies whose client had gone;
        #: concurrent_calls: requests admitted while another of the episode was generating
        self.counts = {"tool_calls": 0, "malformed_tool_calls": 0, "template_mismatch": 0, "errors": 0,
                       "refused": 0, "undelivered_calls": 0, "concurrent_calls": 0}
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
            self._refused_at = self.requests

    def fail(self, reason: str, error: BaseException | None = None) -> None:
        if self.failure is None:
            self.failure = reason
            self.error = error
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

    def _check_calls_left(self) -> None:
        limit = self.settings.max_calls
        if limit is not None and self.requests >= limit:
            self._refuse(Refused("max_steps", f"This episode allows {limit} model calls (custom_envs max_steps); "
                                              "the episode ends here.", code="max_steps_exceeded"))

    def _refuse(self, refusal: Refused) -> None:
        self.truncate(refusal.end_reason)
        self.counts["refused"] += 1
        raise refusal

    # -- one request ------------------------------------------------------------------------
    async def complete(self, request: ChatCompletionRequest,
                       offload: Callable[[Callable[[], Prepared]], Awaitable[Prepared]] | None = None) -> Completion:
        """Generate the choices of ``request``; ``offload(fn)`` runs the rendering (default: here).

        The calls are not recorded yet: the server commits them once the reply is delivered.
        """
        self._check_open()
        self._check_calls_left()  # before rendering: a call over the limit costs nothing
        try:
            prepared = await offload(partial(self.prepare, request)) if offload else self.prepare(request)
        except Refused as refusal:
            self._refuse(refusal)
        self._check_open()
        self._check_calls_left()  # again: concurrent calls of the episode were admitted meanwhile
        s = self.settings
        number = self.requests
        self.requests += 1
        self.counts["concurrent_calls"] += int(self.in_flight > 0)
        prompt, budget = prepared.prompt, s.sequence_length - len(prepared.prompt.ids)
        requests = [GenerationRequest(request_id=f"{s.request_prefix}-c{number}" + (f"-{k}" if k else ""),
                                      prompt_ids=list(prompt.ids),
                                      sampling=self.sampling(request, budget, number, k, prepared.stops),
                                      route_key=s.route_key)
                    for k in range(request.n)]
        self.in_flight += 1
        try:
            if s.wait_resumed is not None:
                await s.wait_resumed()
            self._check_open()
            outputs = await asyncio.gather(*(self.backend.generate(r, prepared.messages, prepared.tools)
                                             for r in requests))
        except GatewayError:
            raise
        except InferenceLost as exc:  # no inference worker left: the run stops, the episode is not to blame
            self.fail("inference_lost", exc)
            raise GatewayError(503, str(exc), type="server_error", code="inference_lost") from exc
        except Exception as exc:
            self.fail("generation_error", exc)
            code = getattr(exc, "gateway_code", None) or "generation_error"
            raise GatewayError(500, f"generation failed: {type(exc).__name__}: {exc}", type="server_error",
                               code=code) from exc
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
        calls = [self._call(number, k, prepared, out) for k, out in enumerate(outputs)]
        return Completion(calls, len(prompt.ids), version, number)

    def prepare(self, request: ChatCompletionRequest) -> Prepared:
        """Validate, render and tokenise ``request`` (thread-safe: reads the session, changes nothing
        but a cache). Raises :class:`Refused` when the prompt leaves no room under sequence_length."""
        messages = normalize_messages(request.messages)
        tools = normalize_tools(request.tools)
        stops = stop_strings(request)
        if tools:
            self._check_tool_support(tools)
        limit = self.settings.sequence_length
        if len(messages) >= limit:  # every message renders to at least one token: refused unrendered
            raise self._too_long(f"{len(messages)} messages (at least one token each)")
        try:
            prompt = self.prompt(messages, tools)
        except TemplateError as exc:
            raise bad_request(f"The model's chat template refused these messages: {exc}", param="messages",
                              code="template_error") from None
        if limit - len(prompt.ids) < 1:
            raise self._too_long(f"{len(prompt.ids)} tokens")
        return Prepared(request, messages, tools, stops, prompt)

    def _too_long(self, size: str) -> Refused:
        return Refused("sequence_length", f"This model's maximum context length is {self.settings.sequence_length} "
                                          f"tokens (sequence_length); the messages take {size}.",
                       param="messages", code="context_length_exceeded")

    def commit(self, completion: Completion) -> None:
        """Record ``completion``'s calls: their reply reached the agent."""
        for call in completion.calls:
            call.index = len(self.calls)
            self.calls.append(call)
            self.counts["tool_calls"] += len(call.reply.tool_calls)
            self.counts["malformed_tool_calls"] += int(call.reply.malformed)
            self.counts["template_mismatch"] += int(call.template_mismatch)
        if self.end_reason in REFUSALS and completion.number >= self._refused_at:
            self.end_reason = None  # the agent got past the refusal (it shortened its history, say)

    def discard(self, completion: Completion) -> None:
        """``completion`` never reached the agent: not an action it took, so not trained on (counted)."""
        self.counts["undelivered_calls"] += len(completion.calls)

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
        for call in reversed(list(self.calls)):
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

    def _call(self, number: int, choice: int, prepared: Prepared, output: GenerationOutput) -> Call:
        """One generated choice as a call (indexed and counted when committed)."""
        prompt, request, messages, tools = prepared.prompt, prepared.request, prepared.messages, prepared.tools
        ids = list(output.token_ids)
        full_text, text = self.codec.response_texts(ids)
        generated = text
        cut = min((i for i in (text.find(stop) for stop in prepared.stops) if i >= 0), default=-1)
        if cut >= 0:  # OpenAI leaves the stop sequence out of the content
            text = text[:cut]
        parse = tools and request.tool_choice != "none"
        reply = self.parser.parse(text, prefix=prompt.text, tools=tools) if parse else ParsedReply(text)
        finish = "length" if output.finish_reason == "length" else ("tool_calls" if reply.tool_calls else "stop")
        return Call(index=-1, request=number, choice=choice, parent=prompt.parent,
                    prompt_ids=list(prompt.ids), prompt_text=prompt.text, completion_ids=ids,
                    completion_text=full_text, logprobs=[float(x) for x in output.logprobs],
                    version=int(output.policy_version), finish_reason=finish, messages=messages,
                    message_keys=[message_key(m) for m in messages], tools_key=tools_key(tools), reply=reply,
                    observation=observation(messages, request.metadata), template_mismatch=prompt.template_mismatch,
                    text=generated,
                    token_versions=None if output.token_versions is None else list(output.token_versions))

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        return [self.codec.decode([i]) for i in ids]


def observation(messages: Sequence[Mapping[str, Any]], metadata: Mapping[str, str] | None) -> str:
    """The state a call answered: ``metadata["observation"]`` when the agent names it, else the
    messages after the last assistant turn (the new user / tool input)."""
    if metadata and "observation" in metadata:
        return str(metadata["observation"])
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return "\n".join(str(m.get("content") or "") for m in messages[last + 1:])

