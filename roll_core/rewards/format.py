"""A format reward: the response matches a required pattern (e.g. think-then-answer)."""

from __future__ import annotations

import re
from functools import lru_cache

DEFAULT_FORMAT = r"^\s*(<think>.*?</think>\s*)?<answer>.+?</answer>\s*$"


@lru_cache(maxsize=64)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.DOTALL | re.IGNORECASE)


def regex_reward(prompt: str, response: str, reference: str | None = None, *, pattern: str = DEFAULT_FORMAT,
                 match: float = 1.0, mismatch: float = 0.0, **_: object) -> float:
    """``match`` when the whole response matches ``pattern`` (``re.search`` semantics), else ``mismatch``."""
    return match if _compile(pattern).search(response or "") else mismatch
