"""The training loop both pipelines share (docs/architecture.md, "Data flow of one step").

One step::

    batch = rollout.next_batch(step)                 agentic: env trajectories; RLVR: scored prompts
    ref log-probs (reference, only with a KL term)
    old log-probs (actor_train, when more than one optimiser step or a KL term needs them)
    values (critic, only for estimators registered with needs_critic)
    rewards -> advantages (the run's bound estimator, via algorithms.compute_advantages)
    critic update, actor update (ppo_epochs x mini-batches, the run's bound policy loss)
    weight sync actor_train -> inference workers (version += 1, generation paused meanwhile)
    metrics -> validation every eval_steps -> checkpoint every save_steps

:class:`TrainingLoop` holds all of that, plus the warm start's place, resume and Ctrl-C handling;
the agentic and RLVR pipelines are siblings that say where batches and validation come from
(:meth:`start_rollouts`, :meth:`validate`, :meth:`has_validation`, :meth:`warm_start`,
:meth:`title`). The rollout behind ``self.train_rollout`` honours
:class:`roll_core.rollout.contract.TrainingRollout`.

Everything is built from the resolved :class:`~roll_core.run.Run`: workers receive it, the
estimator and loss are its bound components; no name is looked up again.

Determinism (what makes ``resume_from_checkpoint`` continue exactly on CPU): rows are put in a
canonical order before anything reads them, every shuffle is seeded by the step, the rollout's
counters and the KL controller are part of the checkpoint, and the strategies restore their
optimiser and RNG state.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from roll_core.errors import ConfigError, RollError
from roll_core.pipeline import checkpoint as ckpt
from roll_core.pipeline import trained_record
from roll_core.pipeline.stop import LostRank, stop_message
from roll_core.pipeline.tracking import MetricsTracker
from roll_core.workers.train_group import RankLost

if TYPE_CHECKING:
    from roll_core.run import Run

logger = logging.getLogger("roll.pipeline")

#: the learning-curve file written under logging_dir
CURVE_FILE = "learning_curve.png"
#: the best validation's actor (``save_best``), under output_dir, with BEST_INFO saying which step it is
BEST_DIR = "best"
BEST_INFO = "best.json"
#: the resolved config saved with the run, under logging_dir
CONFIG_FILE = "config.yaml"
#: where every rank runs (role -> ranks with node and devices), under logging_dir
PLACEMENT_FILE = "placement.json"


class RunInterrupted(Exception):
    """Ctrl-C before the first RL step (warm start, step-0 validation); the message says where."""


class Timer:
    """Wall time per phase of one step, in insertion order (the progress line prints them)."""

    def __init__(self):
        self.phases: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start


class TrainingLoop:
    """See the module docstring. Subclasses set :attr:`NAME` and :attr:`NON_TRAIN_KEYS`."""

    #: pipeline name in messages
    NAME = "training"
    #: per-row batch entries the train workers never read (kept out of what is shipped to them)
    NON_TRAIN_KEYS: tuple[str, ...] = ()

    def __init__(self, run: Run, *, stream=None):
        from roll_core.algorithms import kl_controller_from_config

        self.resolved = run
        self.config = config = run.config
        self.estimator = run.estimator.load()
        self.needs_critic = run.needs_critic
        self.use_reference = run.uses_reference
        self.max_steps = int(config.max_steps)  # >= 1: validation refuses ROLL's -1 (no limit)
        self.step = 0
        self.kl_ctrl = kl_controller_from_config(config)
        self.stream = stream
        self.tracker = MetricsTracker(config.logging_dir, title=self.title(), stream=stream,
                                      track_with=config.track_with, tracker_kwargs=config.tracker_kwargs,
                                      run_name=config.exp_name, config=config.model_dump(mode="json"))
        self.workers: dict[str, Any] = {}  # role -> TrainGroup
        self.placement: Any = None
        self.generation: Any = None
        self.train_rollout: Any = None
        self.warmup_dir: str | None = None  # the warm-started model the train workers start from
        self.last_batch: Any = None
        self._stop_requested = False
        self._saved_on_stop: str | None = None
        self._base_synced = False  # the inference engines hold the train workers' base model
        self._run_id = uuid.uuid4().hex[:12]  # this run's entry in placement.json
        self._lockstep_timeouts_seen = 0.0  # the generate scheduler's count at the last step

    # -- what a pipeline provides ------------------------------------------------------------------
    def title(self) -> str:
        """The learning curve's title."""
        raise NotImplementedError

    def start_rollouts(self) -> None:
        """The inference workers and ``self.train_rollout`` (and whatever validation needs)."""
        raise NotImplementedError

    def has_validation(self) -> bool:
        """Whether this run validates (at step 0 and every ``eval_steps``)."""
        raise NotImplementedError

    def validate(self, step: int, prefix: str = "val") -> dict[str, float]:
        """The validation metrics; ``{prefix}/success`` is what the learning curve draws."""
        raise NotImplementedError

    def warm_start(self) -> tuple[str, dict[str, float]]:
        """The ``warmup_sft`` phase; returns the saved model directory and its metrics."""
        raise NotImplementedError

    def rollouts(self) -> list[Any]:
        """Every rollout generation must pause for (weight sync)."""
        return [self.train_rollout] if self.train_rollout is not None else []

    # -- setup ---------------------------------------------------------------------------------
    def num_optimizer_steps(self) -> int:
        """Optimiser steps of the whole run, for LR schedules."""
        c = self.config
        explicit = c.actor_train.training_args.max_steps
        if explicit and explicit > 0:
            return int(explicit)
        targs = c.actor_train.training_args
        mini = targs.per_device_train_batch_size * targs.gradient_accumulation_steps
        per_step = c.ppo_epochs * max(1, math.ceil(c.rollout_batch_size / mini))
        return self.max_steps * per_step

    def warmup_steps(self) -> int:
        warmup = self.config.warmup_sft
        return int(warmup.steps) if warmup is not None and warmup.steps > 0 else 0

    def start_placement(self) -> None:
        """Reserve the devices of every role (one placement group), say where each rank runs, and
        write ``placement.json`` (see :mod:`roll_core.distributed`)."""
        from roll_core.distributed.layout import build_layout
        from roll_core.distributed.placement import Placement, cluster_gpus

        if self.placement is not None:
            return
        roles = [*self.resolved.train_roles, "actor_infer", *self.extra_roles()]
        layout = build_layout(self.config, roles, on_gpus=cluster_gpus() > 0)
        if layout.on_gpus and self.config.async_generation_ratio > 0 and layout.colocated("actor_train", "actor_infer"):
            raise ConfigError("async_generation_ratio > 0 generates while the trainer trains, but actor_train and "
                              "actor_infer share GPUs (their device_mapping overlaps): give them separate devices, "
                              "or set async_generation_ratio: 0.")
        self.placement = Placement.create(layout)
        for line in self.placement.describe():
            self.tracker.print(f"  {line}")
        self.save_placement()

    def save_placement(self, actors: dict[str, list[dict[str, Any]]] | None = None) -> str:
        """``placement.json``: this run's ranks and (once started) the other actors roll placed; a
        resumed run keeps the layouts of the runs before it under ``earlier`` (see
        :func:`~roll_core.distributed.placement.write_placement`)."""
        from roll_core.distributed.placement import write_placement

        return write_placement(os.path.join(self.config.logging_dir, PLACEMENT_FILE), self.placement.to_json(),
                               actors or {}, run_id=self._run_id, resumed=bool(self.config.resume_from_checkpoint))

    def placed_actors(self) -> dict[str, list[dict[str, Any]]]:
        """Where the actors beside the ranks run: the generate scheduler and each rollout's group
        queue (on the driver's node, which must outlive the run) and env managers (spread; recorded
        where they started: Ray restarts one elsewhere when its node is lost)."""
        import ray

        driver = {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address()}
        actors: dict[str, list[dict[str, Any]]] = {}
        if self.generation is not None:
            actors["generate_scheduler"] = [driver]
        for rollout in self.rollouts_to_close():
            scheduler = getattr(rollout, "scheduler", None)
            info, spec = getattr(scheduler, "worker_info", None), getattr(scheduler, "spec", None)
            if info is None or spec is None:
                continue
            actors[f"{spec.mode}_group_queue"] = [driver]
            actors[f"{spec.mode}_env_managers"] = [
                {"worker": int(i["worker"]), "node_id": i["node_id"], "groups": list(i["groups"])} for i in info]
        return actors

    def extra_roles(self) -> list[str]:
        """Layout roles besides the train and inference ones (RLVR: reward worker groups)."""
        return []

    def start_generation(self) -> Any:
        """The run's inference workers (``actor_infer``, one per rank) behind one generate scheduler."""
        from roll_core.workers.infer_group import start_generation

        self.start_placement()
        return start_generation(self.resolved, placement=self.placement)

    def start_train_workers(self) -> None:
        """actor_train, and the critic and reference when the run needs them: one group of ranks each."""
        self.workers.update({role: self.train_group(role, self.resolved) for role in self.resolved.train_roles})
        self.tracker.print(self.parameters_line())

    def parameters_line(self) -> str:
        """``actor_train: 921.6K of 135.4M parameters trainable (0.68%; LoRA rank 8 ...)``."""
        lora = self.resolved.lora
        counts = self.workers["actor_train"].parameter_counts
        what = lora.describe() if lora is not None else "full fine-tuning"
        if counts is None:
            return f"actor_train: {what}"
        trainable, total = counts
        line = (f"actor_train: {_count(trainable)} of {_count(total)} parameters trainable "
                f"({100.0 * trainable / max(total, 1):.2f}%; {what})")
        if self.resolved.reference_from_actor:
            line += "; reference log-probs from actor_train with adapters disabled (no reference workers)"
        return line

    def train_group(self, role: str, run: Run, *, num_training_steps: int | None = None) -> Any:
        """The ranks of ``role`` in their bundles, as one :class:`~roll_core.workers.train_group.TrainGroup`."""
        from roll_core.workers.train_group import TrainGroup

        self.start_placement()
        threads = self.config.system_envs.get("OMP_NUM_THREADS")
        return TrainGroup(run, role, self.placement, num_threads=int(threads) if threads else None,
                          num_training_steps=num_training_steps or self.num_optimizer_steps())

    @property
    def colocated(self) -> bool:
        """actor_train and actor_infer take turns on the same GPUs (offload/reload around phases)."""
        layout = self.placement.layout if self.placement is not None else None
        return bool(layout and layout.on_gpus and layout.colocated("actor_train", "actor_infer"))

    def use_model(self, path: str) -> None:
        """Train from ``path`` from now on (the warm-started model): the config workers receive changes."""
        from roll_core.pipeline.warmup import with_model

        self.config = with_model(self.config, path)
        self.resolved = self.resolved.replace_config(self.config)

    def shutdown(self) -> None:
        for rollout in self.rollouts_to_close():
            rollout.shutdown()
        if self.generation is not None:
            self.generation.shutdown()
        for group in self.workers.values():
            group.shutdown()
        self.workers.clear()
        if self.placement is not None:
            self.placement.remove()
        self.tracker.close()

    def rollouts_to_close(self) -> list[Any]:
        return self.rollouts()

    # -- the run -------------------------------------------------------------------------------
    def run_header(self) -> str:
        from roll_core.distributed.cluster import worker_priority_note

        c = self.config
        priority = worker_priority_note()
        return (f"roll: {self.NAME} run {c.exp_name!r}: {c.adv_estimator} + {c.actor_train.pg_variant}, "
                f"{self.max_steps} steps | plugins: {self.resolved.plugin_summary()}"
                + (f" | {priority}" if priority else ""))

    def run(self) -> int:
        """Train ``max_steps`` steps (continuing a checkpoint when asked); returns an exit code."""
        c = self.config
        os.makedirs(c.logging_dir, exist_ok=True)
        self.resolved.save(os.path.join(c.logging_dir, CONFIG_FILE))
        self.tracker.print(self.run_header())
        resume = ckpt.resolve_resume_path(c.resume_from_checkpoint, c.output_dir)
        self.start_placement()
        self.start_rollouts()
        self.save_placement(self.placed_actors())
        interrupted = None
        try:
            with self._interrupt_guard():
                try:
                    if resume:
                        self.load(resume)
                        self.tracker.print(f"resumed from {resume} at step {self.step}")
                    else:
                        self.prepare()
                    # the steps after the checkpoint were trained by a run whose weights are lost
                    trained_record.truncate(c.logging_dir, self.step)
                    while self.step < self.max_steps and not self._stop_requested:
                        self.train_step()
                except RunInterrupted as stop:
                    interrupted = str(stop)
        except Exception as exc:
            try:
                lost, why = self.lost_ranks(exc)
            except Exception:  # noqa: BLE001  # the cluster cannot even say: the original error stands
                lost, why = [], ""
            if not lost:
                raise
            # the surviving ranks' errors (a collective with the lost one) would follow the message
            os.environ["RAY_IGNORE_UNHANDLED_ERRORS"] = "1"
            raise RollError(self.stop_message(lost, why)) from exc
        if self._stop_requested:  # say what was saved, after the guard saved it
            if self._saved_on_stop:
                self.tracker.print(f"stopped after step {self.step}; checkpoint saved: {self._saved_on_stop} "
                                   "(resume_from_checkpoint=true continues from it)")
            else:
                where = interrupted or f"after step {self.step}"
                self.tracker.print(f"stopped {where}; nothing was saved (no RL step had finished; the warm start "
                                   "is not checkpointed, so a new run starts it again)")
        self.finish()
        return 130 if self._stop_requested else 0

    def lost_ranks(self, exc: BaseException) -> tuple[list[LostRank], str]:
        """Every rank that is gone when ``exc`` stopped the loop, and why the run cannot go on; none
        when the run can (or ``exc`` has another cause). Inference workers fail over, so their loss
        stops the run only when none is left."""
        lost: list[LostRank] = []
        for role, group in self.workers.items():
            for rank, cause in group.dead_ranks():
                where = group.placed[rank]
                lost.append(LostRank(role, rank, where.node_id, where.node_ip, cause))
        if isinstance(exc, RankLost) and not any((r.role, r.rank) == (exc.role, exc.rank) for r in lost):
            where = self.workers[exc.role].placed[exc.rank] if exc.role in self.workers else None
            lost.append(LostRank(exc.role, exc.rank, where.node_id if where else "", exc.node, exc.cause))
        inference = self.generation.lost_ranks() if self.generation is not None else []
        no_inference = self.generation is not None and len(inference) == self.generation.world_size
        if not lost and not no_inference:
            return [], ""
        why = ("a lost training rank cannot be replaced mid-step" if lost
               else f"none of the {self.generation.world_size} actor_infer workers is left")
        lost += [LostRank("actor_infer", *rank) for rank in inference]
        return lost, why

    def stop_message(self, lost: list[LostRank], why: str) -> str:
        found = ckpt.list_checkpoints(self.config.output_dir)
        return stop_message(lost, step=self.step, why=why, checkpoint=found[-1] if found else None,
                            argv=self.resolved.argv)

    def check_interrupt(self, where: str) -> None:
        """Stop before the first RL step (the warm start, validation) when Ctrl-C was pressed."""
        if self._stop_requested and self.step == 0:
            raise RunInterrupted(where)

    def prepare(self) -> None:
        """Before step 1: the untrained model's validation, the optional warm start, step-0 validation."""
        if self.warmup_steps():
            if self.has_validation():
                metrics = self.validate(step=0, prefix="val_untrained")
                self.tracker.log(0, metrics)
                self.tracker.print(f"untrained model: val success {metrics['val_untrained/success']:.3f}")
                self.check_interrupt("after validating the untrained model")
            self.warmup_dir, metrics = self.warm_start()  # stops with RunInterrupted on Ctrl-C
            self.use_model(self.warmup_dir)
            self.tracker.log(0, metrics)
            solver, taken = int(metrics["sft/solver_steps"]), int(metrics["sft/steps"])
            mixed = 0 < solver < taken
            early = (f" (stopped early: mean response nll of the last {self.config.warmup_sft.stop_window} steps "
                     f"<= stop_nll {self.config.warmup_sft.stop_nll})" if taken < self.warmup_steps() else "")
            self.tracker.print(
                f"warm start: {taken} supervised steps{early} on {self.config.warmup_sft.policy}-policy "
                f"demonstrations{f' ({solver} of them played by the solver)' if mixed else ''} in "
                f"{metrics['time/warmup_sft']:.1f}s (response nll {metrics['sft/nll']:.3f})")
        self.start_train_workers()
        if self.warmup_dir:
            self.sync_weights(version=0)
        if self.has_validation():
            metrics = self.validate(step=0)
            self.tracker.log(0, metrics)
            self.tracker.print(self.tracker.progress_line(0, self.max_steps, metrics, {}))
            self.plot()
            self.keep_if_best(0)

    def train_step(self) -> dict[str, float]:
        """One pipeline step (see the module docstring); returns its metrics."""
        c = self.config
        step = self.step + 1
        timer = Timer()
        started = time.perf_counter()
        with timer("rollout"):
            data, metrics = self.collect(step)
        trained = trained_record.episodes(data)
        generated_before = self.generation.activity()  # generation from here to the sync overlaps training
        metrics.update(self.optimize(data, step, timer))
        generated_after = self.generation.activity()
        metrics["time/generation_overlap"] = generated_after["busy_s"] - generated_before["busy_s"]
        metrics["rollout/turns_during_training"] = generated_after["completed"] - generated_before["completed"]
        # failover (issue 35): live inference workers, and requests moved off lost ones so far
        metrics["rollout/inference_workers"] = generated_after["workers"]
        metrics["rollout/requeued_lost_requests"] = generated_after["requeued_lost"]
        metrics["rollout/inference_workers_rejoined"] = generated_after["rejoined"]
        # lock-step rounds that timed out since the last step (validation's included): a run that is
        # reproducible stops being so there, and says so in its progress line
        timeouts = generated_after["lockstep_timeouts"]
        metrics["rollout/lockstep_timeouts"] = timeouts - self._lockstep_timeouts_seen
        self._lockstep_timeouts_seen = timeouts
        with timer("sync"):
            self.sync_weights(version=step)
        self.step = step
        trained_record.append(c.logging_dir, step, step - 1, trained)

        if self.has_validation() and (step % c.eval_steps == 0 or step == self.max_steps):
            with timer("val"):
                metrics.update(self.validate(step=step))
        timings = {**timer.phases, "step": time.perf_counter() - started}
        metrics.update({f"time/{k}": v for k, v in timings.items()})
        if step % c.logging_steps == 0 or step == self.max_steps:
            self.tracker.log(step, metrics)
            self.tracker.print(self.tracker.progress_line(step, self.max_steps, metrics, timings))
        else:
            self.tracker.history.append({"step": float(step), **{k: float(v) for k, v in metrics.items()}})
        if "val/success" in metrics:  # the run's end is drawn by finish()
            self.plot()
            self.keep_if_best(step)
        if (c.save_steps > 0 and step % c.save_steps == 0) or step == self.max_steps:
            self.save()
        return metrics

    def collect(self, step: int) -> tuple[dict[str, Any], dict[str, float]]:
        """The step's training rows and its rollout metrics, from the rollout's contract."""
        batch = self.train_rollout.next_batch(step)
        self.last_batch = batch.items  # kept for inspection (tests, debugging); replaced every step
        return batch.data, batch.metrics

    def optimize(self, data: dict[str, Any], step: int, timer: Timer) -> dict[str, float]:
        """Log-probs, values, advantages, critic and actor updates on one batch; returns metrics."""
        c = self.config
        metrics: dict[str, float] = {}
        actor = self.workers["actor_train"]
        if self.colocated:  # the inference engine makes room on the GPUs it shares with training
            with timer("offload"):
                self.generation.offload()
                actor.reload()
        forward = {k: data[k] for k in ("input_ids", "attention_mask", "response_mask")}
        if self.use_reference:
            with timer("ref_logp"):
                if self.resolved.reference_from_actor:  # LoRA: the base model, adapters disabled
                    data["ref_log_probs"] = actor.compute_ref_log_probs(forward)
                else:
                    data["ref_log_probs"] = self.workers["reference"].compute_log_probs(forward)
        old_log_probs = self.old_log_probs_source(len(data["input_ids"]))
        if old_log_probs == "driver":
            with timer("old_logp"):
                data["old_log_probs"] = actor.compute_log_probs(forward)
        if self.needs_critic:
            with timer("values"):
                data["values"] = self.workers["critic"].compute_values(forward)
        with timer("advantages"):
            metrics.update(self.compute_advantages(data))
        train = {k: v for k, v in data.items() if k not in self.NON_TRAIN_KEYS}
        if self.needs_critic:
            with timer("critic"):
                metrics.update(self.workers["critic"].train_critic(train, shuffle_seed=step))
        if step > c.critic_warmup or not self.needs_critic:
            with timer("actor"):
                metrics.update(actor.train_actor(train, epochs=c.ppo_epochs, shuffle_seed=step,
                                                 old_log_probs_here=old_log_probs == "train_step"))
        return metrics

    def old_log_probs_source(self, rows: int) -> str | None:
        """Where pi_old comes from (docs/algorithms.md §6.1): ``"driver"`` when the advantages read it
        (the KL penalty against a reference, the train-inference correction), so actor_train computes
        it for every row first; ``"train_step"`` when only the ratio does and the step takes several
        optimiser steps (or recompute is asked for), so each rank computes it for the rows that train
        after its first update, in the same call (:meth:`TrainWorker.train_actor`); ``None`` for one
        optimiser step and no KL term: the first forward's detached log-probs are pi_old."""
        c = self.config
        if c.force_disable_old_logprobs_recompute:
            return None
        correction = c.train_infer_correction
        if self.use_reference or correction.is_weight.enabled or any(f.enabled for f in correction.filters):
            return "driver"
        targs = c.actor_train.training_args
        mini = targs.per_device_train_batch_size * targs.gradient_accumulation_steps
        several_steps = c.ppo_epochs > 1 or rows > mini
        return "train_step" if c.enable_old_logprobs_recompute or several_steps else None

    def compute_advantages(self, data: dict[str, Any]) -> dict[str, float]:
        """Rewards -> advantages (the run's estimator), then the optional train-inference correction."""
        from roll_core.algorithms import apply_train_infer_correction, compute_advantages

        outputs, metrics = compute_advantages(data, self.config, pipeline=self.NAME, kl_ctrl=self.kl_ctrl,
                                              estimator=self.estimator)
        data.update(outputs)
        if "old_log_probs" in data:
            updates, correction_metrics = apply_train_infer_correction(data, self.config)
            data.update(updates)
            metrics.update(correction_metrics)
        return metrics

    # -- weights, checkpoints --------------------------------------------------------------------
    @contextmanager
    def paused(self, rollouts: list[Any] | None = None):
        """Generation of ``rollouts`` (default: all) held for the duration."""
        rollouts = self.rollouts() if rollouts is None else rollouts
        for rollout in rollouts:
            rollout.pause()
        try:
            yield
        finally:
            for rollout in rollouts:
                rollout.resume()

    def sync_weights(self, version: int | None = None) -> None:
        """actor_train -> inference workers; generation is paused meanwhile."""
        version = self.step if version is None else version
        with self.paused():
            # lost inference workers are started again where the cluster has room; those up join here
            joining = self.generation.prepare_replacements()
            # stays in the object store; an engine serving LoRA natively gets the adapter (and, the
            # first time after a warm start changed the base, or for a joining worker, the base weights with it)
            adapter = self.resolved.syncs_adapters
            base_stale = bool(self.warmup_dir) and (not self._base_synced or joining > 0)
            # engines on the trainer's node (or GPU) get the weights through shared memory (or CUDA IPC)
            targets = None if adapter else self.generation.localities()
            refs = self.workers["actor_train"].export_weights_ref(
                adapter=adapter, with_base=adapter and base_stale, targets=targets)
            self._base_synced = True
            if self.colocated:  # training hands the GPUs back to the inference engine
                self.workers["actor_train"].offload()
                self.generation.reload()
            joined = self.generation.update_weights(refs, version)
            if targets and any(t.on_cuda for t in targets):  # loaded: the CUDA IPC buffer's GPU memory goes back
                self.workers["actor_train"].release_handoff_device()
            for rollout in self.rollouts():
                rollout.set_version(version)
        self.rejoined([("actor_infer", self.generation.describe_rank(rank)) for rank in joined]
                      + self.replace_lost_workers())

    def replace_lost_workers(self) -> list[tuple[str, str]]:
        """Other groups that fail over (RLVR: reward workers) take their replacements in at the
        weight sync; ``(role, "rank r on node ...")`` of each that rejoined."""
        return []

    def rejoined(self, ranks: list[tuple[str, str]]) -> None:
        """Say which lost ranks rejoined, and record where they run now in ``placement.json``."""
        if not ranks:
            return
        for role, where in ranks:
            self.tracker.print(f"{role} {where}: a replacement for the lost worker rejoined")
        if self.placement is not None:
            self.save_placement(self.placed_actors())

    def plot(self) -> str | None:
        return self.tracker.plot(os.path.join(self.config.logging_dir, CURVE_FILE))

    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kl_ctrl": self.kl_ctrl.state_dict(),
            "rollout": self.train_rollout.state_dict(),
            "tracker": self.tracker.state_dict(),
            "warmup_dir": self.warmup_dir,
            "exp_name": self.config.exp_name,
        }

    def save(self) -> str:
        """``output_dir/checkpoint-{step}``: actor (HF format + trainer state), critic, pipeline state."""
        c = self.config
        tmp = ckpt.begin(c.output_dir, self.step)
        self.workers["actor_train"].save_checkpoint(tmp)
        if self.needs_critic:
            self.workers["critic"].save_checkpoint(os.path.join(tmp, "critic"))
        path = ckpt.commit(tmp, self.state_dict(), keep_last=c.max_ckpt_to_keep or None)
        logger.info("saved %s", path)
        return path

    def keep_if_best(self, step: int) -> str | None:
        """Write the actor to ``output_dir/best`` when ``step``'s validation is the run's first best.

        Ties keep the earlier step (as the validation summary reports it); a resumed run compares with
        the history it restored, so the directory always holds the best of the whole run.
        """
        best = self.tracker.best()
        if not self.config.save_best or best is None or best[0] != step:
            return None
        path = os.path.join(self.config.output_dir, BEST_DIR)
        self.workers["actor_train"].save_model(path)
        with open(os.path.join(path, BEST_INFO), "w", encoding="utf-8") as f:
            json.dump({"step": step, "val/success": best[1]}, f)
        return path

    def load(self, path: str) -> None:
        """Start the train workers from ``path``'s run and restore everything it saved."""
        state = ckpt.load_state(path)
        self.warmup_dir = state.get("warmup_dir")
        if self.warmup_dir:  # the reference model (if any) is the warm-started one
            self.use_model(self.warmup_dir)
        self.start_train_workers()
        self.workers["actor_train"].load_checkpoint(path)
        if self.needs_critic:
            self.workers["critic"].load_checkpoint(os.path.join(path, "critic"))
        self.step = int(state["step"])
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        self.train_rollout.load_state_dict(state["rollout"])
        self.tracker.load_state_dict(state.get("tracker", {}))
        self.sync_weights(version=self.step)

    def finish(self) -> None:
        summary = self.tracker.validation_summary()
        if summary:
            self.tracker.print(summary)
        best, best_dir = self.tracker.best(), os.path.join(self.config.output_dir, BEST_DIR)
        if self.config.save_best and best is not None and os.path.isdir(best_dir):
            self.tracker.print(f"best model (validation success {best[1]:.2f} at step {best[0]}): {best_dir}")
        path = self.plot()
        if path:
            self.tracker.print(f"learning curve: {path}")

    # -- interruption ----------------------------------------------------------------------------
    @contextmanager
    def _interrupt_guard(self):
        """Ctrl-C finishes the running step, saves a checkpoint and stops; a second Ctrl-C aborts.

        Before the first RL step (warm start, step-0 validation) there is nothing to checkpoint:
        the warm start stops after its current supervised step (:meth:`check_interrupt`).
        """
        previous: Callable | int | None = None

        def handler(signum, frame):
            if self._stop_requested:
                raise KeyboardInterrupt
            self._stop_requested = True
            if self.step == 0:
                self.tracker.print("interrupt: stopping before the first RL step; there is nothing to "
                                   "checkpoint yet (Ctrl-C again to abort at once)")
            else:
                self.tracker.print("interrupt: finishing the current step, then saving a checkpoint "
                                   "(Ctrl-C again to abort without saving)")

        try:
            previous = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread: no signal handling
            previous = None
        try:
            yield
            if self._stop_requested and self.step > 0:
                self._saved_on_stop = self.save()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)


def _count(n: int) -> str:
    """``135.4M``, ``921.6K``, ``512``."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)
