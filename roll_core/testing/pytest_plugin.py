"""pytest fixtures for roll plugin authors (loaded automatically wherever roll-core is installed).

Import-light on purpose: pytest loads this module in every session of an environment that has
roll-core, so the helpers are imported only when a fixture is used.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def roll_check_env():
    """:func:`roll_core.testing.check_env`: ``roll_check_env("my_env")`` raises on any contract break."""
    from roll_core.testing import check_env

    return check_env


@pytest.fixture
def roll_check_agent():
    """:func:`roll_core.testing.check_agent`: ``roll_check_agent("my_agent")`` plays it with its expert."""
    from roll_core.testing import check_agent

    return check_agent


@pytest.fixture
def roll_check_strategy():
    """:func:`roll_core.testing.check_strategy`: ``roll_check_strategy("my_backend", missing=("lib",))``."""
    from roll_core.testing import check_strategy

    return check_strategy


@pytest.fixture
def roll_check_reward():
    """:func:`roll_core.testing.check_reward`: ``roll_check_reward("my_reward")`` raises on any contract break."""
    from roll_core.testing import check_reward

    return check_reward


@pytest.fixture
def roll_smoke_rollout():
    """:func:`roll_core.testing.smoke_rollout`: play random or scripted episodes, get stats."""
    from roll_core.testing import smoke_rollout

    return smoke_rollout


@pytest.fixture
def roll_registry():
    """A registry rebuilt from the installed plugins (and ``ROLL_PLUGINS``) for this test only."""
    from roll_core.plugins import get_registry, reset_plugin_manager

    reset_plugin_manager()
    yield get_registry()
    reset_plugin_manager()
