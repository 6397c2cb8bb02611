"""The env contract: reset/step types, determinism, invalid actions, truncation, pages, purchase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from roll_env_webshop.env import WebShopEnv
from roll_env_webshop.policies import random_action, run_episode


def act(env, action: str):
    return env.step(env.parser.format(action))


def open_target(env, goal_index: int = 0):
    """Reset to a goal and open its target product (searching the product's exact title)."""
    env.reset(seed=0, options={"goal_index": goal_index})
    act(env, f"search[{env.goal.target.title}]")
    assert env.goal.target in env.page_results()
    act(env, f"click[{env.goal.target.id}]")
    assert env.page == "item" and env.product is env.goal.target
    return env.goal


def test_reset_and_step_types(env):
    obs, info = env.reset(seed=1)
    assert isinstance(obs, str) and isinstance(info, dict)
    assert "WebShop" in info["instruction"] and "<answer>click[buy now]</answer>" in info["instruction"]
    assert info["goal"] in obs and "Available actions: search[" in obs
    assert env.goal is env.goals[info["goal_index"]]
    obs, reward, terminated, truncated, info = act(env, f"search[{env.goal.request}]")
    assert isinstance(obs, str) and isinstance(reward, float)
    assert terminated is False and truncated is False
    assert info["metrics"] == {"success": 0.0, "action_is_valid": 1.0, "action_is_effective": 1.0}
    assert env.page == "results" and "click[back to search]" in obs


def test_same_seed_same_episode_and_seeds_differ(env):
    first = run_episode(env, random_action, seed=5)
    again = run_episode(WebShopEnv(), random_action, seed=5)
    assert first == again
    goals = {env.reset(seed=s)[1]["goal_index"] for s in range(20)}
    assert len(goals) > 15


_TRACE = """
import hashlib, json, numpy as np
from roll_env_webshop.env import WebShopEnv
from roll_env_webshop.policies import random_action
env, out = WebShopEnv(), []
for seed in (0, 1, 2, 3):
    obs, info = env.reset(seed=seed)
    rng, done = np.random.default_rng(seed), False
    out.append(obs)
    while not done:
        obs, reward, term, trunc, _ = env.step(random_action(env, rng))
        out.append([obs, reward])
        done = term or trunc
print(hashlib.sha256(json.dumps(out).encode()).hexdigest())
"""


def test_episodes_are_identical_across_processes():
    digests = set()
    for hash_seed in ("0", "12345"):
        result = subprocess.run([sys.executable, "-c", _TRACE], capture_output=True, text=True, check=True,
                                env={**os.environ, "PYTHONHASHSEED": hash_seed})
        digests.add(result.stdout.strip())
    local = {}
    exec(compile(_TRACE.replace("print(", "local['digest'] = ("), "<trace>", "exec"), {"local": local})
    assert digests == {local["digest"]}


@pytest.mark.parametrize("response", [
    "click[buy now]",                                 # no <answer> pattern
    "<answer>click[definitely not here]</answer>",    # not an element of this page
    "<answer>search[jeans]</answer>",                 # searching only works on the search page
    "<answer>click[next]</answer>",                   # near miss of "next >"
    "<answer>click[< prev]</answer>",                 # no previous page on page 1
    "<answer>buy</answer>",                           # neither search[...] nor click[...]
])
def test_invalid_action_costs_the_penalty_and_changes_nothing(env, response):
    env.reset(seed=2)
    act(env, "search[t-shirt]")
    before = (env.render_text(), env.page, env.result_page, env.product, dict(env.selected))
    obs, reward, terminated, truncated, info = env.step(response)
    assert reward == env.config.format_penalty and not terminated and not truncated
    assert info["metrics"]["action_is_valid"] == 0.0 and info["metrics"]["action_is_effective"] == 0.0
    assert obs == before[0] and (env.render_text(), env.page, env.result_page, env.product,
                                 dict(env.selected)) == before


def test_empty_search_is_invalid_and_search_parsing_is_lenient(env):
    env.reset(seed=2)
    assert env.step("<answer>search[  ]</answer>")[1] == env.config.format_penalty
    assert env.page == "search"
    act(env, "SEARCH [Men's T-Shirt]")
    assert env.page == "results" and env.queries == ["men's t-shirt"]
    assert all(p.type == "t-shirt" for p in env.page_results())
    env.step("<answer>Click[NEXT >]</answer>")
    assert env.result_page == 1


def test_max_steps_truncates():
    env = WebShopEnv(max_steps=3)
    env.reset(seed=0)
    results = [act(env, a) for a in ("search[hoodie]", "click[next >]", "click[< prev]")]
    assert [r[3] for r in results] == [False, False, True] and not any(r[2] for r in results)
    with pytest.raises(RuntimeError):
        act(env, "click[next >]")
    env.reset(seed=0)  # an invalid action counts as a step too
    assert [env.step("nonsense")[3] for _ in range(3)] == [False, False, True]


def test_pagination(env):
    env.reset(seed=0)
    act(env, "search[t-shirt]")
    assert len(env.results) == 50 and env.num_result_pages == 5
    pages = [env.page_results()]
    for _ in range(4):
        assert "click[next >]" in env.valid_actions()
        act(env, "click[next >]")
        pages.append(env.page_results())
    assert [len(p) for p in pages] == [10] * 5
    assert [p for page in pages for p in page] == env.results  # pages tile the results in order
    assert "click[next >]" not in env.valid_actions() and "page 5 of 5" in env.render_text()
    assert act(env, "click[next >]")[1] == env.config.format_penalty
    act(env, "click[< prev]")
    assert env.page_results() == pages[3]
    act(env, "click[back to search]")
    assert env.page == "search"


def test_results_per_page_is_configurable():
    env = WebShopEnv(results_per_page=4, max_results=10)
    env.reset(seed=0)
    act(env, "search[t-shirt]")
    assert env.num_result_pages == 3 and [len(env.page_results())] == [4]


def test_search_without_matches(env):
    env.reset(seed=0)
    obs = act(env, "search[zzzz qqqq]")[0]
    assert env.results == [] and "No products match" in obs
    assert env.valid_actions() == ["click[back to search]"]


def test_option_selection(env):
    goal = open_target(env, 3)
    name, values = next(iter(env.product.options.items()))
    first, second = values[0], values[1]
    assert act(env, f"click[{first}]")[4]["metrics"]["action_is_effective"] == 1.0
    assert env.selected == {name: first} and f"[{first}]*" in env.render_text()
    act(env, f"click[{second}]")
    assert env.selected == {name: second}  # one value per option
    assert act(env, f"click[{second}]")[4]["metrics"] == {
        "success": 0.0, "action_is_valid": 1.0, "action_is_effective": 0.0}
    act(env, "click[< prev]")
    other = next(p for p in env.page_results() if p is not goal.target)
    act(env, f"click[{other.id}]")
    assert env.selected == {}  # opening an item starts without options


def test_description_and_features_pages(env):
    goal = open_target(env, 4)
    obs = act(env, "click[features]")[0]
    assert env.page == "features" and all(f in obs for f in goal.target.features)
    assert env.valid_actions() == ["click[back to search]", "click[< prev]"]
    act(env, "click[< prev]")
    obs = act(env, "click[description]")[0]
    assert env.page == "description" and goal.target.description in obs
    act(env, "click[< prev]")
    assert env.page == "item"
    act(env, "click[< prev]")
    assert env.page == "results"


def test_buying_the_target_with_the_goal_options_scores_one(env):
    goal = open_target(env, 0)
    for value in goal.options.values():
        act(env, f"click[{value}]")
    obs, reward, terminated, truncated, info = act(env, "click[buy now]")
    assert reward == 1.0 and info["score"] == 1.0 and terminated and not truncated
    assert info["metrics"]["success"] == 1.0 and "Score: 1.000" in obs
    assert info["purchase"]["product"] == goal.target.id and env.valid_actions() == []


def test_buying_without_options_scores_the_hand_computed_fraction(env):
    goal = open_target(env, 1)
    assert len(goal.options) == 2  # this goal: type, attributes and price right, both options missing
    reward, info = act(env, "click[buy now]")[1::3]
    assert reward == pytest.approx((len(goal.attributes) + 0 + 1) / (len(goal.attributes) + 2 + 1))
    assert info["metrics"]["success"] == 0.0 and info["purchase"]["r_option"] == 0.0


def test_buying_another_type_scores_zero(env):
    env.reset(seed=0, options={"goal_index": 0})
    goal = env.goal
    other = next(p for p in env.catalog.products
                 if p.category[0] != goal.target.category[0] and not set(p.type_nouns) & set(goal.target.type_nouns))
    act(env, f"search[{other.title}]")
    act(env, f"click[{other.id}]")
    reward, info = act(env, "click[buy now]")[1::3]
    assert reward == 0.0 and info["purchase"]["r_type"] == 0.0


def test_every_listed_action_is_valid(env):
    rng = np.random.default_rng(0)
    for seed in range(10):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(random_action(env, rng))
            assert info["metrics"]["action_is_valid"] == 1.0
            done = term or trunc


def test_goal_split_and_explicit_goal():
    test_env = WebShopEnv(goal_split="test")
    for seed in range(30):
        test_env.reset(seed=seed)
        assert test_env.goal.index % 10 == 0
    _, info = test_env.reset(options={"goal_index": 2})
    assert test_env.goal is test_env.goals[2] and info["goal_index"] == 2
    with pytest.raises(ValueError, match="out of range"):
        test_env.reset(options={"goal_index": len(test_env.goals)})


def test_render_text_and_rgb(env):
    obs, _ = env.reset(seed=0)
    assert env.render() == env.render("text") == obs
    act(env, "search[hoodie]")
    frame = env.render("rgb_array")
    assert frame.shape == (720, 960, 3) and frame.dtype == np.uint8
    assert frame.min() < 64 and frame.max() == 255  # dark text on white
    with pytest.raises(ValueError):
        env.render("ansi")


def test_search_index_is_shared_and_thread_safe():
    envs = [WebShopEnv() for _ in range(4)]
    assert len({id(e.catalog.search_engine()) for e in envs}) == 1

    def play(worker: int):  # one env per thread, four episodes each, all querying one index
        return [run_episode(envs[worker], random_action, seed) for seed in range(worker, 16, 4)]

    with ThreadPoolExecutor(4) as pool:
        threaded = sorted((e for runs in pool.map(play, range(4)) for e in runs), key=lambda e: e.actions)
    sequential = sorted((run_episode(WebShopEnv(), random_action, s) for s in range(16)), key=lambda e: e.actions)
    assert threaded == sequential


def test_config_rejects_unknown_keys():
    with pytest.raises(Exception, match="extra"):
        WebShopEnv({"no_such_option": 1})


def test_info_is_json_serialisable(env):
    _, info = env.reset(seed=0)
    json.dumps(info)
    goal = open_target(env, 0)
    info = act(env, "click[buy now]")[4]
    assert json.loads(json.dumps(info))["purchase"]["product"] == goal.target.id
