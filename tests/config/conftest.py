"""Shared fixtures of the config tests: fixture paths and the throwaway plugin module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FIXTURES = HERE.parent / "fixtures"
# cfgtest_plugin must be importable by name: registrations point at "cfgtest_plugin:GridEnv"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def roll_registry():
    """A registry with ROLL's component names, independent of what is installed."""
    from cfgtest_plugin import roll_names_registry

    return roll_names_registry()
