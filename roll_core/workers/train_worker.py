"""Ray actors hosting the pipeline's train strategies: ``actor_train``, ``critic``, ``reference``.

One class, :class:`TrainWorker`, serves the three roles; what differs per role is a row of
:data:`roll_core.run.ROLES` (which worker section, which registration target, trainable or not), never an
if/elif on a config string. Each worker receives the resolved :class:`~roll_core.run.Run`
and builds its role's bound strategy registration; it checks that its plugin versions are the
driver's (:meth:`Run.check_plugins`) and looks nothing up by name.

Batches travel as plain dicts of CPU tensors (and per-row lists), put into the object store once
per step; each rank is told which rows are its own (:mod:`roll_core.distributed.dispatch`). The
loss functions are built here, in the worker, from the run's bound policy loss, so the driver
ships data and row indices, not closures. :class:`roll_core.workers.train_group.TrainGroup`
drives the ranks of a role together.
"""

from __future__ import annotations

import math
import os
from functools import partial
from typing import Any

from roll_core.errors import PluginError
from roll_core.registry import import_target
from roll_core.run import ROLES, Run, model_path


def strategy_class(run: Run, role: str) -> Any:
    """The strategy class of ``role``: the run's bound registration (its ``critic`` option for the critic)."""
    spec = ROLES[role]
    reg = run.strategy(role)
    if spec.target_option is None:
        return reg.load()
    target = reg.options.get(spec.target_option)
    if not target:
        raise PluginError(
            f"{role}.strategy_args.strategy_name is {reg.name!r}, but that strategy provides no "
            f"{spec.target_option} model (its registration has no {spec.target_option!r} option)."
        )
    return import_target(target)


def build_strategy(run: Run, role: str, *, num_training_steps: int | None = None):
    """Instantiate ``role``'s strategy from its worker section (in the calling process)."""
    spec = ROLES[role]
    config = run.config
    cls = strategy_class(run, role)
    overrides: dict[str, Any] = {}
    if spec.trainable:
        overrides["num_training_steps"] = num_training_steps
    else:
        overrides["trainable"] = False
    return cls.from_worker_config(getattr(config, role), model_path(config, role), int(config.seed),
                                  **overrides)


def _sft_loss(micro_batch, log_probs, _entropy, *, normalisers):
    """Negative log-likelihood of the response tokens, ``seq-mean-token-mean`` over the global batch."""
    from roll_core.algorithms import agg_loss, label_mask

    mask = label_mask(micro_batch).to(log_probs.dtype)
    loss = agg_loss(-log_probs, mask, "seq-mean-token-mean", normalisers=normalisers)
    return loss, {}


