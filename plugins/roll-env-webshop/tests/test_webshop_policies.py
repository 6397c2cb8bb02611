"""The scripted policies: the oracle solves the shop, random play does far worse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from roll_env_webshop.policies import evaluate


@pytest.fixture(scope="module")
def figures():
    return {name: evaluate(name, episodes=200, first_seed=0) for name in ("oracle", "random")}


def test_oracle_solves_at_least_95_percent(figures):
    assert figures["oracle"]["mean_score"] >= 0.95
    assert figures["oracle"]["mean_steps"] <= 15  # within the default max_steps


def test_random_play_is_far_worse(figures):
    assert figures["random"]["mean_score"] < figures["oracle"]["mean_score"] - 0.3
    assert figures["random"]["success_rate"] < 0.1


def test_readme_records_the_measured_figures(figures):
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name, stats in figures.items():
        row = (rf"\|\s*{name}\s*\|\s*{stats['mean_score']:.3f}\s*\|\s*{stats['success_rate']:.3f}\s*\|"
               rf"\s*{stats['mean_steps']:.1f}\s*\|")
        assert re.search(row, readme), f"README's {name} row is stale; expected {stats}"


def test_solve_plans_from_any_state_without_touching_the_env(env):
    env.reset(seed=11)
    env.step(env.parser.format("search[usb c hub]"))  # a detour the plan must recover from
    env.step(env.parser.format("click[next >]"))
    before = (env.render_text(), env.num_steps, list(env.queries), env.result_page)
    plan = env.solve()
    assert (env.render_text(), env.num_steps, env.queries, env.result_page) == before
    assert plan[-1] == "click[buy now]" and len(plan) <= env.config.max_steps - env.num_steps
    for word in plan:
        _, reward, terminated, _, _ = env.step(env.parser.format(word))
    assert terminated and reward == 1.0 and env.solve() == []
