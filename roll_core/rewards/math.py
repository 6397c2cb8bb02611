"""Math answers checked for equivalence, not string equality (``1/2`` == ``0.5`` == ``\\frac{1}{2}``)."""

from __future__ import annotations

import functools
import re
import threading

#: where the model is asked to put its final answer; the last match wins
ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def math_verify_reward(prompt: str, response: str, reference: str, *, answer_pattern: str | None = None,
                       pattern: str | None = None, correct: float = 1.0, incorrect: float = 0.0,
                       **_: object) -> float:
    """``correct`` when the response's final answer equals ``reference`` mathematically.

    The answer is taken from the last ``answer_pattern`` match (``<answer>...</answer>`` by
    default; ``\\boxed{}`` and plain numbers are recognised too when no pattern matches).
    ``pattern`` (the domain's ``format_pattern``) is the same setting from a config. Malformed
    output scores ``incorrect``; it never raises.

    Why a pattern matters: without a match the whole response is parsed, and math-verify
    *evaluates* expressions, so a response that only restates ``32 + 43`` equals ``75``. An
    arithmetic task should pin the answer down, e.g. ``format_pattern: '(-?\\d+)\\D*$'`` (the last
    number written).
    """
    answer_pattern = answer_pattern or pattern
    pattern = re.compile(answer_pattern, re.IGNORECASE | re.DOTALL) if answer_pattern else ANSWER_PATTERN
    matches = pattern.findall(response or "")
    candidate = matches[-1] if matches else (response or "")
    # math-verify's time limits use SIGALRM, which only the main thread may set
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    return correct if _equivalent(candidate, str(reference), timeout) else incorrect


#: verdicts kept by :func:`_equivalent` (least recently used dropped first)
VERDICT_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=VERDICT_CACHE_SIZE)
def _equivalent(candidate: str, reference: str, timeout: int | None) -> bool:
    """Whether math-verify finds ``candidate`` equal to ``reference`` (unparsable: False).

    A pure function of its arguments, so its verdicts are kept: a run scores the same answers over
    and over (an arithmetic task's one-token sums: a few dozen distinct pairs), and parsing both
    sides costs about a millisecond of sympy a sample, on the training step's path
    (docs/benchmarks.md, "Per-step fixed cost")."""
    from math_verify import parse, verify

    gold = parse(reference, parsing_timeout=timeout)
    answer = parse(candidate, parsing_timeout=timeout)
    if not gold or not answer:
        return False
    return bool(verify(gold, answer, timeout_seconds=timeout))
