"""Guess the number: the env of this template plugin.

A small but complete roll env: a pydantic config validated from YAML, a seeded instance per
``reset``, free-form actions (the guess itself, so ``action_lookup`` is ``None`` and ``_step``
validates them), text and RGB rendering, and a ``solve()`` that scripted policies use.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field, model_validator

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_core.envs.render import grid_to_rgb, make_tile

# RGB frame: one cell per number
EXCLUDED, CANDIDATE, GUESSED, FOUND = range(4)


class GuessNumberConfig(EnvConfig):
    """``env_config`` of ``guess_number``; EnvConfig contributes max_steps, format_penalty, ..."""

    low: int = Field(1, description="Smallest possible secret number.")
    high: int = Field(100, description="Largest possible secret number.")
    max_steps: int = Field(10, ge=1, description="Guesses before the episode is truncated.")

    @model_validator(mode="after")
    def _range(self) -> GuessNumberConfig:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be larger than low ({self.low})")
        if self.high - self.low > 10_000:
            raise ValueError("the range may span at most 10,000 numbers")
        return self


class GuessNumberEnv(TextEnv):
    """Guess a hidden whole number in ``[low, high]``; each wrong guess is answered "higher" or "lower".

    Reward 1 for finding the number, 0 otherwise. A response that is not a whole number in range is
    an invalid action (``format_penalty``, state unchanged).
    """

    config_model = GuessNumberConfig
    action_lookup = None  # free-form: the guess itself is the action

    def __init__(self, config: GuessNumberConfig | dict[str, Any] | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.secret = self.config.low
        self.lo, self.hi = self.config.low, self.config.high
        self.guesses: list[int] = []
        self._tiles: dict[int, np.ndarray] | None = None

    def default_instruction(self) -> str:
        cfg = self.config
        return (
            f"I am thinking of a whole number between {cfg.low} and {cfg.high}. Find it: after each wrong "
            f"guess I tell you whether my number is higher or lower. You have {cfg.max_steps} guesses. "
            f"Finding the number gives reward 1. Answer with one number in the format "
            f"{self.parser.format(str((cfg.low + cfg.high) // 2))}."
        )

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.secret = int(self.np_random.integers(self.config.low, self.config.high + 1))
        self.lo, self.hi = self.config.low, self.config.high
        self.guesses = []
        return self.observation(), {}

    def _step(self, action: str) -> StepOutcome | None:
        try:
            guess = int(action.strip().rstrip("."))
        except ValueError:
            return None  # not a number: invalid action
        if not self.config.low <= guess <= self.config.high:
            return None
        informative = self.lo <= guess <= self.hi and guess not in self.guesses
        self.guesses.append(guess)
        if guess == self.secret:
            return StepOutcome(reward=1.0, terminated=True, success=True, effective=True)
        if guess < self.secret:
            self.lo = max(self.lo, guess + 1)
        else:
            self.hi = min(self.hi, guess - 1)
        return StepOutcome(reward=0.0, effective=informative)

    def render_text(self) -> str:
        cfg = self.config
        if not self.guesses:
            return f"The number is between {cfg.low} and {cfg.high}. No guesses yet."
        hints = ", ".join(
            f"{g} ({'correct' if g == self.secret else 'too low' if g < self.secret else 'too high'})"
            for g in self.guesses
        )
        return f"The number is between {cfg.low} and {cfg.high}. Your guesses so far: {hints}."

    def render_rgb(self) -> np.ndarray:
        if self._tiles is None:
            self._tiles = {
                EXCLUDED: make_tile((200, 200, 200), size=8, border=(170, 170, 170)),
                CANDIDATE: make_tile((120, 170, 230), size=8, border=(90, 140, 200)),
                GUESSED: make_tile((220, 80, 70), size=8),
                FOUND: make_tile((60, 170, 80), size=8),
            }
        numbers = np.arange(self.config.low, self.config.high + 1)
        row = np.where((numbers >= self.lo) & (numbers <= self.hi), CANDIDATE, EXCLUDED)
        for g in self.guesses:
            row[g - self.config.low] = FOUND if g == self.secret else GUESSED
        return grid_to_rgb(row[None, :], self._tiles)

    def valid_actions(self) -> list[str]:
        """Numbers still consistent with the hints: a subset of the accepted actions (any number in
        ``[low, high]`` is valid), the ones worth playing, which random play chooses from."""
        return [str(n) for n in range(self.lo, self.hi + 1)]

    def example_action(self) -> str:
        """The bare middle number (roll wraps it in ``<answer>...</answer>`` for the prompt)."""
        return str((self.config.low + self.config.high) // 2)

    def solve(self) -> list[str]:
        """The guesses binary search makes from here (it knows the hints, not the secret)."""
        lo, hi, plan = self.lo, self.hi, []
        while lo <= hi:
            mid = (lo + hi) // 2
            plan.append(str(mid))
            if mid == self.secret:
                break
            lo, hi = (mid + 1, hi) if mid < self.secret else (lo, mid - 1)
        return plan
