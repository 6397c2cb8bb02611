"""Scripted policies for WebShop: an oracle (upper bound) and a random one (lower bound).

The oracle reads the goal (privileged), searches its key words (product type and wanted
attributes), scans the result pages for an item that would score 1 with the goal's options,
falls back to searching the target product's title, selects the options and buys. It shows that
every goal is solvable within ``max_steps`` through the env's own actions. The random policy
samples :meth:`WebShopEnv.valid_actions`. ``python -m roll_env_webshop.policies`` prints both
figures (they are recorded in the package README).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from roll_env_webshop.catalog import Goal, Product
from roll_env_webshop.env import BACK, BUY, NEXT, PREV, WebShopEnv
from roll_env_webshop.reward import score_purchase

Policy = Callable[[WebShopEnv, np.random.Generator], str]


def goal_query(goal: Goal) -> str:
    """The goal's key words: department, product type and wanted attributes."""
    department = goal.target.category[1]
    prefix = f"{department} " if department in ("men", "women") else ""
    return f"{prefix}{goal.target.type} {' '.join(goal.attributes)}"


def wanted_options(goal: Goal, product: Product) -> dict[str, str]:
    """The goal's option values that ``product`` offers, by option name."""
    wanted = {}
    for value in goal.options.values():
        name = product.option_of(value)
        if name is not None:
            wanted[name] = value
    return wanted


def expected_score(goal: Goal, product: Product) -> float:
    """The score of buying ``product`` with the best options it offers for ``goal``."""
    return score_purchase(goal, product, wanted_options(goal, product)).score


def _oracle_search(env: WebShopEnv) -> str:
    # first the key words; after they failed, the target's exact title
    return f"search[{goal_query(env.goal) if not env.queries else env.goal.target.title}]"


def _oracle_results(env: WebShopEnv) -> str:
    items = env.page_results()
    best = max(items, key=lambda p: expected_score(env.goal, p), default=None)
    if best is not None and expected_score(env.goal, best) == 1.0:
        return f"click[{best.id}]"
    if f"click[{NEXT}]" in env.valid_actions():
        return f"click[{NEXT}]"
    if len(env.queries) < 2 or best is None:
        return f"click[{BACK}]"
    return f"click[{best.id}]"


def _oracle_item(env: WebShopEnv) -> str:
    for name, value in wanted_options(env.goal, env.product).items():
        if env.selected.get(name) != value:
            return f"click[{value}]"
    return f"click[{BUY}]"


_ORACLE_PAGES: dict[str, Callable[[WebShopEnv], str]] = {
    "search": _oracle_search,
    "results": _oracle_results,
    "item": _oracle_item,
    "description": lambda env: f"click[{PREV}]",
    "features": lambda env: f"click[{PREV}]",
}


def oracle_action(env: WebShopEnv, rng: np.random.Generator | None = None) -> str:
    """The oracle's next action for the env's current page, formatted as a model response."""
    return env.parser.format(_ORACLE_PAGES[env.page](env))


def oracle_plan(env: WebShopEnv, limit: int = 64) -> list[str]:
    """The oracle's remaining actions from the current state, found by playing a private copy.

    Searches are deterministic, so the copy sees exactly the pages the env will show; the env
    itself (page, step count, rng) is left untouched.
    """
    if env.goal is None or env.page == "done":
        return []
    clone = copy.copy(env)
    clone.queries, clone.results, clone.selected = list(env.queries), list(env.results), dict(env.selected)
    plan: list[str] = []
    while clone.page != "done" and len(plan) < limit:
        plan.append(_ORACLE_PAGES[clone.page](clone))
        clone._step(plan[-1])
    return plan


def random_action(env: WebShopEnv, rng: np.random.Generator | None = None) -> str:
    """A uniformly random available action, formatted as a model response."""
    return env.sample_action(rng)


POLICIES: dict[str, Policy] = {"oracle": oracle_action, "random": random_action}


@dataclass(frozen=True)
class Episode:
    """What one episode of a policy came to."""

    goal_index: int
    score: float
    success: bool
    steps: int
    actions: tuple[str, ...]


def run_episode(env: WebShopEnv, policy: Policy, seed: int, rng: np.random.Generator | None = None) -> Episode:
    """Play one episode from ``reset(seed=seed)``; the score is 0 when nothing was bought."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    actions, score, done = [], 0.0, False
    while not done:
        action = policy(env, rng)
        actions.append(action)
        _, reward, terminated, truncated, step_info = env.step(action)
        done = terminated or truncated
        score = step_info.get("score", score)
    return Episode(goal_index=info["goal_index"], score=float(score), success=score == 1.0,
                   steps=len(actions), actions=tuple(actions))


def evaluate(policy: str | Policy, episodes: int = 200, first_seed: int = 0, **env_config) -> dict[str, float]:
    """Mean score, success rate and mean steps of a policy over seeds ``first_seed ...``."""
    policy = POLICIES[policy] if isinstance(policy, str) else policy
    env = WebShopEnv(env_config)
    runs = [run_episode(env, policy, seed) for seed in range(first_seed, first_seed + episodes)]
    return {
        "episodes": float(episodes),
        "mean_score": float(np.mean([r.score for r in runs])),
        "success_rate": float(np.mean([r.success for r in runs])),
        "mean_steps": float(np.mean([r.steps for r in runs])),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Score the scripted WebShop policies.")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    args = parser.parse_args(argv)
    for name in args.policies:
        stats = evaluate(name, args.episodes, args.first_seed)
        print(f"{name:>6}: mean score {stats['mean_score']:.3f}  success {stats['success_rate']:.3f}  "
              f"mean steps {stats['mean_steps']:.1f}  ({args.episodes} seeded goals)")


if __name__ == "__main__":
    main()
