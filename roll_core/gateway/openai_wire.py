"""The OpenAI chat-completions wire format: request validation, OpenAI-style errors, responses.

Requests are validated strictly (an unknown parameter is an error, as OpenAI's API does) and every
problem becomes a :class:`GatewayError` that the server turns into OpenAI's error body
``{"error": {"message", "type", "param", "code"}}`` with a 4xx status, so agent code sees the
same exceptions (``openai.BadRequestError`` ...) it would see from OpenAI. Parameters that would
change the sampling distribution in ways roll cannot honour (penalties, logit bias, JSON mode,
forced tool calls) are refused unless set to their neutral values, never silently ignored.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: OpenAI's message roles; ``developer`` is rendered as ``system`` (what chat templates know)
ROLES = ("system", "developer", "user", "assistant", "tool")
#: OpenAI's limit on ``n``; every choice is one generation
MAX_CHOICES = 16
#: deepest nesting of objects and arrays a request body may have (a chat request needs about 8;
#: deeper bodies are refused before anything recursive walks them)
MAX_JSON_DEPTH = 64


class GatewayError(Exception):
    """A request the gateway refuses: ``status`` and OpenAI's error fields."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` as roll accepts it (OpenAI's field names and ranges)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)  # vLLM's extension; 0 or -1: off
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    # accepted and without effect here
    user: str | None = None
    store: bool | None = None
    parallel_tool_calls: bool | None = None
    service_tier: str | None = None
    # accepted only at their neutral values (see check_neutral)
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None


def parse_request(raw: bytes) -> ChatCompletionRequest:
    """The request body, validated; a :class:`GatewayError` naming the first problem otherwise."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}.") from None
    except RecursionError:  # nested beyond what the parser follows
        raise _too_deep() from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise _too_deep()
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.")
    try:
        request = ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = ".".join(str(p) for p in error["loc"])
        if error["type"] == "extra_forbidden":
            raise bad_request(f"Unrecognized request argument supplied: {param}.", param=param) from None
        if error["type"] == "missing":
            raise bad_request(f"Missing required parameter: {param!r}.", param=param,
                              code="missing_required_parameter") from None
        raise bad_request(f"Invalid value for {param!r}: {error['msg']}.", param=param,
                          code="invalid_value") from None
    check_neutral(request)
    return request


def _too_deep() -> GatewayError:
    return bad_request(f"The request body nests objects or arrays more than {MAX_JSON_DEPTH} levels deep.",
                       code="nested_too_deeply")


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests lists and dicts (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:  # no need to walk further down than the limit
            stack.extend((child, depth + 1) for child in item)
    return deepest


def check_neutral(request: ChatCompletionRequest) -> None:
    """Refuse what would change sampling in ways roll does not implement (not silently ignored)."""
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(request, name):
            raise bad_request(f"{name} is not supported by roll's gateway (the sampled tokens would not follow "
                              "it); leave it unset or 0.", param=name, code="unsupported_parameter")
    if request.logit_bias:
        raise bad_request("logit_bias is not supported by roll's gateway; leave it unset.", param="logit_bias",
                          code="unsupported_parameter")
    if request.response_format and request.response_format.get("type", "text") != "text":
        raise bad_request("response_format other than {'type': 'text'} is not supported (roll does not "
                          "constrain decoding).", param="response_format", code="unsupported_parameter")
    if request.top_logprobs:
        raise bad_request("top_logprobs is not supported: roll records the log-prob of each sampled token "
                          "(logprobs=true), not the alternatives.", param="top_logprobs",
                          code="unsupported_parameter")
    choice = request.tool_choice
    if choice not in (None, "auto", "none"):
        raise bad_request(f"tool_choice {choice!r} is not supported: roll samples the model as it is and cannot "
                          "force a tool call; use 'auto' or 'none'.", param="tool_choice",
                          code="unsupported_parameter")


def stop_strings(request: ChatCompletionRequest) -> tuple[str, ...]:
    stop = request.stop
    if stop is None:
        return ()
    values = [stop] if isinstance(stop, str) else list(stop)
    if len(values) > 4 or not all(isinstance(s, str) and s for s in values):
        raise bad_request("stop must be a non-empty string or a list of at most 4 of them.", param="stop")
    return tuple(values)


# -- responses ---------------------------------------------------------------------------------
@dataclass
class Choice:
    """One generated choice as the client sees it."""

    index: int
    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    tokens: list[str] = field(default_factory=list)  # per generated token (for logprobs)
    logprobs: list[float] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message

    def logprobs_body(self) -> dict[str, Any]:
        return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                            for t, lp in zip(self.tokens, self.logprobs)], "refusal": None}


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def completion_body(*, model: str, choices: Sequence[Choice], prompt_tokens: int, completion_tokens: int,
                    version: int, with_logprobs: bool, response_id: str | None = None) -> dict[str, Any]:
    """A ``chat.completion`` object; ``system_fingerprint`` and ``policy_version`` name the policy
    version that answered (the weights generation used)."""
    return {
        "id": response_id or completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": fingerprint(version),
        "policy_version": version,
        "choices": [{"index": c.index, "message": c.message(),
                     "logprobs": c.logprobs_body() if with_logprobs else None,
                     "finish_reason": c.finish_reason} for c in choices],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def stream_chunks(*, model: str, choices: Sequence[Choice], prompt_tokens: int, completion_tokens: int,
                  version: int, with_logprobs: bool, include_usage: bool) -> list[dict[str, Any]]:
    """The same completion as ``chat.completion.chunk`` objects (generation is not incremental, so
    each choice arrives as one delta followed by its finish reason)."""
    rid, created = completion_id(), int(time.time())
    head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": fingerprint(version)}
    chunks = []
    for c in choices:
        delta: dict[str, Any] = {"role": "assistant", "content": c.content}
        if c.tool_calls:
            delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(c.tool_calls)]
        chunks.append({**head, "choices": [{"index": c.index, "delta": delta,
                                            "logprobs": c.logprobs_body() if with_logprobs else None,
                                            "finish_reason": None}]})
        chunks.append({**head, "choices": [{"index": c.index, "delta": {}, "logprobs": None,
                                            "finish_reason": c.finish_reason}]})
    if include_usage:
        chunks.append({**head, "choices": [], "usage": usage(prompt_tokens, completion_tokens)})
    return chunks


def models_body(model: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "roll"}]}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def fingerprint(version: int) -> str:
    return f"roll-policy-v{int(version)}"


def tool_call_body(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``tool_calls`` entry (arguments as a JSON string, as OpenAI sends them)."""
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