class TrainWorker:
    """One rank of a train role: a strategy in its own process (a Ray actor); see the module docstring.

    ``rank_env`` holds the rendezvous variables of its worker group (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` ...); with several ranks the process group is joined before the strategy is
    built, so DeepSpeed and Megatron find it ready and ``hf_train`` trains data-parallel.
    """

    def __init__(self, run: Run, role: str, *, num_training_steps: int | None = None,
                 num_threads: int | None = None, rank_env: dict[str, str] | None = None):
        import torch

        from roll_core.distributed.process_group import init_from_env

        self.init_error: Exception | None = None
        self.role = role
        try:
            run.check_plugins(f"{role} worker")
            if num_threads:
                torch.set_num_threads(int(num_threads))
            init_from_env(rank_env)
            self.run = run
            self.config = run.config
            self.policy_loss = run.policy_loss.load() if role == "actor_train" else None
            self.strategy = build_strategy(run, role, num_training_steps=num_training_steps)
            self.dp_rank, self.dp_size = self.strategy.data_parallel()
        except Exception as exc:  # kept for ready(): the driver then gets this exception, not "actor died"
            self.init_error = exc

    def ready(self) -> dict[str, Any]:
        """The rank's data-parallel coordinates; raises what went wrong while it was built."""
        from roll_core.distributed.process_group import rank

        if self.init_error is not None:
            raise self.init_error
        counts = self.strategy.parameter_counts() if hasattr(self.strategy, "parameter_counts") else None
        return {"role": self.role, "rank": rank(), "pid": os.getpid(), "mini_batch_size": self.mini_batch_size(),
                "dp_rank": self.dp_rank, "dp_size": self.dp_size, "collects": self.strategy.collects_outputs(),
                "parameters": counts}

    def mini_batch_size(self) -> int:
        return int(self.strategy.mini_batch_size)

    # -- forward passes ----------------------------------------------------------------------
    def compute_log_probs(self, batch: dict[str, Any], rows: list[int] | None = None):
        log_probs, _ = self.strategy.compute_log_probs(_rows(batch, rows))
        return log_probs

    def compute_ref_log_probs(self, batch: dict[str, Any], rows: list[int] | None = None):
        """The reference policy's log-probs from this actor (LoRA: adapters disabled)."""
        return self.strategy.compute_reference_log_probs(_rows(batch, rows))

    def compute_values(self, batch: dict[str, Any], rows: list[int] | None = None):
        return self.strategy.compute_values(_rows(batch, rows))

    # -- training ----------------------------------------------------------------------------
    def normalisers(self, batch: dict[str, Any]) -> Any:
        """The loss normalisers of one optimiser step (docs/algorithms.md §6.5): this rank's counts
        summed over the data-parallel ranks, which together hold the step's rows."""
        from roll_core.algorithms import Normalisers, label_mask
        from roll_core.algorithms.aggregation import norm_seq_len

        local = Normalisers.from_mask(label_mask(batch), norm_seq_len(self.config))
        if getattr(self, "dp_size", 1) <= 1:
            return local
        import torch
        import torch.distributed as dist

        counts = torch.tensor([local.num_tokens, local.num_seqs], dtype=torch.float64)
        dist.all_reduce(counts, group=self.strategy.data_parallel_group())
        return Normalisers(float(counts[0]), float(counts[1]), local.seq_len)

    def train_actor(self, batch: dict[str, Any], plan: list[list[int]], *, epochs: int,
                    old_log_probs_here: bool = False) -> dict[str, float]:
        """One optimiser step per entry of ``plan`` (this rank's rows of each step, ``epochs`` passes
        planned by the driver); mean metrics. pi_old (docs/algorithms.md §6.1) is the batch's
        ``old_log_probs`` when the driver sent them; with ``old_log_probs_here`` this rank computes
        them itself, before its first update, for the rows that train after it (:meth:`_old_log_probs`);
        rows without them (one step in all, or the first step's rows) take their own forward's
        detached log-probs, so their ratio is exactly 1. Where the driver sent no pi_old, the
        sampler's gap to it, ``train_infer/logprob_abs_diff``, is measured here."""
        from roll_core.algorithms import label_mask, make_actor_loss_fn

        needs_entropy = float(self.config.entropy_loss_coef) > 0  # a full-vocabulary softmax per token
        gap = _Gap() if "old_log_probs" not in batch and "infer_log_probs" in batch else None
        metrics: dict[str, float] = {}
        first = None
        if old_log_probs_here and "old_log_probs" not in batch:
            batch, first, metrics = self._old_log_probs(batch, plan, epochs, gap)

        def step(mini):
            base = make_actor_loss_fn(self.config, self.normalisers(mini), loss_variant=self.policy_loss)

            def loss_fn(micro, log_probs, entropy):
                if "old_log_probs" not in micro:
                    micro = {**micro, "old_log_probs": log_probs.detach()}
                    if gap is not None and "infer_log_probs" in micro:
                        gap.add(micro["old_log_probs"], micro["infer_log_probs"], label_mask(micro))
                return base(micro, log_probs, entropy)

            loss_fn.needs_entropy = needs_entropy
            return self.strategy.train_step(mini, loss_fn)

        out = {**self._steps(batch, plan, step, prefix="actor/", first=first), **metrics}
        if gap is not None and gap.tokens:
            out["train_infer/logprob_abs_diff"] = gap.mean
        return out

    def _old_log_probs(self, batch: dict[str, Any], plan: list[list[int]], epochs: int, gap: _Gap | None):
        """``(batch with old_log_probs, the first step's batch, metrics)``: pi_old from one forward of
        the rows that train after this rank's first update. The first step's rows need none: before
        that update the policy is pi_old, so their own forward is it (the step a one-step run takes),
        and the forward TRL and ROLL spend on them is saved. With several epochs a row comes back
        after updates, so every row gets one (and the first step uses them too)."""
        import time

        import torch

        from roll_core.algorithms import label_mask

        later = sorted({r for rows in (plan if epochs > 1 else plan[1:]) for r in rows})
        if not later:
            return batch, None, {}
        started = time.perf_counter()
        rows = _rows(batch, later)
        log_probs, _ = self.strategy.compute_log_probs(rows)
        if gap is not None:
            gap.add(log_probs, rows["infer_log_probs"], label_mask(rows))
        old = torch.zeros(batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1, dtype=log_probs.dtype)
        old[torch.tensor(later, dtype=torch.long)] = log_probs
        first = None if epochs > 1 else _rows(batch, plan[0])
        return {**batch, "old_log_probs": old}, first, {"time/old_logp": time.perf_counter() - started}

    def train_critic(self, batch: dict[str, Any], plan: list[list[int]], *, epochs: int = 1) -> dict[str, float]:
        """Value regression on ``returns`` (§6.6), one optimiser step per entry of ``plan``."""
        from roll_core.algorithms import make_critic_loss_fn

        def step(mini):
            return self.strategy.train_step(mini, make_critic_loss_fn(self.config, self.normalisers(mini)))

        return self._steps(batch, plan, step, prefix="critic/")

    def train_sft(self, batch: dict[str, Any], plan: list[list[int]] | None = None, *, epochs: int = 1
                  ) -> dict[str, float]:
        """One optimiser step of supervised learning on the response tokens (the format warm start)."""
        from functools import partial

        rows = _rows(batch, plan[0] if plan else None)
        loss_fn = partial(_sft_loss, normalisers=self.normalisers(rows))
        metrics = self.strategy.train_step(rows, loss_fn)
        # the loss function reports each micro-batch's share; the step's NLL is their sum
        return {"sft/nll": metrics["loss"], "sft/grad_norm": metrics["grad_norm"], "sft/lr": metrics["lr"]}

    def _steps(self, batch, plan, step, *, prefix: str, first: dict[str, Any] | None = None) -> dict[str, float]:
        """``step`` on each planned mini-batch of ``batch`` (``first``, when given, is the first one)."""
        sums: dict[str, float] = {}
        for i, rows in enumerate(plan):
            metrics = step(first if i == 0 and first is not None else _rows(batch, rows))
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        out = {}
        for key, value in sums.items():
            name = key if "/" in key else prefix + key
            out[name] = value / max(len(plan), 1)
        out[prefix + "optimizer_steps"] = float(len(plan))
        return {k: v for k, v in out.items() if math.isfinite(v)}

    # -- weights and checkpoints ----------------------------------------------------------------
    def export_weights(self) -> dict[str, Any]:
        return self.strategy.export_weights()

    def export_weights_ref(self, *, adapter: bool = False, with_base: bool = False,
                           targets: list[Any] | None = None) -> list[Any] | None:
        """``[ObjectRef]`` of this rank's exported weights on rank 0 (None elsewhere): the inference
        workers fetch them from the object store; the driver only passes the reference on.
        ``adapter``: the LoRA adapter (with the base weights when ``with_base``) for an engine that
        serves adapters natively, instead of merged weights. ``targets``: the engines'
        :class:`~roll_core.workers.weight_handoff.Locality`; then the reference is of a
        :class:`~roll_core.workers.weight_handoff.WeightHandoff` (shared memory or CUDA IPC where an
        engine shares this node or GPU, the object store elsewhere)."""
        import ray

        from roll_core.distributed.process_group import rank, world_size

        if targets is None or adapter:
            # every rank: collective under ZeRO-3
            weights = self.strategy.export_adapter(with_base=with_base) if adapter else self.strategy.export_weights()
            return [ray.put(weights)] if rank() == 0 else None
        from roll_core.workers.weight_handoff import HandoffWriter

        if world_size() > 1:  # the export may be collective: every rank takes part, rank 0 hands it over
            host = self.strategy.export_weights()
            host_weights, device_weights = (lambda: host), None
        else:
            device_weights = getattr(self.strategy, "device_weights", None)
            host_weights = partial(_host_weights, self.strategy, device_weights)
        if rank() != 0:
            return None
        if getattr(self, "handoff_writer", None) is None:
            self.handoff_writer = HandoffWriter()
        return [ray.put(self.handoff_writer.build(self.locality(), targets, host_weights, device_weights))]

    def locality(self) -> Any:
        """This rank's :class:`~roll_core.workers.weight_handoff.Locality` (node and device)."""
        from roll_core.workers.weight_handoff import current_locality

        return current_locality(getattr(self.strategy, "device", None))

    def release_handoff_device(self) -> int:
        """Free the weight handoff's flat GPU buffer once the engines have loaded from it (bytes freed;
        the next sync makes it again). The ``/dev/shm`` file stays, overwritten in place."""
        writer = getattr(self, "handoff_writer", None)
        return writer.release_device() if writer is not None else 0

    def close_handoff(self) -> None:
        """Remove the weight handoff's shared-memory file and GPU buffer (before the actor goes)."""
        writer = getattr(self, "handoff_writer", None)
        if writer is not None:
            writer.close()

    def save_checkpoint(self, path: str) -> None:
        self.strategy.save_checkpoint(path)

    def save_model(self, path: str) -> str:
        """The weights as a model directory other workers can start from (written atomically)."""
        import shutil

        from roll_core.distributed.process_group import barrier, rank

        tmp = path + ".tmp"
        if rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        barrier()
        self.strategy.save_model(tmp)
        barrier()
        if rank() == 0:
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
        barrier()
        return path

    def load_checkpoint(self, path: str) -> None:
        self.strategy.load_checkpoint(path)

    def offload(self) -> None:
        self.strategy.offload()

    def reload(self) -> None:
        self.strategy.reload()


