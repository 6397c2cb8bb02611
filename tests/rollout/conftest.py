"""Fixtures of the rollout tests: the tiny ChatML tokenizer, the test envs (Ray: tests/conftest.py)."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
#: plugin module with the test envs (Counting, Flaky, Slow, Broken), importable by Ray workers too
TEST_ENVS = "roll_rollout_testenvs"

if HERE not in sys.path:
    sys.path.insert(0, HERE)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tokenizer():
    """roll's tiny byte-level BPE tokenizer with its ChatML template (built once, cached on disk)."""
    from roll_core.models.policy_tokenizer import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def codec(tokenizer):
    from roll_core.chat.codec import ChatCodec

    return ChatCodec(tokenizer)


@pytest.fixture(scope="session")
def test_registry():
    """A registry with the installed plugins plus the test envs."""
    from roll_core.plugins import PluginManager

    return PluginManager(extra_modules=[TEST_ENVS]).registry
