"""The agentic pipeline: multi-turn env trajectories, trained by the shared loop (:mod:`.base`).

What is agentic here: the batches come from env-level asynchronous rollouts of the train env
manager (:class:`roll_core.rollout.engine.agentic_rollout.AgenticRollout`), validation is greedy play of the val
env manager, and the warm start plays demonstrations in the envs.

Asynchronous training (``async_generation_ratio: k > 0``): the env loops and the inference workers
keep generating while the driver computes log-probs and advantages and the trainer trains; the
rollout admits at most k batches of groups ahead, stops an episode as soon as its oldest turn is
more than k versions behind the newest weights, and serves only groups whose oldest turn is within
k versions of the weights being trained (docs/architecture.md; roll_core.rollout.engine.admission). Weight
sync and validation pause generation. Per step it reports the staleness of the trained turns
(``rollout/staleness/*``), stale work dropped (``rollout/dropped_trajectories/stale``), and how
much generation overlapped the training phases (``time/generation_overlap``,
``rollout/turns_during_training``). ``k = 0`` is the synchronous pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roll_core.pipeline.base import TrainingLoop

if TYPE_CHECKING:
    from roll_core.run import Run


class AgenticPipeline(TrainingLoop):
    """See the module docstring."""

    NAME = "agentic"
    NON_TRAIN_KEYS = ("env_metrics", "end_reason")

    def __init__(self, run: Run, *, stream=None):
        super().__init__(run, stream=stream)
        self.val_rollout: Any = None

    def title(self) -> str:
        c = self.config
        return f"{c.exp_name}: {c.adv_estimator} on {', '.join(c.train_env_manager.tags)}"

    def start_rollouts(self) -> None:
        """The inference workers (from ``pretrain``) behind the train and validation rollouts."""
        from roll_core.rollout.engine.agentic_rollout import AgenticRollout
        from roll_core.rollout.engine.scheduler import RolloutScheduler
        from roll_core.rollout.engine.spec_from_run import batch_size_from_config

        c = self.config
        self.generation = self.start_generation()
        scheduler = RolloutScheduler.from_run(self.resolved, "train", generate_scheduler=self.generation.scheduler)
        self.train_rollout = AgenticRollout(scheduler, batch_size_from_config(c, "train"))
        if c.eval_steps > 0:
            self.val_rollout = RolloutScheduler.from_run(self.resolved, "val",
                                                         generate_scheduler=self.generation.scheduler)

    def rollouts(self) -> list[Any]:
        return [r for r in (self.train_rollout, self.val_rollout) if r is not None]

    def has_validation(self) -> bool:
        return self.config.eval_steps > 0 and self.val_rollout is not None

    def validate(self, step: int, prefix: str = "val") -> dict[str, float]:
        """One pass over the validation instances (the same ones every time), greedy."""
        from roll_core.rollout.engine.agentic_rollout import trajectory_summary

        # generation ahead of training waits for validation
        held = [self.train_rollout] if self.config.async_generation_ratio > 0 else []
        with self.paused(held):
            batch = self.val_rollout.get_batch()
        metrics = trajectory_summary(batch.trajectories, prefix)
        metrics.update({f"{prefix}/{k}": v for k, v in batch.metrics.items() if k.startswith("env/")})
        return metrics

    def warm_start(self) -> tuple[str, dict[str, float]]:
        """The ``warmup_sft`` phase on env demonstrations (see :mod:`roll_core.pipeline.warmup`)."""
        from roll_core.pipeline.warmup import run_warmup

        return run_warmup(self)
