"""What every test directory shares: the test environment variables and the one Ray fixture."""

from __future__ import annotations

import logging
import os
import sys

import pytest

for _key, _value in {"RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
                     "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="module")
def ray_session():
    """roll's private local cluster (loopback only, as `roll run` starts it), 4 logical CPUs.

    Started on first use and shared by the modules after it; a test that shuts Ray down itself
    (``roll rollout`` does, the multi-node test starts its own) gets a fresh one in the next module.
    """
    ray = pytest.importorskip("ray")
    from roll_core.distributed.cluster import start_ray

    start_ray(num_cpus=4, log_to_driver=False, logging_level=logging.WARNING)
    yield ray


@pytest.fixture(scope="session", autouse=True)
def _ray_down_at_the_end():
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
