"""Pipeline tests: one local Ray cluster per session (helpers live in pipeline_helpers.py)."""

from __future__ import annotations

import os

import pytest

for _key, _value in {"RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
                     "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def ray_session():
    """roll's private local cluster (loopback only, as `roll run` starts it), shared by the session."""
    ray = pytest.importorskip("ray")
    from roll_core.cluster import start_ray

    started = start_ray(num_cpus=4, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
