"""The plugin system: discovery through entry points, isolation of failures, lookups, CLI listing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roll_core.errors import PluginError, UnknownComponentError
from roll_core.plugins import BUILTIN_PLUGINS, PluginManager
from roll_core.registry import Registration, Registry

PYTHON = sys.executable


def write_module(tmp_path: Path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    return name


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


GOOD_PLUGIN = """
    from roll_core.hookspecs import hookimpl

    @hookimpl
    def roll_register_envs(register):
        register("maze", "maze_pkg.env:MazeEnv", tags=["Maze", "grid"], description="a maze")

    @hookimpl
    def roll_register_advantage_estimators(register):
        register("my_adv", "maze_pkg.adv:estimate", description="custom estimator")
"""


def test_builtins_are_registered_through_the_same_hooks():
    manager = PluginManager(autoload=False)
    builtin = [p for p in manager.plugins.values() if p.builtin]
    assert {p.module for p in builtin} == set(BUILTIN_PLUGINS)
    assert all(p.status == "ok" and p.distribution == "roll-core" for p in builtin)
    for info in builtin:  # whatever a built-in registered is attributed to it like any plugin
        assert all(r.plugin == info.name for r in info.provides)


def test_extra_module_plugin_found_by_name_and_tag(on_path):
    write_module(on_path, "good_plugin", GOOD_PLUGIN)
    manager = PluginManager(autoload=False, extra_modules=["good_plugin"])
    reg = manager.registry.get("env", "maze")
    assert reg.target == "maze_pkg.env:MazeEnv" and reg.plugin == "good_plugin"
    assert manager.registry.get("env", "Maze") is reg  # by tag
    assert manager.registry.get("env", "GRID") is reg  # tags match case-insensitively
    assert [r.name for r in manager.registry.find_by_tag("env", "grid")] == ["maze"]
    assert manager.registry.get("advantage_estimator", "my_adv").description == "custom estimator"


def test_plugin_failing_on_import_is_reported_not_fatal(on_path):
    write_module(on_path, "good_plugin", GOOD_PLUGIN)
    write_module(on_path, "broken_plugin", "raise RuntimeError('boom at import')\n")
    manager = PluginManager(autoload=False, extra_modules=["broken_plugin", "good_plugin"])
    broken = manager.get_plugin("broken_plugin")
    assert broken.status == "failed" and "boom at import" in broken.error
    assert "RuntimeError" in broken.traceback
    assert ("env", "maze") in manager.registry  # the good one still loaded
    with pytest.raises(UnknownComponentError, match="broken_plugin.*failed to load"):
        manager.registry.get("env", "nothing_like_it")


def test_plugin_failing_inside_a_hook_has_its_registrations_withdrawn(on_path):
    write_module(on_path, "half_plugin", """
        from roll_core.hookspecs import hookimpl

        @hookimpl
        def roll_register_envs(register):
            register("half_env", "half_plugin:Env")
            raise ValueError("registration blew up")
    """)
    manager = PluginManager(autoload=False, extra_modules=["half_plugin"])
    info = manager.get_plugin("half_plugin")
    assert info.status == "failed" and "registration blew up" in info.error
    assert ("env", "half_env") not in manager.registry and info.provides == []


def test_duplicate_names_name_both_plugins(on_path):
    """Two plugins claiming one component name: both load, neither wins, selecting it names both."""
    write_module(on_path, "dup_a", GOOD_PLUGIN)
    write_module(on_path, "dup_b", GOOD_PLUGIN)
    manager = PluginManager(autoload=False, extra_modules=["dup_a", "dup_b"])
    assert manager.get_plugin("dup_a").status == manager.get_plugin("dup_b").status == "ok"
    assert set(manager.registry.clashes()) == {("env", "maze"), ("advantage_estimator", "my_adv")}
    with pytest.raises(PluginError) as err:
        manager.registry.get("env", "maze", config_key="custom_envs.M.env_type")
    message = str(err.value)
    assert "'dup_a'" in message and "'dup_b'" in message and "custom_envs.M.env_type" in message
    assert "ROLL_DISABLE_PLUGINS=dup_b" in message
    again = PluginManager(autoload=False, extra_modules=["dup_a", "dup_b"], disabled=["dup_b"])
    assert again.registry.get("env", "maze").plugin == "dup_a"  # the advice in the message works


def test_entry_points_with_one_name_from_two_distributions_both_load(on_path, monkeypatch):
    """An entry point named like another distribution's plugin does not silently replace it."""
    from importlib import metadata

    write_module(on_path, "maze_one", GOOD_PLUGIN)
    write_module(on_path, "maze_two", """
        from roll_core import hookimpl

        @hookimpl
        def roll_register_envs(register):
            register("maze2", "maze_two_pkg.env:Maze2", description="another maze")
    """)

    class Dist:
        def __init__(self, name):
            self.metadata, self.version = {"Name": name}, "1.0"

    def entry_points(group):
        eps = [metadata.EntryPoint("maze", module, "roll") for module in ("maze_one", "maze_two")]
        for ep, dist in zip(eps, ("roll-env-maze", "other-maze"), strict=True):
            ep._for(Dist(dist))
        return eps

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    manager = PluginManager(autoload=True)
    assert manager.get_plugin("maze").distribution == "roll-env-maze"
    second = manager.get_plugin("maze (other-maze)")
    assert second.status == "ok" and [r.name for r in second.provides] == ["maze2"]
    assert manager.registry.get("env", "maze").plugin == "maze" and ("env", "maze2") in manager.registry


