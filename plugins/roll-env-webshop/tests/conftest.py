"""Shared fixtures: one env per test (cheap: the catalogue and index are process-wide)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def env():
    from roll_env_webshop.env import WebShopEnv

    return WebShopEnv()


@pytest.fixture(scope="session")
def generator():
    """scripts/generate_catalog.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("generate_catalog", PACKAGE_ROOT / "scripts" / "generate_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
