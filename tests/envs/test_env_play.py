"""``roll env play``: full episodes, prompts as the model sees them, keyboard, configs, GIFs, errors."""

import io
import json
import re
import subprocess
import sys

import pytest
from PIL import Image

from roll_core.cli import main

CONFIG = """\
max_actions_per_traj: 6
custom_envs:
  SimpleSokoban:
    env_type: sokoban
    max_steps: ${max_actions_per_traj}
    max_tokens_per_step: 64
    agent_template: "Turn {turn_idx}:\\nState:\\n{state}\\nYou have {actions_left} actions left.\\n"
    env_config:
      dim_x: 6
      dim_y: 6
      num_boxes: 1
  MyLake:
    env_type: FrozenLake
    env_config: {is_slippery: false, size: 4}
"""


def _run(*argv):
    return subprocess.run([sys.executable, "-m", "roll_core", *argv], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("env", ["sokoban", "frozen_lake"])
def test_random_policy_plays_a_full_episode(env):
    result = _run("env", "play", env, "--policy", "random", "--seed", "0")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    ending = re.search(r"episode (terminated|truncated) after (\d+) steps", out)
    assert ending, out[-2000:]
    assert out.count("=== assistant (turn") == int(ending.group(2))
    assert out.startswith(f"env {env} -> {env} ")
    assert "=== system ===\n" in out and "=== user (turn 1) ===\nTurn 1. State:\n" in out
    assert "--- action " in out and "action_is_valid=1" in out
    assert _run("env", "play", env, "--policy", "random", "--seed", "0").stdout == out  # reproducible


def test_scripted_policy_solves_sokoban(capsys):
    assert main(["env", "play", "SimpleSokoban", "--policy", "scripted", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "episode terminated" in out and "success True" in out and "reward 10" in out


def test_keyboard_reads_words_and_raw_responses_from_a_pipe(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("RIGHT\nI would rather not move\n\n"))
    assert main(["env", "play", "frozen_lake", "--set", "is_slippery=false", "--set", "size=4"]) == 0
    out = capsys.readouterr().out
    assert "=== assistant (turn 1) ===\n<answer>RIGHT</answer>" in out  # a bare word gets the answer format
    assert "=== assistant (turn 2) ===\nI would rather not move" in out
    assert "--- action None (INVALID) | reward -0.1" in out
    assert "(stopped by the player)" in out and "episode stopped after 2 steps" in out


def test_custom_envs_from_a_config(tmp_path, capsys):
    config = tmp_path / "agentic.yaml"
    config.write_text(CONFIG)
    assert main(["env", "play", "SimpleSokoban", "--config", str(config), "--policy", "random"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("env custom_envs.SimpleSokoban -> sokoban ") and "max_steps 6" in out
    assert "=== user (turn 1) ===\nTurn 1:\nState:\n" in out and "You have 6 actions left." in out
    assert main(["env", "play", "MyLake", "--config", str(config), "--policy", "scripted"]) == 0
    assert "success True" in capsys.readouterr().out


def test_unknown_names_get_suggestions(tmp_path, capsys):
    config = tmp_path / "agentic.yaml"
    config.write_text(CONFIG)
    assert main(["env", "play", "MyLak", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "Unknown env or agent 'MyLak'" in err and "Did you mean 'MyLake'" in err
    result = _run("env", "play", "frozn_lak", "--policy", "random")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "Did you mean" in result.stderr and "frozen_lake" in result.stderr


def test_save_gif(tmp_path, capsys):
    gif = tmp_path / "episode.gif"
    assert main(["env", "play", "sokoban", "--policy", "random", "--max-steps", "5", "--save-gif", str(gif)]) == 0
    assert "saved 6 frames" in capsys.readouterr().out
    with Image.open(gif) as image:
        assert image.n_frames >= 2  # identical consecutive frames may be merged by the encoder


def test_plugins_list_shows_both_envs():
    result = _run("plugins", "list", "--json")
    listing = {p["distribution"]: p for p in json.loads(result.stdout)}
    assert {r["name"] for r in listing["roll-env-sokoban"]["provides"]} == {"sokoban", "sokoban_larger", "sokoban_xsb"}
    assert [r["name"] for r in listing["roll-env-frozenlake"]["provides"]] == ["frozen_lake"]