def test_a_misspelt_hook_fails_its_plugin_with_the_right_name(on_path):
    write_module(on_path, "typo_plugin", """
        from roll_core import hookimpl

        @hookimpl
        def roll_register_env(register):
            register("typo_env", "x.y:Z")
    """)
    write_module(on_path, "good_plugin", GOOD_PLUGIN)
    manager = PluginManager(autoload=False, extra_modules=["typo_plugin", "good_plugin"])
    info = manager.get_plugin("typo_plugin")
    assert info.status == "failed"
    assert "no hook 'roll_register_env'" in info.error and "Did you mean 'roll_register_envs'" in info.error
    assert ("env", "maze") in manager.registry


@pytest.mark.parametrize("body, expected", [
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ("def broken(:\n", "SyntaxError"),
    ("raise KeyError('x')\n", "KeyError"),
])
def test_any_exception_at_plugin_import_fails_only_that_plugin(on_path, body, expected, request):
    module = f"bad_import_{request.node.callspec.indices['body']}"
    write_module(on_path, module, body)
    manager = PluginManager(autoload=False, extra_modules=[module])
    info = manager.get_plugin(module)
    assert info.status == "failed" and expected in info.error


@pytest.mark.parametrize("call, expected", [
    ('register("g", "m:f", needs_critc=True)', "unknown option 'needs_critc'. Did you mean 'needs_critic'"),
    ('register("g", "m:f", granularity="turn")', "granularity='turn', which must be one of 'trajectory', 'step'"),
    ('register("g", "m:f", needs_critic="yes")', "needs_critic='yes', which must be True or False"),
])
def test_registration_options_are_checked_per_kind(on_path, call, expected, request):
    module = f"opt_plugin_{request.node.callspec.indices['call']}"  # a fresh module per case
    write_module(on_path, module, f"""
        from roll_core import hookimpl

        @hookimpl
        def roll_register_advantage_estimators(register):
            {call}
    """)
    info = PluginManager(autoload=False, extra_modules=[module]).get_plugin(module)
    assert info.status == "failed" and expected in info.error


def test_a_strategy_must_say_its_role(on_path):
    write_module(on_path, "role_plugin", """
        from roll_core import hookimpl

        @hookimpl
        def roll_register_strategies(register):
            register("fast", "fast_pkg:Fast")
    """)
    info = PluginManager(autoload=False, extra_modules=["role_plugin"]).get_plugin("role_plugin")
    assert info.status == "failed" and "without the required option 'role'" in info.error


def test_a_target_module_with_a_syntax_error_is_a_clear_plugin_error(on_path):
    (on_path / "syntax_bad_mod.py").write_text("def f(:\n")
    reg = Registration(kind="env", name="bad", target="syntax_bad_mod:Env", plugin="p")
    with pytest.raises(PluginError, match=r"failed while importing 'syntax_bad_mod': SyntaxError.*line 1"):
        reg.load()


def test_disabled_plugin_is_listed_but_not_loaded(on_path):
    write_module(on_path, "good_plugin", GOOD_PLUGIN)
    manager = PluginManager(autoload=False, extra_modules=["good_plugin"], disabled=["good_plugin"])
    assert manager.get_plugin("good_plugin").status == "disabled"
    assert ("env", "maze") not in manager.registry


