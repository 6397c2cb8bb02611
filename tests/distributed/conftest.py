"""One local Ray cluster for the worker-group tests (4 logical CPUs: ranks are CPU processes)."""

from __future__ import annotations

import os

import pytest

for _key, _value in {"RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
                     "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", include_dashboard=False, num_cpus=4, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
