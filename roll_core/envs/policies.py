"""Non-model policies for envs: random and scripted (the env's own solver).

Used by ``roll env play``, by :func:`roll_core.testing.smoke_rollout` and to collect warm-start
demonstrations. A policy is a callable ``policy(env, observation) -> response text``; the response
is formatted exactly as a model's would be (``<answer>Left</answer>``), so it goes through the
same parser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from roll_core.envs.base import has_optimal_actions, has_solver
from roll_core.errors import RollError

Policy = Callable[[Any, str], str]


class RandomPolicy:
    """Uniformly random valid actions from its own seeded generator (reproducible episodes)."""

    #: whether the last move is one to learn from (always, for a policy that is its own demonstration)
    demonstrated = True

    def __init__(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)

    def __call__(self, env: Any, observation: str) -> str:
        return env.sample_action(self.rng)


class ScriptedPolicy:
    """Follows ``env.solve()``, re-planned every turn so a slip or a detour never derails it.

    Where the env lists its optimal actions (``optimal_actions()``), it plays a seeded draw among
    them instead of the solver's first word: a clone of these demonstrations sees every right
    move, not only the one the solver's search happened to find first.

    ``slip_rate``: the fraction of turns played as a random valid move instead (noise injected
    into the demonstrator, as in DART). A clone of a perfect demonstrator never sees a state off
    the solver's path, such as a grid left unchanged by a move into a wall, and so never learns
    what to do there; slips put it in those states, and the solver's next move shows the way back.
    A slip, and a move played where the solver has no plan (a slip that got the episode stuck),
    sets :attr:`demonstrated` to False: the rollout keeps it in the context and out of the loss.

    An env without a solver is an error (``roll env play``), or with ``without_solver="random"``
    is played randomly (rollouts, where one policy name covers every env of a run; those random
    moves are the demonstration, so they count as demonstrated).
    """

    def __init__(self, seed: int | None = None, *, without_solver: str = "raise", slip_rate: float = 0.0):
        if not 0.0 <= slip_rate < 1.0:
            raise RollError(f"slip_rate must be in [0, 1), got {slip_rate!r}: it is the fraction of turns "
                            "the demonstrator plays a random move instead of the solver's")
        self.fallback = RandomPolicy(seed)
        self.without_solver = without_solver
        self.slip_rate = slip_rate
        # slips draw from their own stream, so slip_rate=0 plays exactly the demonstrations it always did
        self.slips = np.random.default_rng(None if seed is None else [seed, 1])
        self.demonstrated = True

    def __call__(self, env: Any, observation: str) -> str:
        self.demonstrated = True
        if not has_solver(env):
            if self.without_solver == "random":
                return self.fallback(env, observation)
            raise RollError(
                f"{type(env).__name__} has no solve() method, so it cannot be played by the scripted "
                "policy; use --policy random or keyboard."
            )
        if self.slip_rate and self.slips.random() < self.slip_rate:
            self.demonstrated = False
            return self.fallback(env, observation)
        if has_optimal_actions(env):
            choices = env.optimal_actions()
            if choices:
                return env.parser.format(choices[self.fallback.rng.integers(len(choices))])
        plan = env.solve()
        if not plan:  # no known solution from here (slipped into a dead end, budget exhausted)
            self.demonstrated = False
            return self.fallback(env, observation)
        return env.parser.format(plan[0])


#: policy name -> factory taking a seed
POLICIES: dict[str, Callable[[int | None], Policy]] = {
    "random": RandomPolicy,
    "scripted": ScriptedPolicy,
}


def make_policy(name: str | Policy, seed: int | None = None) -> Policy:
    """A policy by name (``random``, ``scripted``) or a callable passed through."""
    if callable(name):
        return name
    try:
        return POLICIES[name](seed)
    except KeyError:
        raise RollError(f"Unknown policy {name!r}; use one of {', '.join(POLICIES)}.") from None
