"""Plugin registration: found through the entry point, lazy, import-light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from roll_core.plugins import PluginManager


def test_entry_point_registers_webshop():
    manager = PluginManager(autoload=True, disabled=[], extra_modules=[])
    info = manager.get_plugin("webshop")
    assert info is not None and info.status == "ok" and info.distribution == "roll-env-webshop"
    reg = manager.registry.get("env", "webshop")
    assert manager.registry.find_by_tag("env", "WebShop") == [reg]
    assert reg.target == "roll_env_webshop.env:WebShopEnv" and set(reg.tags) == {"WebShop", "WebShopEnv"}
    from roll_env_webshop.env import WebShopEnv

    assert reg.load() is WebShopEnv


def test_entry_module_import_is_light():
    code = (
        "import sys, roll_env_webshop.plugin\n"
        "heavy = [m for m in ('numpy', 'bm25s', 'roll_env_webshop.catalog', 'roll_env_webshop.env', 'torch',"
        " 'PIL') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("env_config", [None, {"goal_split": "test", "max_steps": 8}])
def test_check_env(env_config):
    from roll_core.testing import check_env

    report = check_env("webshop", env_config)
    assert report.ok and not report.notes, str(report)
