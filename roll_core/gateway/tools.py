"""Messages and tools in, tool calls out: what sits between OpenAI's JSON and the chat template.

* :func:`normalize_messages` turns OpenAI messages (text content parts, ``developer`` role,
  ``tool_calls`` with JSON-string arguments) into the plain dicts chat templates render
  (arguments as mappings, content as text), refusing what a text model cannot take.
* :func:`normalize_tools` checks OpenAI function specs; the template itself renders them
  (``apply_chat_template(tools=...)``), so the model sees tools as it was trained to.
* :class:`ToolCallParser` turns generated text back into ``tool_calls`` with transformers'
  declarative response parser: the tokenizer's own ``response_template`` when it ships one,
  else the Hermes/Qwen ``<tool_call>{json}</tool_call>`` format for templates that use it (roll's
  tiny ChatML template among them). Output it cannot parse into valid calls of the offered tools
  comes back as plain content and is counted as malformed, never an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roll_core.gateway.openai_wire import ROLES, bad_request, tool_call_body

#: the Hermes / Qwen tool-call format: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
HERMES_RESPONSE_TEMPLATE: dict[str, Any] = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "content": {"content": "text"},
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*",
            "close_pattern": r"\s*</tool_call>",
            "content": "json",
            "repeats": True,
            "transform": {"type": "function",
                          "function": {"name": "{content.name}", "arguments": "{content.arguments}"}},
        },
    },
}
#: chat-template marker -> the response template of that family
TOOL_FORMATS: dict[str, dict[str, Any]] = {"<tool_call>": HERMES_RESPONSE_TEMPLATE}
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def normalize_messages(raw: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as chat templates take them; a 400 naming the first bad field otherwise."""
    out = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        role = message.get("role")
        if role not in ROLES:
            raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}.", param=f"{where}.role")
        content = _text_content(message.get("content"), f"{where}.content")
        item: dict[str, Any] = {"role": "system" if role == "developer" else role}
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls is not None and not isinstance(calls, list):
            raise bad_request(f"{where}.tool_calls must be a list of tool calls, got {type(calls).__name__}.",
                              param=f"{where}.tool_calls")
        if calls:
            item["content"] = content or ""
            item["tool_calls"] = [_tool_call(call, f"{where}.tool_calls[{k}]") for k, call in enumerate(calls)]
        else:
            if content is None:
                raise bad_request(f"{where}.content is missing: {role} messages need text content.",
                                  param=f"{where}.content")
            item["content"] = content
        if role == "tool" and message.get("tool_call_id") is not None:
            item["tool_call_id"] = str(message["tool_call_id"])
        if message.get("name") is not None:
            item["name"] = str(message["name"])
        out.append(item)
    return out


def _text_content(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise bad_request(f"{where}[{k}] is a {kind!r} part; roll's models take text parts only.",
                                  param=f"{where}[{k}]")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"{where} must be a string or a list of text parts.", param=where)


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise bad_request(f"{where} must look like {{'type': 'function', 'function': {{'name': ..., "
                          "'arguments': ...}}.", param=where)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise bad_request(f"{where}.function.arguments is not valid JSON ({exc}).",
                              param=f"{where}.function.arguments") from None
    if not isinstance(arguments, Mapping):
        raise bad_request(f"{where}.function.arguments must be a JSON object.", param=f"{where}.function.arguments")
    item = {"type": "function", "function": {"name": function["name"], "arguments": dict(arguments)}}
    if call.get("id") is not None:
        item["id"] = str(call["id"])
    return item


def normalize_tools(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """OpenAI function specs, checked; a 400 naming the first malformed one otherwise."""
    out = []
    for i, tool in enumerate(tools or ()):
        where = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            raise bad_request(f"{where} must be {{'type': 'function', 'function': {{...}}}}.", param=where)
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise bad_request(f"{where}.function is missing or not an object.", param=f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            raise bad_request(f"{where}.function.name must be 1-64 letters, digits, '_', '-' or '.'; got {name!r}.",
                              param=f"{where}.function.name")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, Mapping):
            raise bad_request(f"{where}.function.parameters must be a JSON schema object.",
                              param=f"{where}.function.parameters")
        spec: dict[str, Any] = {"name": name, "parameters": dict(parameters)}
        if function.get("description") is not None:
            spec = {"name": name, "description": str(function["description"]), "parameters": dict(parameters)}
        out.append({"type": "function", "function": spec})
    names = [t["function"]["name"] for t in out]
    if len(set(names)) != len(names):
        raise bad_request(f"tools defines a function name twice: {names}.", param="tools")
    return out


def message_key(message: Mapping[str, Any]) -> tuple:
    """What makes two (normalised) messages the same turn: role, text and tool calls (ids aside)."""
    calls = tuple((c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
                  for c in message.get("tool_calls") or ())
    return (message["role"], message.get("content") or "", calls)


def tools_key(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), sort_keys=True)


@dataclass
class ParsedReply:
    """A generated reply as an assistant message: text, tool calls, and whether calls were malformed."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    malformed: bool = False

    def message(self) -> dict[str, Any]:
        """The normalised form the agent will send back (for matching the next request)."""
        if not self.tool_calls:
            return {"role": "assistant", "content": self.content or ""}
        return {"role": "assistant", "content": self.content or "",
                "tool_calls": [{"type": "function", "function": {"name": c["function"]["name"],
                                                                 "arguments": json.loads(c["function"]["arguments"])}}
                               for c in self.tool_calls]}


class ToolCallParser:
    """Generated text -> :class:`ParsedReply` for one tokenizer (see the module docstring)."""

    def __init__(self, tokenizer: Any):
        own = getattr(tokenizer, "response_template", None)
        template = getattr(tokenizer, "chat_template", None) or ""
        if isinstance(template, dict):  # several named templates: the default one renders tools
            template = template.get("tool_use") or template.get("default") or ""
        self.template = own or next((fmt for marker, fmt in TOOL_FORMATS.items() if marker in template), None)
        self.own = own is not None

    @property
    def supported(self) -> bool:
        return self.template is not None

    def parse(self, text: str, *, prefix: str, tools: Sequence[Mapping[str, Any]]) -> ParsedReply:
        """``text`` with its tool calls taken out; malformed calls leave the text whole and flag it."""
        if self.template is None or not tools:
            return ParsedReply(text)
        from transformers.utils.chat_parsing import parse_response

        try:
            parsed = parse_response(text, self.template, prefix=prefix if self.own else "", tools=list(tools))
        except Exception:  # not JSON, a missing key: the model wrote a broken call
            return ParsedReply(text, malformed=True)
        calls = parsed.get("tool_calls") or []
        if not calls:
            return ParsedReply(text)
        names = {t["function"]["name"] for t in tools}
        bodies = []
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            arguments = function.get("arguments") if isinstance(function, Mapping) else None
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = None
            if name not in names or not isinstance(arguments, Mapping):
                return ParsedReply(text, malformed=True)
            bodies.append(tool_call_body(name, arguments))
        content = parsed.get("content")
        return ParsedReply(content if content else None, bodies)
