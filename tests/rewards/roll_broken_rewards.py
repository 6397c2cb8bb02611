"""A plugin of reward functions, each breaking one rule of roll's reward contract, for check_reward's tests
(and two reward classes: one that honours it once built from its settings, one roll cannot build).

Importable by name (tests/rewards is put on sys.path and PYTHONPATH by the tests), so that the
cross-process check can import the targets too.
"""

from __future__ import annotations

import random
import re
import signal

from roll_core import hookimpl

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_seen: dict[str, int] = {}


def _answer(response: str) -> str:
    found = ANSWER.findall(response)
    return (found[-1] if found else response).strip()


def exact(prompt, response, reference, **_):
    """Honours the contract: 1 when the last answer equals the reference."""
    return 1.0 if reference is not None and _answer(response) == reference else 0.0


def raises_on_empty(prompt, response, reference, **_):
    return 1.0 if _answer(response)[0] == reference[0] else 0.0  # IndexError on "", TypeError on None


def returns_text(prompt, response, reference, **_):
    return "correct" if _answer(response) == reference else "wrong"


def returns_nan(prompt, response, reference, **_):
    return 1.0 if _answer(response) == reference else float("nan")


def random_score(prompt, response, reference, **_):
    """A score drawn at random, from a continuum: a repeat never matches by chance, so every
    determinism check catches it on every run (a 0/1 coin flip on six samples repeats one time in 64)."""
    return random.random()


def remembers(prompt, response, reference, **_):
    """Scores the first answer to a prompt only: state carried from one call to the next."""
    _seen[prompt] = _seen.get(prompt, 0) + 1
    return exact(prompt, response, reference) if _seen[prompt] == 1 else 0.0


def hash_based(prompt, response, reference, **_):
    return float(hash(response) % 2)  # stable inside a process, not across hash seeds


def two_args(prompt, response):
    return 0.0


def no_options(prompt, response, reference):
    return exact(prompt, response, reference)


def main_thread_only(prompt, response, reference, **_):
    signal.signal(signal.SIGALRM, lambda *a: None)  # ValueError off the main thread (math-verify's trap)
    return exact(prompt, response, reference)


def lenient(prompt, response, reference, **_):
    return 1.0  # "correct" for an empty response too


class PatternReward:
    """Honours the contract as a class, built like the built-in code_sandbox or llm_judge: 1 when the
    last match of the domain's ``format_pattern`` (compiled once, at build) equals the reference."""

    def __init__(self, pattern: str):
        self.pattern = re.compile(pattern, re.DOTALL)

    @classmethod
    def from_reward_config(cls, section, *, seed=0, **_):
        if not section.format_pattern:
            raise ValueError("pattern_class needs format_pattern (a regex with one group: the answer)")
        return cls(section.format_pattern)

    def __call__(self, prompt, response, reference, **_):
        found = self.pattern.findall(response)
        return 1.0 if found and reference is not None and found[-1].strip() == reference else 0.0


class NoBuilder:
    """A reward class roll cannot build: no ``from_reward_config``."""

    def __call__(self, prompt, response, reference, **_):
        return 0.0


BROKEN = ("raises_on_empty", "returns_text", "returns_nan", "random_score", "remembers", "hash_based", "two_args",
          "no_options", "main_thread_only", "lenient")


@hookimpl
def roll_register_rewards(register):
    for name in ("exact", *BROKEN):
        register(f"broken_{name}" if name != "exact" else "exact_answer", f"roll_broken_rewards:{name}")
    register("pattern_class", "roll_broken_rewards:PatternReward")
    register("broken_no_builder", "roll_broken_rewards:NoBuilder")
