"""An env's own Python environment (roll_core.distributed.env_python): built once, reused, layered over
the trainer's packages with the env's pins winning, and clear errors. The Ray path (env managers
started in it, training) is tests/pipeline/test_isolated_env.py."""

from __future__ import annotations

import subprocess
from importlib.metadata import version

import pytest

from roll_core.distributed.env_python import MARKER, EnvPython, EnvPythonError, prepare
from roll_core.errors import ConfigError

#: an idna release other than the trainer's: installing it is a real conflict
PIN = "3.6" if version("idna") != "3.6" else "3.7"


def test_built_once_then_reused_with_the_pin_winning_over_the_trainer(tmp_path):
    spec = EnvPython((f"idna=={PIN}",), env="pinned")
    first = prepare(spec, cache_dir=tmp_path)
    assert first.built and first.seconds > 0 and (first.root / MARKER).is_file()
    again = prepare(spec, cache_dir=tmp_path)
    assert not again.built and again.root == first.root  # a later run reuses it
    code = ("import idna, roll_core, pydantic, sys; "
            "print(idna.__version__, roll_core.__file__, sys.prefix)")
    out = subprocess.run([str(first.python), "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == PIN != version("idna")  # the env's pin, not the trainer's idna
    assert out[2] == str(first.root)  # the env's own interpreter prefix ...
    import roll_core

    assert out[1] == roll_core.__file__  # ... with roll-core from the trainer's environment


def test_a_requirement_pip_cannot_install_is_a_clear_error_naming_it(tmp_path):
    spec = EnvPython(("roll-no-such-distribution-for-tests==0.0.1", f"idna=={PIN}"), env="broken")
    with pytest.raises(EnvPythonError) as info:
        prepare(spec, cache_dir=tmp_path)
    message = str(info.value)
    assert "The Python environment of env 'broken' could not be built" in message
    assert "the requirement 'roll-no-such-distribution-for-tests==0.0.1'" in message
    assert not (tmp_path / spec.key).exists()  # nothing half-built is left to be reused


def test_python_version_and_requirement_syntax_are_checked():
    import platform

    EnvPython(("idna",), python=">=3.10", env="ok").check()
    EnvPython(("idna",), python=".".join(platform.python_version_tuple()[:2]), env="ok").check()
    with pytest.raises(ConfigError, match=r"needs Python 2\.7, but roll runs on Python .*start roll from a Python 2\.7"):
        EnvPython(("idna",), python="2.7", env="old").check()
    with pytest.raises(ConfigError, match="declares the requirement 'idna=>3', which pip cannot read"):
        EnvPython(("idna=>3",), env="typo").check()


def test_malformed_registration_options_fail_the_plugin(tmp_path, monkeypatch):
    from roll_core.plugins import PluginManager

    (tmp_path / "bad_requirements_plugin.py").write_text(
        "from roll_core import hookimpl\n"
        "@hookimpl\n"
        "def roll_register_envs(register):\n"
        "    register('bad', 'x:Y', requirements='idna==3.6')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    info = PluginManager(autoload=False, extra_modules=["bad_requirements_plugin"]).get_plugin(
        "bad_requirements_plugin")
    assert info.status == "failed" and "requirements='idna==3.6'" in info.error
    assert "must be a non-empty list of pip requirement strings" in info.error


def test_env_managers_never_mix_python_environments():
    """Groups go to workers in order, but a worker hosts envs of one Python environment only."""
    from roll_core.envs import EnvConfig
    from roll_core.registry import Registration
    from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec
    from roll_core.run import EnvBinding

    def binding(name, **options):
        return EnvBinding(Registration(kind="env", name=name, target="m:C", plugin="t", options=options), EnvConfig())

    envs = {"Plain": EnvSpec("Plain", binding("plain")),
            "Pinned": EnvSpec("Pinned", binding("pinned", requirements=[f"idna=={PIN}"]))}
    spec = RolloutSpec(mode="train", seed=0, num_env_groups=5, group_size=2, max_env_num_per_worker=8,
                       group_tags=("Plain", "Plain", "Plain", "Pinned", "Pinned"), envs=envs, sequence_length=64)
    assert spec.worker_layout == ((0, 1, 2), (3, 4))  # 4 groups fit a worker, but not across environments
    assert spec.worker_python_env(0) is None
    assert spec.worker_python_env(1).requirements == (f"idna=={PIN}",) and spec.num_workers == 2
    plain = RolloutSpec(mode="train", seed=0, num_env_groups=5, group_size=2, max_env_num_per_worker=4,
                        group_tags=("Plain",) * 5, envs=envs, sequence_length=64)
    assert plain.worker_layout == ((0, 1), (2, 3), (4,))  # as before: groups_per_worker consecutive groups


def test_env_play_runs_an_env_with_its_own_python_in_it(tmp_path):
    """`roll env play` re-runs itself in the env's environment (the env refuses the trainer's idna)."""
    import os
    import sys
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(tests / "pipeline"), "ROLL_PLUGINS": "roll_pinned_env",
           "ROLL_ENV_PYTHON_CACHE": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "roll_core", "env", "play", "Pinned", "--policy", "random",
                             "--seed", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "building the Python environment of env 'pinned_idna' (idna==3.6)" in result.stderr
    assert "running in the Python environment of env 'pinned_idna'" in result.stderr
    assert "=== system ===\nReach 2." in result.stdout and "episode " in result.stdout
