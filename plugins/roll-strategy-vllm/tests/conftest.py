"""Fixtures for the vLLM tests: tiny models with confident outputs, built locally (no download)."""

from __future__ import annotations

import dataclasses
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def _peaked(tmp_path_factory, seed: int) -> str:
    """roll-tiny shaped with a large init: confident, varied greedy outputs (the default init is
    nearly uniform, which would make token-equality tests vacuous)."""
    from roll_core.models import TINY_SPECS, build_tiny_model

    spec = dataclasses.replace(TINY_SPECS["roll-tiny"], name="roll-tiny-peaked", initializer_range=0.3)
    return build_tiny_model(spec, seed=seed, out_dir=str(tmp_path_factory.mktemp(f"peaked{seed}")))


@pytest.fixture(scope="session")
def peaked_dir(tmp_path_factory) -> str:
    return _peaked(tmp_path_factory, 1)


@pytest.fixture(scope="session")
def other_peaked_dir(tmp_path_factory) -> str:
    """Same architecture and tokenizer, other weights: the target of a weight update."""
    return _peaked(tmp_path_factory, 2)
