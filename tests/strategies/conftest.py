"""Fixtures for strategy tests: tiny models built once per session in a temporary cache."""

from __future__ import annotations

import dataclasses
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


@pytest.fixture(scope="session")
def peaked_dir(tmp_path_factory) -> str:
    """roll-tiny shaped, with a large init: confident, varied greedy outputs (a random tiny model
    at the default init is nearly uniform and repeats one token, which would make equality
    tests vacuous)."""
    from roll_core.models import TINY_SPECS, build_tiny_model

    spec = dataclasses.replace(TINY_SPECS["roll-tiny"], name="roll-tiny-peaked", initializer_range=0.3)
    return build_tiny_model(spec, seed=1, out_dir=str(tmp_path_factory.mktemp("peaked")))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and on shared 2-core machines torch's default of one
    thread per core oversubscribes the CPU (OpenMP spin-waits make steps 10-50x slower)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
