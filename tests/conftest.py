"""What every test directory shares: the test environment variables and the Ray fixtures."""

from __future__ import annotations

import logging
import os
import sys
import time

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


@pytest.fixture
def actor_gone(ray_session):
    """``actor_gone(call)``: whether ``call()``'s actor is dead, waiting up to 30 s for Ray to say so."""
    ray = ray_session

    def gone(call) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                ray.get(call(), timeout=5)
            except ray.exceptions.RayActorError:
                return True
            time.sleep(0.05)
        return False

    return gone


@pytest.fixture
def kill_actor(ray_session, actor_gone):
    """``kill_actor(actor, probe)``: kill a Ray actor and return once Ray reports it dead.

    ``ray.kill`` returns before the actor is gone, so calls made right after it may still be served
    (CI once saw a "killed" reward worker score four samples); ``probe`` names one of its methods.
    """

    def kill(actor, probe: str) -> None:
        ray_session.kill(actor, no_restart=True)
        assert actor_gone(getattr(actor, probe).remote), f"the actor was killed 30 s ago and still answers {probe}()"

    return kill


@pytest.fixture(scope="session", autouse=True)
def _ray_down_at_the_end():
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
