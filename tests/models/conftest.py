"""Fixtures for model tests: one model cache per test session (shared with tests/strategies)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def roll_cache(tmp_path_factory) -> str:
    """A model cache dir for this session; the same path in every test directory."""
    path = tmp_path_factory.getbasetemp() / "roll-cache"
    path.mkdir(exist_ok=True)
    return str(path)


@pytest.fixture(scope="session")
def tiny_dir(roll_cache) -> str:
    from roll_core.models import resolve_pretrain

    return resolve_pretrain("roll-tiny", roll_cache, seed=0)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and on shared 2-core machines torch's default of one
    thread per core oversubscribes the CPU (OpenMP spin-waits make steps 10-50x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
