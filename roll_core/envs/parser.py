"""Lenient parsing of model output into env actions.

Models write actions inside a pattern (``<answer>Left</answer>`` by default). The parser finds
the pattern case-insensitively, tolerates surrounding reasoning and whitespace, and maps action
words through the env's lookup table case-insensitively. Anything it cannot map is an invalid
action (the env applies its format penalty and leaves its state unchanged), never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_ACTION_PATTERN = r"<answer>(.*?)</answer>"


@dataclass(frozen=True)
class ParsedAction:
    """What the parser made of one model response."""

    text: str  # the raw response
    content: str | None  # what stood inside the pattern, stripped; None when the pattern is missing
    action: Any  # the env action the content maps to, or None when invalid

    @property
    def is_valid(self) -> bool:
        return self.action is not None


class ActionParser:
    """Extracts the first match of ``pattern`` and maps it through ``lookup``.

    ``lookup`` maps action words (any case) to env actions; when it is ``None`` the stripped
    content itself is the action (free-form envs such as WebShop validate it themselves).
    With ``require_pattern=False`` a bare response that is itself an action word is accepted too.
    """

    def __init__(self, lookup: Mapping[str, Any] | None = None, *, pattern: str = DEFAULT_ACTION_PATTERN,
                 require_pattern: bool = True):
        self.pattern = re.compile(pattern, re.IGNORECASE | re.DOTALL)
        if self.pattern.groups < 1:
            raise ValueError(f"action pattern {pattern!r} needs one capture group around the action")
        self.lookup = None if lookup is None else {_norm(k): v for k, v in lookup.items()}
        self.require_pattern = require_pattern

    def parse(self, text: str) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(text=repr(text), content=None, action=None)
        match = self.pattern.search(text)
        if match is None:
            content = None if self.require_pattern else text.strip()
        else:
            content = match.group(1).strip()
        if not content:
            return ParsedAction(text=text, content=content, action=None)
        if self.lookup is None:
            return ParsedAction(text=text, content=content, action=content)
        return ParsedAction(text=text, content=content, action=self.lookup.get(_norm(content)))

    def format(self, action_word: str) -> str:
        """The canonical response text for ``action_word`` (inverse of :meth:`parse`)."""
        open_tag, close_tag = _pattern_tags(self.pattern.pattern)
        return f"{open_tag}{action_word}{close_tag}"


def _norm(word: str) -> str:
    return " ".join(str(word).strip().lower().split())


def _pattern_tags(pattern: str) -> tuple[str, str]:
    """Best-effort literal text around the capture group, for :meth:`ActionParser.format`."""
    head, _, rest = pattern.partition("(")
    _, _, tail = rest.partition(")")
    unescape = re.compile(r"\\(.)")
    return unescape.sub(r"\1", head), unescape.sub(r"\1", tail)
