"""Rollouts: what a training step learns from, in three jobs, one subpackage each.

* :mod:`.engine` -- the agentic engine: env managers (Ray actors) playing whole env groups, the
  group queue, the driver's :class:`RolloutScheduler`, trajectories -> training batches.
* :mod:`.agents` -- OpenAI-API agent code played as an env, through :mod:`roll_core.gateway`.
* :mod:`.rlvr` -- prompts -> sampled responses -> per-domain verifiable rewards.
* :mod:`.contract` -- the one contract between a training pipeline and its rollout.
* :mod:`.build` -- envs and agents built from a run's bindings (the :class:`~roll_core.run.Run`
  only describes them).

The inference workers and the generate scheduler they sit behind are in :mod:`roll_core.workers`.
Names are imported lazily so that importing this package pulls in neither torch nor ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RolloutScheduler": "roll_core.rollout.engine.scheduler",
    "RolloutTimeout": "roll_core.rollout.engine.scheduler",
    "RolloutError": "roll_core.rollout.engine.scheduler",
    "init_ray": "roll_core.rollout.engine.scheduler",
    "RolloutBatch": "roll_core.rollout.engine.batch",
    "build_batch": "roll_core.rollout.engine.batch",
    "RolloutSpec": "roll_core.rollout.engine.spec",
    "EnvSpec": "roll_core.rollout.engine.spec",
    "rollout_spec": "roll_core.rollout.engine.spec_from_run",
    "TrainingRollout": "roll_core.rollout.contract",
    "StepBatch": "roll_core.rollout.contract",
    "AgenticRollout": "roll_core.rollout.engine.agentic_rollout",
    "RLVRRollout": "roll_core.rollout.rlvr.rlvr_rollout",
    "TURN_POLICIES": "roll_core.rollout.engine.turn_policies",
    "rollout_metrics": "roll_core.rollout.engine.metrics",
    "AgentTask": "roll_core.rollout.agents.agent",
    "AgentResult": "roll_core.rollout.agents.agent",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'roll_core.rollout' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
