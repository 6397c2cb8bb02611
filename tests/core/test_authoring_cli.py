"""The commands a plugin author uses: ``roll plugins show`` (fields, presets), ``roll examples``,
``roll plugins new`` (a generated package passes its own tests)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from roll_core.cli import main
from roll_core.plugins import reset_plugin_manager

TESTS = Path(__file__).resolve().parents[1]
SAME_NAME_PLUGIN = """
    from roll_core import hookimpl

    @hookimpl
    def roll_register_envs(register):
        register("demo_env", "roll_tiny_envs:CounterEnv", tags=["DemoEnv"], description="count up",
                 defaults={"goal": 7}, requirements=["idna==3.6"])
"""


@pytest.fixture
def demo_plugin(tmp_path, monkeypatch):
    """A plugin module named like the env it registers (the generated package's layout)."""
    (tmp_path / "demo_env.py").write_text(textwrap.dedent(SAME_NAME_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(TESTS / "envs"))  # roll_tiny_envs
    monkeypatch.setenv("ROLL_PLUGINS", "demo_env")
    monkeypatch.setenv("ROLL_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_show_a_plugin_and_its_same_named_env_with_the_registration_defaults(demo_plugin, capsys):
    assert main(["plugins", "show", "demo_env"]) == 0
    out = capsys.readouterr().out
    assert "plugin:       demo_env" in out  # the plugin summary ...
    assert "env 'demo_env' from plugin 'demo_env' -> roll_tiny_envs:CounterEnv" in out  # ... and the env
    assert "preset env_config (registration defaults): goal=7" in out
    assert "own Python environment: idna==3.6; its env managers run in it" in out
    goal = next(line for line in out.splitlines() if line.strip().startswith("goal "))
    assert "7* (class: 5)" in goal  # the preset, not only the class default
    assert any(line.strip().startswith("max_steps ") and "20" in line for line in out.splitlines())


def test_show_by_tag_as_json(demo_plugin, capsys):
    assert main(["plugins", "show", "DemoEnv", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["plugin"] is None and [c["name"] for c in shown["components"]] == ["demo_env"]
    fields = {f["name"]: f for f in shown["components"][0]["config_fields"]}
    assert fields["goal"]["preset"] == 7 and fields["goal"]["default"] == 5 and fields["goal"]["type"] == "an integer"


ROOT = TESTS.parent


def test_every_example_file_ships_in_the_wheel():
    """Each tracked file under examples/ matches a [tool.setuptools.data-files] entry of its directory."""
    import fnmatch
    import subprocess
    import tomllib

    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    tracked = subprocess.run(["git", "ls-files", "examples"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    files = tracked.stdout.split()
    assert len(files) > 10
    for path in files:
        dest = "share/roll/" + str(Path(path).parent)
        assert any(fnmatch.fnmatch(path, pattern) for pattern in data_files.get(dest, [])), (
            f"{path} is not installed with the wheel: add it to [tool.setuptools.data-files] {dest!r}")


def test_examples_copy_writes_runnable_configs_and_refuses_to_overwrite(tmp_path, capsys):
    assert main(["examples", "copy", "rlvr", "frozen_lake", "--to", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "pip install roll-env-frozenlake && roll run examples/frozen_lake/grpo.yaml" in out
    assert (tmp_path / "examples/frozen_lake/grpo.yaml").is_file()
    assert (tmp_path / "examples/rlvr/data/arithmetic_train.jsonl").stat().st_size > 1000  # the data it names
    (tmp_path / "examples/rlvr/arithmetic.yaml").write_text("mine")
    assert main(["examples", "copy", "rlvr", "--to", str(tmp_path)]) == 1
    assert "already exists; nothing was copied. Pass --force" in capsys.readouterr().err
    assert (tmp_path / "examples/rlvr/arithmetic.yaml").read_text() == "mine"
    assert main(["examples", "copy", "rlvr", "--to", str(tmp_path), "--force"]) == 0
    assert "exp_name: rlvr_arithmetic" in (tmp_path / "examples/rlvr/arithmetic.yaml").read_text()
    assert main(["examples", "copy", "sokobn", "--to", str(tmp_path)]) == 1
    assert "Did you mean 'sokoban'?" in capsys.readouterr().err


def test_examples_list_names_each_config_and_the_plugins_it_needs(capsys):
    assert main(["examples", "list"]) == 0
    out = capsys.readouterr().out
    assert "examples/sokoban/gigpo.yaml  (needs: pip install roll-env-sokoban)" in out
    assert "env-plugin-template: roll-env-guessnumber" in out


@pytest.mark.parametrize(("kind", "name", "package", "expected"), [
    ("env", "demo_env", "roll_env_demo_env", 7),
    ("strategy", "demo_infer", "roll_strategy_demo_infer", 6),
    ("reward", "demo_match", "roll_reward_demo_match", 10),
    ("agent", "demo_agent", "roll_agent_demo_agent", 5),
])
def test_a_generated_package_passes_its_own_tests_unchanged(tmp_path, capsys, kind, name, package, expected):
    """The generated tests run against the generated code (found through ROLL_PLUGINS here; the
    `wheels` nox session installs the env and agent packages from their wheels into a fresh venv
    and trains each 2 steps)."""
    import os
    import subprocess
    import sys

    root = tmp_path / "pkg"
    assert main(["plugins", "new", kind, name, "--dir", str(root)]) == 0
    assert "pip install -e ." in capsys.readouterr().out
    pyproject = (root / "pyproject.toml").read_text()
    assert f'{name} = "{package}.plugin"' in pyproject and "[project.entry-points.roll]" in pyproject
    assert not list(root.rglob("*.tmpl")) and "{{" not in "".join(p.read_text() for p in root.rglob("*.py"))
    import roll_core

    core = Path(roll_core.__file__).resolve().parents[1]  # the roll-core under test, not whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(core)]), "ROLL_PLUGINS": f"{package}.plugin",
           "ROLL_DISABLE_PLUGIN_AUTOLOAD": "1"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"{expected} passed" in result.stdout


def test_plugins_new_refuses_bad_names_and_non_empty_directories(tmp_path, capsys):
    assert main(["plugins", "new", "env", "2fast", "--dir", str(tmp_path / "a")]) == 1
    assert "'2fast' is not usable as a component name" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    assert main(["plugins", "new", "reward", "match", "--dir", str(tmp_path / "b")]) == 1
    assert "already exists and is not empty; nothing was written" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["notes.txt"]
    assert main(["plugins", "new", "env", "my-maze", "--dir", str(tmp_path / "c")]) == 0  # hyphens become _
    assert 'my_maze = "roll_env_my_maze.plugin"' in (tmp_path / "c" / "pyproject.toml").read_text()
    assert "class MyMazeEnv(TextEnv):" in (tmp_path / "c/src/roll_env_my_maze/env.py").read_text()
