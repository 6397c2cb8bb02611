"""The terminal env: roll's env contract, every built-in task solved by its solution (and not by
doing nothing), observations, limits, hostile commands, user tasks, the starter configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from roll_env_terminal.builtin_tasks import BUILTIN
from roll_env_terminal.env import TerminalEnv
from roll_env_terminal.tasks import load_tasks

from roll_core.envs import make_env
from roll_core.errors import ConfigError
from roll_core.testing import check_env

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MAKERS = [m for tier in BUILTIN.values() for m in tier]


def play(env: TerminalEnv, commands):
    steps = [env.step(env.parser.format(c)) for c in commands]
    return steps[-1]


def test_check_env():
    check_env("terminal", seeds=(0,), rgb=False)


@pytest.mark.parametrize("maker", MAKERS, ids=[m.__name__ for m in MAKERS])
def test_each_builtin_task_is_solved_by_its_solution_and_not_by_submitting_at_once(maker):
    task = maker(np.random.default_rng(7))
    env = TerminalEnv()
    env.reset(seed=0, options={"task": task})
    _, reward, terminated, _, info = play(env, task.solution)
    assert (reward, terminated, info["metrics"]["success"], info["check"]) == (1.0, True, 1.0, "passed")
    env.reset(seed=0, options={"task": task})
    _, reward, terminated, _, info = play(env, ["submit 0"])
    assert (reward, terminated) == (0.0, True) and info["check"] != "passed"
    env.close()


def test_the_scripted_policy_plays_solve_and_roll_env_play_shows_it():
    out = subprocess.run([sys.executable, "-m", "roll_core", "env", "play", "terminal_easy", "--policy", "scripted",
                          "--seed", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "reward 1, success True" in out.stdout and "<answer>submit " in out.stdout


def test_observations_show_output_and_exit_status_truncated():
    env = make_env("terminal", {"max_output_chars": 100})
    observation, info = env.reset(seed=0)
    assert observation.startswith("Task: ") and "Files: " in observation and info["task_id"]
    observation, reward, terminated, _, info = env.step("<answer>seq 1 1000; exit 3</answer>")
    assert observation.startswith("$ seq 1 1000; exit 3\n1\n2\n") and observation.endswith("1000\n[exit 3]")
    assert "characters cut" in observation and (reward, terminated) == (0.0, False)
    assert info["sandbox_reason"] == "exit_nonzero"


def test_a_command_past_its_time_limit_is_stopped_and_the_episode_goes_on():
    env = make_env("terminal", {"command_timeout_s": 0.5, "episode_time_s": 1.2})
    env.reset(seed=0)
    observation, _, terminated, _, info = env.step("<answer>sleep 30</answer>")
    assert observation.endswith("[timeout after 0.5 s]") and not terminated and info["sandbox_reason"] == "timeout"
    for _ in range(3):  # each sleep costs its 0.5 s, and the episode has 1.2 s of commands
        observation, reward, terminated, _, info = env.step("<answer>sleep 30</answer>")
        if terminated:
            break
    assert terminated and env.num_steps <= 3 and reward == 0.0 and "Out of time" in observation


def test_out_of_turns_judges_the_directory_as_it_is():
    task = BUILTIN[2][0](np.random.default_rng(0))  # sort_names: a file check
    env = make_env("terminal", {"max_steps": 1})
    env.reset(seed=0, options={"task": task})
    observation, reward, terminated, truncated, _ = env.step(env.parser.format(task.solution[0]))
    assert reward == 1.0 and (terminated or truncated) and "Out of turns; the check passed." in observation


@pytest.mark.parametrize(("command", "reason", "shown"), [
    (":(){ :|:& };: 2>/dev/null; sleep 9", "timeout", "timeout after"),
    ("head -c 200000000 /dev/zero | tr '\\0' x", "output_limit", "characters cut"),
    ("python3 -c 'x = bytearray(1 << 30)'", "memory_limit", "MemoryError"),
    ("cat /etc/shadow /root/.bashrc", "exit_nonzero", "No such file"),
    ("env | grep -c FAKE_API_KEY", "exit_nonzero", "0\n"),
    ("echo x > /usr/x; echo y > /etc/y", "exit_nonzero", "Read-only file system"),
    ("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)\"", "exit_nonzero",
     "Network is unreachable"),
])
def test_hostile_commands_are_contained_and_counted(command, reason, shown, monkeypatch):
    monkeypatch.setenv("FAKE_API_KEY", "sk-fake")
    env = make_env("terminal", {"command_timeout_s": 2, "command_memory_mb": 256})
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(env.parser.format(command))
    assert info["sandbox_reason"] == reason and shown in observation and not terminated
    observation, *_ = env.step("<answer>echo still here</answer>")
    assert observation == "$ echo still here\nstill here\n[exit 0]"


def test_users_tasks_from_jsonl_and_from_task_directories(tmp_path):
    hello = {"id": "hello", "instruction": "Create hello.txt holding hello. Then answer: submit", "files": {},
             "check": {"file": "hello.txt", "equals": "hello"}, "solution": ["echo hello > hello.txt", "submit"]}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(hello) + "\n")
    fix = tmp_path / "fix_add"
    (fix / "files").mkdir(parents=True)
    (fix / "check_files").mkdir()
    (fix / "files" / "add.py").write_text("def add(a, b):\n    return a - b\n")
    (fix / "check_files" / "check.py").write_text("from add import add\nassert add(2, 3) == 5\n")
    (fix / "task.yaml").write_text("instruction: Fix add.py. Then answer submit\ntier: 3\ncheck:\n"
                                   "  command: python3 check.py\nsolution:\n  - sed -i 's/a - b/a + b/' add.py\n"
                                   "  - submit\n")
    tasks = {t.id: t for t in load_tasks(tmp_path)}
    assert set(tasks) == {"hello", "fix_add"} and tasks["fix_add"].tier == 3
    env = make_env("terminal", {"tasks_path": str(tmp_path)})
    for task in tasks.values():
        env.reset(seed=0, options={"task": task})
        assert play(env, task.solution)[1] == 1.0
        env.reset(seed=0, options={"task": task})
        assert play(env, ["ls check.py", "submit"])[1] == 0.0  # the hidden check file is not there
    seen = {make_env("terminal", {"tasks_path": str(tmp_path)}).reset(seed=s)[1]["task_id"] for s in range(6)}
    assert seen == {"hello", "fix_add"}


@pytest.mark.parametrize(("line", "message"), [
    ('{"id": "a", "instruction": "x"}', "tasks.jsonl:1: missing 'check'"),
    ('{"id": "a", "instruction": "x", "check": {"file": "f"}}', "file 'f' needs 'equals' or 'contains'"),
    ('{"id": "a", "instruction": "x", "check": {"answer": "1"}, "tier": 5}', "'tier' must be 1, 2 or 3"),
    ('{"id": "a", "instruction": "x", "check": {"answer": "1"}, "setup": []}', "unknown key(s) setup"),
    ("not json", "tasks.jsonl:1: not JSON"),
])
def test_bad_tasks_are_errors_naming_the_line_and_key(tmp_path, line, message):
    (tmp_path / "tasks.jsonl").write_text(line + "\n")
    with pytest.raises(ConfigError, match=__import__("re").escape(message)):
        load_tasks(tmp_path / "tasks.jsonl")


def test_bad_configs_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="tiers"):
        make_env("terminal", {"tiers": [4]})
    with pytest.raises(ConfigError, match="does not exist"):
        make_env("terminal", {"tasks_path": str(tmp_path / "missing.jsonl")})


@pytest.mark.parametrize("name", ["grpo.yaml", "smollm2_lora.yaml"])
def test_the_starter_configs_resolve(name):
    from roll_core.config import load_config, resolve

    run = resolve(load_config(str(CONFIGS / name)))
    assert run.envs["TerminalEasy"].name == "terminal_easy"
    assert run.envs["TerminalEasy"].config.tiers == [1]