def _host_weights(strategy: Any, device_weights: Any) -> Any:
    """The weights in host memory for a handoff: on CPU the live ones (the handoff copies them at
    once, so no export copy is needed), else the strategy's exported copies."""
    live = device_weights() if device_weights is not None else None
    if live is not None and all(t.device.type == "cpu" for t in live.values()):
        return live
    return strategy.export_weights()


class _Gap:
    """Running mean of |pi_old - pi_infer| over the trained tokens (``train_infer/logprob_abs_diff``),
    the driver's metric (:func:`roll_core.algorithms.corrections.apply_train_infer_correction`) summed
    over the micro-batches it is taken in."""

    def __init__(self):
        self.total, self.tokens = 0.0, 0.0

    def add(self, old: Any, infer: Any, mask: Any) -> None:
        """``old`` detached, ``infer`` and ``mask`` (:func:`~roll_core.algorithms.label_mask`) of one shape."""
        from roll_core.algorithms.masking import masked_sum

        self.total += float(masked_sum((old - infer).abs(), mask))
        self.tokens += float(mask.sum())

    @property
    def mean(self) -> float:
        return self.total / self.tokens


def _rows(batch: dict[str, Any], rows: list[int] | None) -> dict[str, Any]:
    """``batch``'s rows ``rows`` (all of it for ``None``), in that order."""
    if rows is None:
        return batch
    import torch

    from roll_core.distributed.dispatch import take_rows

    return take_rows(batch, torch.tensor(rows, dtype=torch.long), len(batch["input_ids"]))
