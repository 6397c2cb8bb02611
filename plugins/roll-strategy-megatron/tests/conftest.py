"""Fixtures for the Megatron tests: tiny Qwen2 models built in memory (no download)."""

from __future__ import annotations

import os

import pytest
from _megatron_helpers import tiny_qwen2

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def qwen2(request):
    return tiny_qwen2(tie=request.param)
