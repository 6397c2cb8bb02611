"""Errors meant for the person running roll.

A :class:`RollError` carries a complete, one-paragraph message that says what is wrong and how to
fix it; the CLI prints it without a traceback. Anything else escaping to the CLI is a bug in roll.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RollError(Exception):
    """An error whose message is written for the user (no traceback needed)."""


class ConfigError(RollError):
    """The configuration is invalid; the message names the YAML path."""


class PluginError(RollError):
    """A plugin could not be loaded, or two plugins clash."""


class UnknownComponentError(RollError, KeyError):
    """A config names a component (env, estimator, loss, strategy, reward) nobody registered."""

    def __init__(self, message: str):
        RollError.__init__(self, message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


def close_matches(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Case-insensitive "did you mean" candidates for ``word`` among ``choices`` (difflib ratio >= ``cutoff``)."""
    lowered: dict[str, list[str]] = {}
    for choice in dict.fromkeys(choices):  # case variants ("sokoban", "Sokoban") all stay candidates
        lowered.setdefault(choice.lower(), []).append(choice)
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=cutoff)
    return [original for hit in hits for original in lowered[hit]]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` or an empty string."""
    hits = close_matches(word, choices)
    if not hits:
        return ""
    return " Did you mean " + " or ".join(repr(h) for h in hits) + "?"


class InferenceLost(RollError):
    """Every inference worker (``actor_infer`` rank) is gone: generation cannot go on.

    Raised by the generate scheduler to the env loops, which stop the rollout with it instead of
    counting it as an env failure; the pipeline turns it into its stop message (lost ranks, resume).
    """
