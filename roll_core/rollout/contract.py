"""The one contract between a training pipeline and its rollout.

Agentic runs (env trajectories, :class:`roll_core.rollout.engine.agentic_rollout.AgenticRollout`) and RLVR runs
(prompts and verifiable rewards, :class:`roll_core.rollout.rlvr.rlvr_rollout.RLVRRollout`) serve the training
loop (:class:`roll_core.pipeline.base.TrainingLoop`) through the same methods, so the loop's
step, weight sync, validation pauses and checkpoints are written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class StepBatch:
    """What one training step trains on.

    ``data`` holds the training rows as one dict: ``input_ids``, ``attention_mask``,
    ``response_mask`` ``[B, L]``, ``infer_log_probs`` and ``token_versions`` (label-aligned), ``scores`` and the grouping
    keys the estimator reads, plus per-row lists; rows in a canonical order (independent of which
    env or request finished first). ``metrics`` are the rollout's metrics of the step; ``items``
    the trajectories (agentic) or samples (RLVR) the rows came from, kept for inspection.
    """

    data: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    items: Any = None


@runtime_checkable
class TrainingRollout(Protocol):
    """A rollout as the training loop uses it."""

    def next_batch(self, step: int) -> StepBatch:
        """The batch step ``step`` trains on (the policy is then version ``step - 1``)."""

    def pause(self) -> None:
        """Hold generation (weight sync, validation); work in flight finishes or is redone."""

    def resume(self) -> None:
        """Undo :meth:`pause`."""

    def set_version(self, version: int) -> None:
        """The policy version the inference workers now serve (staleness is measured from it)."""

    def state_dict(self) -> dict[str, Any]:
        """The rollout's part of a checkpoint (what makes a resumed run draw the same episodes)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`; call before the first :meth:`next_batch`."""

    def shutdown(self) -> None:
        """Stop generating and free the rollout's actors (idempotent)."""
