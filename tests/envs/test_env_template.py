"""examples/env-plugin-template: loads as a plugin, passes check_env, and its own tests pass."""

import os
import subprocess
import sys
from pathlib import Path

from roll_core.envs import make_env
from roll_core.plugins import PluginManager
from roll_core.testing import check_env

TEMPLATE = Path(__file__).resolve().parents[2] / "examples" / "env-plugin-template"


def test_template_registers_and_passes_check_env(monkeypatch):
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    manager = PluginManager(autoload=False, extra_modules=["roll_env_guessnumber.plugin"])
    assert manager.get_plugin("roll_env_guessnumber.plugin").status == "ok"
    registry = manager.registry
    assert registry.get("env", "GuessNumber").name == "guess_number"
    check_env("GuessNumber", registry=registry)
    env = make_env("guess_number", {"high": 10}, registry=registry)
    assert env.reset(seed=0)[0] == "The number is between 1 and 10. No guesses yet."


def test_template_own_tests_pass():
    env = {**os.environ, "PYTHONPATH": str(TEMPLATE / "src"), "ROLL_PLUGINS": "roll_env_guessnumber.plugin"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                            cwd=TEMPLATE, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
