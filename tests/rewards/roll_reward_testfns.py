"""Reward functions for the reward-worker tests (importable by Ray workers: PYTHONPATH has this dir)."""

from __future__ import annotations

import os
import time

from roll_core.rewards.failures import RewardFailure


def behaving(prompt: str, response: str, reference: str | None, **_: object) -> float:
    """Sleeps 0.5 s, then the response's length; misbehaves on request."""
    if response == "raise":
        raise ValueError("a bug in the reward")
    if response == "hang":
        time.sleep(60)
    if response == "unscorable":
        raise RewardFailure("custom_reason")
    if response == "die":
        os._exit(1)
    time.sleep(0.5)
    return float(len(response))


def pid(prompt: str, response: str, reference: str | None, **_: object) -> float:
    return float(os.getpid())


#: time.perf_counter() at which each ``slow_stamped`` call started (driver-side scoring: same process)
STARTS: list[float] = []


def slow_stamped(prompt: str, response: str, reference: str | None, **_: object) -> float:
    """A slow reward that notes when it started: 0.2 s, then the response's length in characters."""
    STARTS.append(time.perf_counter())
    time.sleep(0.2)
    return float(len(response))
