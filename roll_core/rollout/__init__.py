"""Env-level asynchronous rollout on Ray: env managers, group queue, generation scheduling, batches.

The pipelines use a :class:`~roll_core.rollout.contract.TrainingRollout` (agentic: an
:class:`AgenticRollout` over a :class:`RolloutScheduler`; RLVR: :class:`RLVRRollout`) and, with a model as the policy, a :class:`GenerateScheduler` in front of the
inference workers (``update_weights``). Names are imported lazily so that importing this package
pulls in neither torch nor ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "RolloutScheduler": "roll_core.rollout.scheduler",
    "RolloutTimeout": "roll_core.rollout.scheduler",
    "RolloutError": "roll_core.rollout.scheduler",
    "init_ray": "roll_core.rollout.scheduler",
    "RolloutBatch": "roll_core.rollout.batch",
    "build_batch": "roll_core.rollout.batch",
    "RolloutSpec": "roll_core.rollout.spec",
    "EnvSpec": "roll_core.rollout.spec",
    "rollout_spec": "roll_core.rollout.from_config",
    "GenerateScheduler": "roll_core.rollout.generate_scheduler",
    "Generation": "roll_core.rollout.infer_worker",
    "start_generation": "roll_core.rollout.infer_worker",
    "TrainingRollout": "roll_core.rollout.contract",
    "StepBatch": "roll_core.rollout.contract",
    "AgenticRollout": "roll_core.rollout.agentic",
    "RLVRRollout": "roll_core.rollout.rlvr",
    "InferWorker": "roll_core.rollout.infer_worker",
    "Trajectory": "roll_core.rollout.trajectory",
    "Turn": "roll_core.rollout.trajectory",
    "ChatCodec": "roll_core.rollout.chat",
    "POLICIES": "roll_core.rollout.policies",
    "rollout_metrics": "roll_core.rollout.metrics",
    "AgentTask": "roll_core.rollout.agents",
    "AgentResult": "roll_core.rollout.agents",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'roll_core.rollout' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
