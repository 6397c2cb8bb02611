"""Sokoban: the env contract, ROLL's reward scheme, presets and configs, rendering."""

import subprocess
import sys

import numpy as np
import pytest
from roll_env_sokoban.env import SokobanEnv
from roll_env_sokoban.levels import parse_level

from roll_core.envs import make_env
from roll_core.errors import ConfigError
from roll_core.testing import check_env


@pytest.mark.parametrize("name", ["sokoban", "LargerSokoban", "SokobanDifferentGridVocab"])
def test_check_env(name):
    check_env(name, seeds=(0, 7))


def _play(env, words):
    return [env.step(env.parser.format(w)) for w in words]


def test_roll_reward_scheme():
    env = SokobanEnv()
    env.reset(options={"level": parse_level(["#######", "#P_X_O#", "#######"])})
    (_, r1, t1, _, i1), (_, r2, _, _, _), (obs, r3, t3, _, i3) = _play(env, ["Right", "Right", "Right"])
    assert (r1, r2) == (pytest.approx(-0.1), pytest.approx(-0.1)) and not t1
    assert i1["metrics"]["action_is_effective"] == 1.0
    assert r3 == pytest.approx(-0.1 + 1 + 10) and t3 and i3["metrics"]["success"] == 1.0
    assert obs == "#######\n#___P√#\n#######"


def test_pushing_off_a_target_costs_one():
    env = SokobanEnv()
    env.reset(options={"level": parse_level(["########", "#P√_X_O#", "########"])})
    (_, reward, terminated, _, info), = _play(env, ["Right"])
    assert reward == pytest.approx(-0.1 - 1) and not terminated
    assert info["boxes_on_target"] == 0


def test_blocked_moves_are_valid_but_ineffective():
    env = SokobanEnv()
    env.reset(options={"level": parse_level(["######", "#PXX_#", "#O_O_#", "######"])})
    before = env.render_text()
    for word in ("Up", "Left", "Right"):  # wall, wall, two boxes in a row
        _, reward, _, _, info = env.step(env.parser.format(word))
        assert reward == pytest.approx(-0.1)
        assert info["metrics"] == {"success": 0.0, "action_is_valid": 1.0, "action_is_effective": 0.0}
    assert env.render_text() == before


def test_ineffective_penalty_costs_a_blocked_move_only():
    env = make_env("sokoban", ineffective_penalty=-1.0, format_penalty=-0.5)
    env.reset(options={"level": parse_level(["######", "#P_X_#", "#O___#", "######"])})
    rewards = [reward for _, reward, _, _, _ in _play(env, ["Up", "Right", "Left"])]
    assert rewards == [pytest.approx(-1.1), pytest.approx(-0.1), pytest.approx(-0.1)]  # wall, step, step
    _, reward, _, _, info = env.step("<answer>jump</answer>")  # invalid: format_penalty alone
    assert reward == -0.5 and info["metrics"]["action_is_valid"] == 0.0
    assert env.episode_reward == pytest.approx(-1.1 - 0.1 - 0.1 - 0.5)


def test_invalid_response_keeps_state_and_costs_format_penalty():
    env = make_env("sokoban", format_penalty=-0.5)
    observation, _ = env.reset(seed=4)
    obs2, reward, _, _, info = env.step("<answer>jump</answer>")
    assert obs2 == observation and reward == -0.5 and info["metrics"]["action_is_valid"] == 0.0
    _, _, _, _, info = env.step("Let me push. <answer> dOwN </answer>")
    assert info["metrics"]["action_is_valid"] == 1.0


def test_presets_and_roll_config_names():
    larger = make_env("LargerSokoban")
    assert larger.config.dim_room == (8, 8) and larger.config.num_boxes == 2
    assert make_env("sokoban_larger", {"num_boxes": 3}).config.num_boxes == 3  # entry overrides preset
    roll_style = make_env("sokoban", {"dim_x": 7, "dim_y": 9, "num_boxes": 2})
    assert roll_style.config.dim_room == (7, 9)
    observation, _ = roll_style.reset(seed=0)
    assert [len(row) for row in observation.splitlines()] == [9] * 7
    assert observation.count("X") + observation.count("√") == 2


def test_different_grid_vocab():
    env = make_env("SokobanDifferentGridVocab")
    observation, info = env.reset(seed=0)
    assert "@" in observation or "+" in observation
    assert "$" in observation and "X" not in observation
    assert "$ = box" in info["instruction"]
    custom = make_env("sokoban", {"grid_vocab": {"#": "rock"}})
    assert "# = rock" in custom.instruction


@pytest.mark.parametrize("bad", [{"dim_room": [4, 4]}, {"dim_room": [5, 5], "num_boxes": 4},
                                 {"grid_lookup": {0: "#"}}, {"num_boxes": 0}, {"dim_x": 3}])
def test_bad_configs_are_rejected(bad):
    with pytest.raises(ConfigError):
        make_env("sokoban", bad)


def test_rgb_frame():
    env = make_env("sokoban", dim_room=[6, 7])
    env.reset(seed=1)
    frame = env.render("rgb_array")
    assert frame.shape == (6 * 32, 7 * 32, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 4


def test_plugin_entry_module_is_import_light():
    code = ("import sys, roll_env_sokoban.plugin\n"
            "heavy = [m for m in ('numpy', 'torch', 'ray', 'roll_env_sokoban.env') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
