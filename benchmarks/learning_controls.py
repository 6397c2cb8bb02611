"""Control rewards for learning benchmarks, loaded with ``ROLL_PLUGINS=learning_controls``.

``coin`` ignores the response: 1 with probability 0.1 (the rate of a prompt-blind policy on the
balanced single-digit sums), drawn from a stream seeded once per process. A policy trained on it
has nothing to learn, so its held-out accuracy must stay where it started: a run that "learns"
here has a reward leak (the response reaching the score some other way).
"""

from __future__ import annotations

import random

from roll_core.hookspecs import hookimpl

_draws = random.Random(0)


def coin_reward(prompt: str, response: str, reference: str, **_: object) -> float:
    return 1.0 if _draws.random() < 0.1 else 0.0


@hookimpl
def roll_register_rewards(register):
    register("coin", "learning_controls:coin_reward", tags=["control"],
             description="ignores the response: 1 with probability 0.1 (a control that must not learn)")
