"""FrozenLake: the env contract, gymnasium's dynamics, rendering and configs."""

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from roll_env_frozenlake.env import FrozenLakeEnv

from roll_core.envs import make_env
from roll_core.errors import ConfigError
from roll_core.testing import check_env


@pytest.mark.parametrize("env_config", [None, {"is_slippery": False, "size": 4}, {"map_seed": 3}])
def test_check_env(env_config):
    check_env("frozen_lake", env_config, seeds=(0, 5))


def test_tag_resolves_and_instruction_explains_format():
    env = make_env("FrozenLake", is_slippery=False)
    _, info = env.reset(seed=0)
    assert type(env) is FrozenLakeEnv
    for text in ("P = you", "O = a hole", "G = the goal", "<answer>Left</answer>"):
        assert text in info["instruction"]
    assert "slippery" not in info["instruction"]
    assert "slippery" in make_env("frozen_lake").instruction


def test_hole_and_goal_rendering_and_rewards():
    env = FrozenLakeEnv(is_slippery=False)
    env.reset(options={"desc": ["SH", "FG"]})
    assert env.render_text() == "PO\n_G"
    observation, reward, terminated, _, info = env.step("<answer>RIGHT</answer>")
    assert observation == "_X\n_G" and reward == 0.0 and terminated and info["metrics"]["success"] == 0.0
    env.reset(options={"desc": ["SH", "FG"]})
    env.step("<answer>down</answer>")
    observation, reward, terminated, _, info = env.step("<answer>Right</answer>")
    assert observation == "_O\n_√" and reward == 1.0 and terminated and info["metrics"]["success"] == 1.0


def test_scripted_policy_draws_among_the_optimal_moves():
    from roll_core.envs.policies import make_policy

    env = FrozenLakeEnv(is_slippery=False, max_steps=10)
    env.reset(options={"desc": ["SF", "FG"]})
    assert env.optimal_actions() == ["Down", "Right"] and env.solve() == ["Down", "Right"]
    first = Counter()
    for seed in range(40):  # every episode is still shortest, and each tied move is played
        policy = make_policy("scripted", seed)
        env.reset(options={"desc": ["SF", "FG"]})
        action = policy(env, "")
        first[action] += 1
        env.step(action)
        _, reward, terminated, _, _ = env.step(policy(env, ""))
        assert terminated and reward == 1.0
    assert set(first) == {"<answer>Down</answer>", "<answer>Right</answer>"} and min(first.values()) >= 10
    replay = [make_policy("scripted", 7)(env, "") for _ in range(2) if env.reset(options={"desc": ["SF", "FG"]})]
    assert replay[0] == replay[1]  # a seed plays the same moves
    env.reset(options={"desc": ["SH", "FG"]})  # one optimal move: no draw
    assert {make_policy("scripted", seed)(env, "") for seed in range(10)} == {"<answer>Down</answer>"}


def test_show_neighbours_names_the_cell_each_action_leads_to():
    env = FrozenLakeEnv(is_slippery=False, show_neighbours=True)
    observation, _ = env.reset(options={"desc": ["FHF", "FSG", "FFF"]})
    assert observation == "_O_\n_PG\n___\nLeft _ Down _ Right G Up O"
    assert env.render_text() == "_O_\n_PG\n___"  # frames and the grid itself are unchanged
    observation, *_ = env.step("<answer>Down</answer>")
    assert observation.splitlines()[-1] == "Left _ Down # Right _ Up _"  # the start is ice
    env = FrozenLakeEnv(is_slippery=False, show_neighbours=True, edge_symbol="|",
                        grid_lookup={0: " P", 1: " -", 2: " O", 3: " G", 4: " X", 5: " √"})
    observation, _ = env.reset(options={"desc": ["SH", "FG"]})
    assert observation == " P O\n - G\nLeft | Down - Right O Up |"
    check_env("frozen_lake", {"show_neighbours": True, "size": 4, "is_slippery": False}, seeds=(0, 5))


def test_walking_into_the_edge_is_ineffective():
    env = FrozenLakeEnv(is_slippery=False)
    observation, _ = env.reset(options={"desc": ["SF", "FG"]})
    obs2, reward, _, _, info = env.step("<answer>Up</answer>")
    assert obs2 == observation and reward == 0.0
    assert info["metrics"]["action_is_valid"] == 1.0 and info["metrics"]["action_is_effective"] == 0.0


def test_slippery_moves_follow_gymnasium_odds():
    env = FrozenLakeEnv(is_slippery=True)
    env.reset(seed=0, options={"desc": ["FFF", "FSF", "FFG"]})
    outcomes = Counter()
    for _ in range(1500):
        env.position = (1, 1)
        env.step("<answer>Right</answer>")
        outcomes[env.position] += 1
        env.done = False
    # Right goes right, or slips up or down, one third each; never left
    assert set(outcomes) == {(1, 2), (0, 1), (2, 1)}
    assert all(400 < n < 600 for n in outcomes.values()), outcomes


def test_map_seed_pins_the_map_but_seeds_still_vary_slips():
    env = make_env("frozen_lake", map_seed=11, size=5)
    maps = {env.reset(seed=s)[1]["map"][0] + "".join(env.reset(seed=s)[1]["map"][1:]) for s in range(5)}
    assert len(maps) == 1


def test_generated_maps_match_config():
    env = make_env("frozen_lake", size=6, p=0.7)
    _, info = env.reset(seed=2)
    desc = info["map"]
    assert len(desc) == 6 and all(len(row) == 6 for row in desc)
    joined = "".join(desc)
    assert joined.count("S") == 1 and joined.count("G") == 1


@pytest.mark.parametrize("bad", [{"size": 1}, {"p": 0}, {"grid_lookup": {0: "P"}}, {"sizee": 4},
                                 {"grid_lookup": {0: "P", 1: "P", 2: "O", 3: "G", 4: "X", 5: "V"}},
                                 {"show_neighbours": True, "edge_symbol": " O"}, {"edge_symbol": ""}])
def test_bad_configs_are_rejected(bad):
    with pytest.raises(ConfigError):
        make_env("frozen_lake", bad)


def test_custom_grid_lookup_changes_text_and_instruction():
    lookup = {0: "A", 1: ".", 2: "#", 3: "$", 4: "x", 5: "*"}
    env = make_env("frozen_lake", grid_lookup=lookup, is_slippery=False)
    observation, info = env.reset(seed=1)
    assert set(observation) <= {"A", ".", "#", "$", "\n"} and "A" in observation
    assert "# = a hole" in info["instruction"]


def test_rgb_frame():
    env = make_env("frozen_lake", size=5)
    env.reset(seed=0)
    frame = env.render("rgb_array")
    assert frame.shape == (5 * 32, 5 * 32, 3) and frame.dtype == np.uint8


def test_plugin_entry_module_is_import_light():
    code = ("import sys, roll_env_frozenlake.plugin\n"
            "heavy = [m for m in ('numpy', 'gymnasium', 'torch', 'ray', 'roll_env_frozenlake.env') "
            "if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
