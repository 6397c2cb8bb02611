"""The supervised format warm start (``warmup_sft``), run once before the first RL step.

Why it exists: a randomly initialised model never writes ``<answer>Left</answer>``, so every
rollout earns the format penalty and RL has no signal to start from. The warm start trains on
demonstrations played by a model-free rollout policy through the very same rollout engine (same
prompts, chat template, token streams and response masks as RL), so it teaches the answer
format. With ``policy: random`` the demonstrated actions are uniformly random valid moves: the
warm-started model knows the format but not the task, and whatever it gains afterwards is RL's
doing. ``policy: scripted``, or a ``solver_fraction`` of the steps, uses the env's solver instead
(behaviour cloning: it teaches the task too; say so when reporting results). ``slip_rate`` makes
the solver slip now and then (a random move, kept out of the loss), so the clone also sees states
off the solver's path and the way back from them.

How: a temporary ``actor_train`` worker with its own optimiser (constant ``learning_rate``)
trains ``steps`` steps and saves the model to ``output_dir/warmup_sft``; the run's train workers
are then built from that directory, so RL starts with a fresh optimiser (Adam moments of the
supervised phase would otherwise damp the first RL updates), and a reference model, when a KL
term is on, is the warm-started model. The demonstrations come from their own seed stream
(``seed + 1``): they are neither the RL training episodes nor the validation instances.

RLVR has no envs to play: its demonstrations are training prompts answered with a reference
answer (:func:`prompt_demonstrations`). ``random`` answers each prompt with the reference of a
random row of its domain (the format and the answer distribution, not the task); ``scripted``
with its own (plain supervised fine-tuning).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from roll_core.errors import ConfigError

#: the warm start's env seeds are derived from the run's seed plus this offset
SEED_OFFSET = 1
#: where the warm-started model is saved, under output_dir
WARMUP_DIR = "warmup_sft"


def reached_nll(recent: Sequence[float], stop_nll: float | None) -> bool:
    """Whether the warm start may stop: a full window of pre-update NLLs whose mean is <= ``stop_nll``."""
    return (stop_nll is not None and len(recent) == getattr(recent, "maxlen", len(recent))
            and sum(recent) / len(recent) <= stop_nll)


def solver_step(step: int, fraction: float) -> bool:
    """Whether warm-start step ``step`` uses solver demonstrations: evenly spread, ``fraction`` of all."""
    return int((step + 1) * fraction) > int(step * fraction)


#: demonstration policy -> its options from the ``warmup_sft`` section
POLICY_OPTIONS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "random": lambda warmup: {},
    "scripted": lambda warmup: {"slip_rate": warmup.slip_rate} if warmup.slip_rate else {},
}


def warmup_config(config: Any) -> Any:
    """The config of the temporary worker: actor_train with the warm start's learning rate and schedule."""
    warmup = config.warmup_sft
    targs = config.actor_train.training_args
    targs = targs.model_copy(update={
        "learning_rate": warmup.learning_rate or targs.learning_rate,
        "lr_scheduler_type": warmup.lr_scheduler_type,
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
    """The agentic warm start: demonstrations played in the envs; returns the model directory and metrics."""
    from roll_core.rollout.engine.agentic_rollout import batch_dict, trajectory_summary
    from roll_core.rollout.engine.scheduler import RolloutScheduler

    config = pipeline.config
    warmup = config.warmup_sft
    batch_size = warmup.batch_size or config.rollout_batch_size
    demos = pipeline.resolved.replace_config(demonstration_config(config))
    policies = {name: RolloutScheduler.from_run(demos, "train", policy=name, seed=config.seed + SEED_OFFSET,
                                                async_generation_ratio=0.0, policy_options=POLICY_OPTIONS[name](warmup))
                for name in {warmup.policy, *(["scripted"] * (warmup.solver_fraction > 0))}}

    def demonstrations(use_solver: bool) -> tuple[dict[str, Any], dict[str, float]]:
        batch = policies["scripted" if use_solver else warmup.policy].get_batch(batch_size)
        data = batch_dict(batch)
        turns = [turn for traj in batch.trajectories for turn in traj.turns]
        return ({k: data[k] for k in ("input_ids", "attention_mask", "response_mask")},
                {**trajectory_summary(batch.trajectories, "sft_demos"),
                 "sft_demos/masked_turns": sum(not turn.trainable for turn in turns) / max(len(turns), 1)})

    try:
        return train_warmup(pipeline, demonstrations)
    finally:
        for rollout in policies.values():
            rollout.shutdown()


def prompt_demonstrations(rows: Sequence[Any], *, eos_id: int, tokenizer: Any, batch_size: int, seed: int,
                          probs: Mapping[str, float] | None = None):
    """The RLVR warm start's demonstrations: ``demonstrations(use_solver) -> (rows, metrics)``.

    Each demonstration is a training prompt, drawn like RL's (a :class:`PromptSampler` with the
    run's ``domain_interleave_probs``, its own seed), followed by a reference answer and
    end-of-sequence. ``use_solver`` (policy ``scripted``) answers with the prompt's own reference:
    supervised fine-tuning, the task itself. Otherwise (policy ``random``) the answer is the
    reference of a random row of the same domain: the answer format and the data's answer
    distribution, with nothing about which answer goes with which prompt.
    """
    import random

    from roll_core.data import PromptSampler
    from roll_core.rollout.engine.batch import collate

    usable = [row for row in rows if row.reference is not None]
    if not usable:
        raise ConfigError("warmup_sft needs reference answers: no training row has one (set "
                          "actor_train.data_args.response or give the rows a solution/answer column).")
    by_domain: dict[str, list[Any]] = {}
    for row in usable:
        by_domain.setdefault(row.domain, []).append(row)
    sampler = PromptSampler(usable, seed=seed, probs=probs)
    rng = random.Random(seed)
    answer_ids: dict[str, list[int]] = {}

    def answer(text: str) -> list[int]:
        if text not in answer_ids:
            answer_ids[text] = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [eos_id]
        return answer_ids[text]

    def demonstrations(use_solver: bool) -> tuple[dict[str, Any], dict[str, float]]:
        seqs, matches = [], 0
        for row in sampler.sample(batch_size):
            source = row if use_solver else rng.choice(by_domain[row.domain])
            matches += source.reference == row.reference
            ids = answer(source.reference)
            prompt = list(row.prompt_ids)
            seqs.append((prompt + ids, [0] * len(prompt) + [1] * len(ids), [0.0] * (len(prompt) + len(ids))))
        data = collate(seqs, [0.0] * len(seqs), 0)
        return ({k: data[k] for k in ("input_ids", "attention_mask", "response_mask")},
                {"sft_demos/correct": matches / len(seqs)})

    return demonstrations


def train_warmup(pipeline: Any, demonstrations: Callable[[bool], tuple[dict[str, Any], dict[str, float]]]
                 ) -> tuple[str, dict[str, float]]:
    """Train ``warmup_sft.steps`` supervised steps on ``demonstrations(use_solver)`` and save the model.

    Returns the saved model directory and the last step's metrics.
    """
    import collections
    import concurrent.futures

    config = pipeline.config
    warmup = config.warmup_sft
    out_dir = os.path.join(config.output_dir, WARMUP_DIR)
    started = time.perf_counter()
    # actor_train's ranks, on its devices, with the warm start's optimiser settings
    group = pipeline.train_group("actor_train", pipeline.resolved.replace_config(warmup_config(config)),
                                 num_training_steps=warmup.steps)
    steps = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="warmup")  # train while demos are made
    metrics: dict[str, float] = {}
    demo: dict[str, float] = {}
    solver_steps = 0
    report_every = max(1, warmup.steps // 10)  # a progress line every tenth of the warm start
    recent: collections.deque[float] = collections.deque(maxlen=warmup.stop_window)
    taken = 0
    try:
        pending = None
        for step in range(warmup.steps):
            check = getattr(pipeline, "check_interrupt", None)
            if check is not None:  # Ctrl-C: stop after the step in flight (nothing is saved)
                check(f"during the warm start, after {step} of {warmup.steps} supervised steps")
            use_solver = solver_step(step, warmup.solver_fraction) or warmup.policy == "scripted"
            rows, demo = demonstrations(use_solver)  # the next batch is made while this one trains
            if pending is not None:
                metrics = pending.result()
                recent.append(metrics["sft/nll"])
                if step % report_every == 0:  # the step before this one is done
                    pipeline.tracker.print(f"warm start {step}/{warmup.steps} | response nll {metrics['sft/nll']:.3f} "
                                           f"| {time.perf_counter() - started:.0f}s")
                if reached_nll(recent, warmup.stop_nll):
                    pending = None
                    break
            solver_steps += use_solver
            taken += 1
            pending = steps.submit(group.train_sft, rows)
        if pending is not None:
            metrics = {**pending.result(), **demo}
        group.save_model(out_dir)
    finally:
        steps.shutdown(wait=True)
        group.shutdown()
    metrics["sft/solver_steps"] = float(solver_steps)
    metrics["sft/steps"] = float(taken)
    metrics["time/warmup_sft"] = time.perf_counter() - started
    return out_dir, metrics
