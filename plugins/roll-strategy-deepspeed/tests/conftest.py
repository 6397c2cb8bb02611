"""Fixtures for the DeepSpeed tests: one tiny model per session (the strategy picks DeepSpeed's CPU
accelerator itself when there is no CUDA)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def ds_tiny_dir(tmp_path_factory) -> str:
    """roll-tiny (seed 0), built once into this session's cache."""
    from roll_core.models import resolve_pretrain

    return resolve_pretrain("roll-tiny", str(tmp_path_factory.mktemp("ds-cache")), seed=0)
