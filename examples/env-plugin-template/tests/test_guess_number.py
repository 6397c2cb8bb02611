"""The template plugin's own tests: the contract (via roll's pytest fixtures) and the game rules.

They run against the installed plugin (``pip install -e .``); roll-core's pytest plugin provides
the ``roll_check_env`` and ``roll_smoke_rollout`` fixtures.
"""

import subprocess
import sys

import pytest
from roll_env_guessnumber.env import GuessNumberEnv

from roll_core.envs import make_env


def test_env_honours_the_contract(roll_check_env):
    roll_check_env("guess_number")


def test_selectable_by_tag_with_config(roll_check_env):
    roll_check_env("GuessNumber", {"low": 1, "high": 8, "max_steps": 4})


def test_hints_narrow_the_range():
    env = GuessNumberEnv(low=1, high=100)
    env.reset(seed=3)
    secret = env.secret
    low_guess = env.parser.format(str(secret - 1)) if secret > 1 else None
    if low_guess:
        observation, reward, terminated, _, info = env.step(low_guess)
        assert "too low" in observation and reward == 0.0 and not terminated
        assert env.lo == secret and info["metrics"]["action_is_effective"] == 1.0
    observation, reward, terminated, _, info = env.step(env.parser.format(str(secret)))
    assert terminated and reward == 1.0 and info["metrics"]["success"] == 1.0


@pytest.mark.parametrize("response", ["<answer>soon</answer>", "<answer>1000</answer>", "fifty"])
def test_non_numbers_and_out_of_range_are_invalid(response):
    env = GuessNumberEnv()
    before, _ = env.reset(seed=0)
    observation, reward, _, _, info = env.step(response)
    assert info["metrics"]["action_is_valid"] == 0.0
    assert reward == env.config.format_penalty and observation == before


def test_binary_search_always_wins(roll_smoke_rollout):
    stats = roll_smoke_rollout("guess_number", {"max_steps": 7}, episodes=30, policy="scripted")
    assert stats.success_rate == 1.0  # 2^7 > 100


def test_bad_config_is_rejected():
    from roll_core.errors import ConfigError

    with pytest.raises(ConfigError, match="high"):
        make_env("guess_number", {"low": 5, "high": 5})


def test_usable_by_tag_from_a_config(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "custom_envs:\n"
        "  TinyGuess:\n"
        "    env_type: GuessNumber\n"
        "    max_steps: 8\n"
        "    env_config:\n"
        "      high: 20\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "roll_core", "env", "play", "TinyGuess", "--config", str(config),
         "--policy", "scripted", "--seed", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "between 1 and 20" in result.stdout
    assert "success True" in result.stdout
