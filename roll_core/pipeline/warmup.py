"""The supervised format warm start (``warmup_sft``), run once before the first RL step.

Why it exists: a randomly initialised model never writes ``<answer>Left</answer>``, so every
rollout earns the format penalty and RL has no signal to start from. The warm start trains on
demonstrations played by a model-free rollout policy through the very same rollout engine (same
prompts, chat template, token streams and response masks as RL), so it teaches the answer
format. With ``policy: random`` the demonstrated actions are uniformly random valid moves: the
warm-started model knows the format but not the task, and whatever it gains afterwards is RL's
doing. ``policy: scripted``, or a ``solver_fraction`` of the steps, uses the env's solver instead
(behaviour cloning: it teaches the task too; say so when reporting results).

How: a temporary ``actor_train`` worker with its own optimiser (constant ``learning_rate``)
trains ``steps`` steps and saves the model to ``output_dir/warmup_sft``; the run's train workers
are then built from that directory, so RL starts with a fresh optimiser (Adam moments of the
supervised phase would otherwise damp the first RL updates), and a reference model, when a KL
term is on, is the warm-started model. The demonstrations come from their own seed stream
(``seed + 1``): they are neither the RL training episodes nor the validation instances.
"""

from __future__ import annotations

import os
import time
from typing import Any

#: the warm start's env seeds are derived from the run's seed plus this offset
SEED_OFFSET = 1
#: where the warm-started model is saved, under output_dir
WARMUP_DIR = "warmup_sft"


def solver_step(step: int, fraction: float) -> bool:
    """Whether warm-start step ``step`` uses solver demonstrations: evenly spread, ``fraction`` of all."""
    return int((step + 1) * fraction) > int(step * fraction)


def warmup_config(config: Any) -> Any:
    """The config of the temporary worker: actor_train with the warm start's constant learning rate."""
    warmup = config.warmup_sft
    targs = config.actor_train.training_args
    targs = targs.model_copy(update={
        "learning_rate": warmup.learning_rate or targs.learning_rate,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "max_steps": warmup.steps,
    })
    return config.model_copy(update={"actor_train": config.actor_train.model_copy(update={"training_args": targs})})


def demonstration_config(config: Any) -> Any:
    """``config`` with the train envs ungrouped: every env plays an instance of its own.

    Groups exist for the RL baselines; for demonstrations they only repeat one instance
    ``group_size`` times (the solver plays a map the same way every time), so a batch of ``n``
    grouped trajectories would hold ``n / group_size`` distinct instances.
    """
    manager = config.train_env_manager
    n = manager.group_size
    update: dict[str, Any] = {"num_env_groups": manager.num_env_groups * n, "group_size": 1,
                              "group_size_redundancy": 0}
    if manager.num_groups_partition:
        update["num_groups_partition"] = [count * n for count in manager.num_groups_partition]
    return config.model_copy(update={"train_env_manager": manager.model_copy(update=update)})


def with_model(config: Any, path: str) -> Any:
    """``config`` with the policy's train-side workers (actor_train, reference) starting from ``path``."""
    updates = {}
    for section in ("actor_train", "reference"):
        worker = getattr(config, section)
        updates[section] = worker.model_copy(
            update={"model_args": worker.model_args.model_copy(update={"model_name_or_path": path})})
    return config.model_copy(update=updates)


def run_warmup(pipeline: Any) -> tuple[str, dict[str, float]]:
    """Run the warm start; returns the saved model directory and the last step's metrics."""
    import ray

    from roll_core.pipeline.agentic import batch_dict, trajectory_summary
    from roll_core.pipeline.placement import actor_options
    from roll_core.pipeline.workers import TrainWorker
    from roll_core.rollout import RolloutScheduler

    config = pipeline.config
    warmup = config.warmup_sft
    batch_size = warmup.batch_size or config.rollout_batch_size
    out_dir = os.path.join(config.output_dir, WARMUP_DIR)
    started = time.perf_counter()
    worker = ray.remote(TrainWorker).options(**actor_options(config, "actor_train", 0.0)).remote(
        warmup_config(config), "actor_train", num_training_steps=warmup.steps)
    demos = demonstration_config(config)
    policies = {name: RolloutScheduler.from_config(demos, "train", policy=name, seed=config.seed + SEED_OFFSET,
                                                    async_generation_ratio=0.0)
                for name in {warmup.policy, *(["scripted"] * (warmup.solver_fraction > 0))}}
    metrics: dict[str, float] = {}
    solver_steps = 0
    report_every = max(1, warmup.steps // 10)  # a progress line every tenth of the warm start
    try:
        pending = None
        for step in range(warmup.steps):
            use_solver = solver_step(step, warmup.solver_fraction)
            solver_steps += use_solver
            batch = policies["scripted" if use_solver else warmup.policy].get_batch(batch_size)
            data = batch_dict(batch)  # the next batch is played while this one trains
            rows = {k: data[k] for k in ("input_ids", "attention_mask", "response_mask")}
            if pending is not None:
                metrics = ray.get(pending)
                if step % report_every == 0:  # the step before this one is done
                    pipeline.tracker.print(f"warm start {step}/{warmup.steps} | response nll {metrics['sft/nll']:.3f} "
                                           f"| {time.perf_counter() - started:.0f}s")
            pending = worker.train_sft.remote(rows)
            demo = trajectory_summary(batch.trajectories, "sft_demos")
        if pending is not None:
            metrics = {**ray.get(pending), **demo}
        ray.get(worker.save_model.remote(out_dir))
    finally:
        for rollout in policies.values():
            rollout.shutdown()
        ray.kill(worker, no_restart=True)
    metrics["sft/solver_steps"] = float(solver_steps)
    metrics["time/warmup_sft"] = time.perf_counter() - started
    return out_dir, metrics