def test_unknown_name_suggests_and_lists_and_points_to_package():
    registry = Registry()
    for name in ("frozen_lake", "sokoban"):
        registry.add(Registration(kind="env", name=name, target=f"x:{name}", plugin="p"))
    with pytest.raises(UnknownComponentError) as err:
        registry.get("env", "sokobn", config_key="custom_envs.Box.env_type")
    message = str(err.value)
    assert "custom_envs.Box.env_type" in message and "Did you mean 'sokoban'" in message
    assert "Installed envs: frozen_lake, sokoban" in message
    with pytest.raises(UnknownComponentError, match="pip install roll-env-webshop"):
        registry.get("env", "webshop")
    with pytest.raises(UnknownComponentError, match="pip install roll-strategy-vllm"):
        Registry().get("strategy", "vllm")


def test_bad_target_and_missing_requirement_messages():
    registry = Registry()
    with pytest.raises(PluginError, match="must look like"):
        registry.add(Registration(kind="env", name="x", target="no_colon", plugin="p"))
    reg = Registration(kind="strategy", name="fast", target="not_installed_lib_xyz.mod:Cls", plugin="p",
                       requires=("not-installed-lib-xyz>=1",))
    with pytest.raises(PluginError, match="pip install 'not-installed-lib-xyz>=1'"):
        reg.load()


def _build_package(root: Path) -> Path:
    """A throwaway third-party plugin distribution, as a user would write it."""
    pkg = root / "roll-env-maze"
    (pkg / "roll_env_maze").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=69"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "roll-env-maze"
        version = "1.2.3"
        dependencies = ["roll-core"]

        [project.entry-points.roll]
        maze = "roll_env_maze.plugin"
    """))
    (pkg / "roll_env_maze" / "__init__.py").write_text("")
    (pkg / "roll_env_maze" / "plugin.py").write_text(textwrap.dedent("""
        from roll_core.hookspecs import hookimpl

        @hookimpl
        def roll_register_envs(register):
            register("maze", "roll_env_maze.env:MazeEnv", tags=["Maze"], description="find the exit")
    """))
    return pkg


@pytest.mark.slow
def test_installed_third_party_package_is_discovered(tmp_path):
    """Build and pip-install a plugin distribution; roll finds it through its entry point."""
    pkg = _build_package(tmp_path)
    site = tmp_path / "site"
    subprocess.run([PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(pkg)], check=True)
    broken = tmp_path / "broken_site" / "roll_broken-0.1.dist-info"
    broken.mkdir(parents=True)  # an installed plugin whose module raises on import
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: roll-broken\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text("[roll]\nbroken = roll_broken_mod\n")
    (tmp_path / "broken_site" / "roll_broken_mod.py").write_text("import not_a_real_module_xyz\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(tmp_path / "broken_site")])}
    code = textwrap.dedent("""
        import json
        from roll_core.plugins import get_registry
        reg = get_registry()
        print(json.dumps([reg.get("env", "maze").distribution, reg.get("env", "Maze").name]))
    """)
    out = subprocess.run([PYTHON, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == ["roll-env-maze", "maze"]
    listing = subprocess.run([PYTHON, "-m", "roll_core", "plugins", "list", "--json"], env=env,
                             check=True, capture_output=True, text=True)
    rows = {p["name"]: p for p in json.loads(listing.stdout)}
    assert rows["maze"]["status"] == "ok" and rows["maze"]["version"] == "1.2.3"
    assert rows["broken"]["status"] == "failed" and "not_a_real_module_xyz" in rows["broken"]["error"]
    table = subprocess.run([PYTHON, "-m", "roll_core", "plugins", "list"], env=env, check=True,
                           capture_output=True, text=True).stdout
    assert "FAILED" in table and "maze" in table
    disabled = subprocess.run([PYTHON, "-m", "roll_core", "plugins", "list", "--json"], check=True,
                              env={**env, "ROLL_DISABLE_PLUGIN_AUTOLOAD": "1"}, capture_output=True,
                              text=True)
    assert "maze" not in {p["name"] for p in json.loads(disabled.stdout)}


def test_entry_point_modules_stay_import_light():
    """Importing every installed `roll` entry point must not import torch, ray or vllm."""
    code = textwrap.dedent("""
        import importlib, json, sys
        from importlib.metadata import entry_points
        import roll_core.plugins
        from roll_core.cli import build_parser
        build_parser()
        roll_core.plugins.get_registry()
        for ep in entry_points(group="roll"):
            try:
                importlib.import_module(ep.value)
            except Exception:
                pass
        print(json.dumps(sorted(m for m in ("torch", "ray", "vllm", "transformers") if m in sys.modules)))
    """)
    out = subprocess.run([PYTHON, "-c", code], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout) == []


def test_plugins_show_unknown_is_a_clean_error(capsys):
    from roll_core.cli import main

    assert main(["plugins", "show", "definitely_not_here"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("roll: error: No plugin or component called 'definitely_not_here'")
    assert "Traceback" not in err
