"""Where the pipeline's workers run: GPU fractions from ``device_mapping``, CPU processes otherwise.

roll's built-in strategies are single-process, so each role is one Ray actor. On a cluster with
GPUs, a role whose ``device_mapping`` names devices reserves GPUs; roles whose mappings overlap
(ROLL's usual colocation of actor_train and actor_infer on the same GPUs) share them through
fractional ``num_gpus``. Without GPUs (or without a ``device_mapping``) every worker is a CPU
process with ``num_gpus=0``, and Ray hides the GPUs from it.

Every worker also gets the run's environment variables: the config's ``system_envs`` and the
worker section's, plus glibc malloc settings that make CPU training 2-3x faster
(docs/dependencies.md: without them every step's large temporary buffers are mmapped and returned).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

#: keep big training buffers in the heap instead of mmap-ing and unmapping them every step
FAST_MALLOC_ENV: dict[str, str] = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}
#: what worker processes need regardless of the config (no per-load progress bars in the run's output)
BASE_WORKER_ENV: dict[str, str] = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0.0))


def gpu_shares(config: Any, roles: Iterable[str], *, gpus_available: float) -> dict[str, float]:
    """``num_gpus`` per role: 0 on CPU; else its devices divided among the roles sharing them."""
    roles = list(roles)
    if gpus_available <= 0:
        return dict.fromkeys(roles, 0.0)
    mappings = {role: list(getattr(config, role).device_mapping or []) for role in roles}
    users = Counter(device for mapping in mappings.values() for device in set(mapping))
    shares = {}
    for role, mapping in mappings.items():
        if not mapping:
            shares[role] = 0.0
            continue
        # one process drives the role: its share of the most crowded of its devices
        shares[role] = min(float(gpus_available), min(1.0 / users[d] for d in mapping))
    return shares


def worker_env(config: Any, section: str | None = None) -> dict[str, str]:
    """Environment variables of a worker process (see the module docstring)."""
    env = {**BASE_WORKER_ENV, **FAST_MALLOC_ENV}
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ROLL_CACHE_DIR", "ROLL_PLUGINS",
                "ROLL_DISABLE_PLUGINS", "ROLL_DISABLE_PLUGIN_AUTOLOAD", "PYTHONHASHSEED"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.update({str(k): str(v) for k, v in (config.system_envs or {}).items()})
    if section is not None:
        env.update({str(k): str(v) for k, v in (getattr(config, section).system_envs or {}).items()})
    return env


def actor_options(config: Any, role: str, num_gpus: float) -> dict[str, Any]:
    """Ray actor options of a train/infer worker of ``role``."""
    return {
        "num_cpus": 0,  # CPU workers would otherwise serialise behind Ray's CPU count on small machines
        "num_gpus": num_gpus,
        "runtime_env": {"env_vars": worker_env(config, role)},
        "max_restarts": 0,
    }
