"""Lenient parsing of model output into env actions.

Models write actions inside a pattern (``<answer>Left</answer>`` by default). The parser finds
the pattern case-insensitively, tolerates surrounding reasoning and whitespace, and maps action
words through the env's lookup table case-insensitively. Anything it cannot map is an invalid
action (the env applies its format penalty and leaves its state unchanged), never an exception.

Parsing is linear in the response, whatever the model wrote. ``re.search`` with a lazy
``OPEN(.*?)CLOSE`` is quadratic on a response full of unclosed ``OPEN`` tags (it scans to the end
from every one: 15 s for 128 kB), so a pattern of that shape with literal delimiters (the default,
and ROLL's) is found with two linear searches instead: the first ``OPEN``, then the first ``CLOSE``
after it, which is exactly the match the regex would return. Any other pattern runs as a regex on
the first :data:`MAX_REGEX_CHARS` characters of the response.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_ACTION_PATTERN = r"<answer>(.*?)</answer>"
#: how much of a response a pattern without literal delimiters is searched in (bounds its cost)
MAX_REGEX_CHARS = 16384
#: ``OPEN(.*?)CLOSE`` with literal OPEN and CLOSE (escaped metacharacters allowed, not classes like ``\s``)
_LITERAL = r"(?:[^\\.^$*+?{}\[\]|()]|\\[^A-Za-z0-9])+"
_DELIMITED = re.compile(rf"^(?P<open>{_LITERAL})\(\.\*\?\)(?P<close>{_LITERAL})$")


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
        self._delimiters = _delimiters(pattern)
        self._tags = _pattern_tags(pattern)

    def find(self, text: str) -> str | None:
        """What the first match of the pattern captures, or None (linear in ``text``)."""
        if self._delimiters is not None:
            opening, closing = self._delimiters
            start = opening.search(text)
            end = closing.search(text, start.end()) if start is not None else None
            return text[start.end(): end.start()] if end is not None else None
        match = self.pattern.search(text[:MAX_REGEX_CHARS])
        return match.group(1) if match is not None else None

    def parse(self, text: str) -> ParsedAction:
        if not isinstance(text, str):
            return ParsedAction(text=repr(text), content=None, action=None)
        found = self.find(text)
        if found is None:
            content = None if self.require_pattern else text.strip()
        else:
            content = found.strip()
        if not content:
            return ParsedAction(text=text, content=content, action=None)
        if self.lookup is None:
            return ParsedAction(text=text, content=content, action=content)
        return ParsedAction(text=text, content=content, action=self.lookup.get(_norm(content)))

    def format(self, action_word: str) -> str:
        """The canonical response text for ``action_word`` (inverse of :meth:`parse`)."""
        open_tag, close_tag = self._tags
        return f"{open_tag}{action_word}{close_tag}"


def _delimiters(pattern: str) -> tuple[re.Pattern[str], re.Pattern[str]] | None:
    """Case-insensitive searches for OPEN and CLOSE when ``pattern`` is ``OPEN(.*?)CLOSE`` with literal
    delimiters; None for any other pattern."""
    match = _DELIMITED.match(pattern)
    if match is None:
        return None
    unescape = re.compile(r"\\(.)")
    return tuple(re.compile(re.escape(unescape.sub(r"\1", match[part])), re.IGNORECASE) for part in ("open", "close"))


def _norm(word: str) -> str:
    return " ".join(str(word).strip().lower().split())


def _pattern_tags(pattern: str) -> tuple[str, str]:
    """Best-effort literal text around the capture group, for :meth:`ActionParser.format`."""
    head, _, rest = pattern.partition("(")
    _, _, tail = rest.partition(")")
    unescape = re.compile(r"\\(.)")
    return unescape.sub(r"\1", head), unescape.sub(r"\1", tail)
