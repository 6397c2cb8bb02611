"""A train role's ranks, called like one worker (ROLL calls this a Cluster, verl a WorkerGroup).

:class:`TrainGroup` starts one :class:`~roll_core.workers.train_worker.TrainWorker` per rank in its
bundle, gives each the rendezvous variables (rank 0's node and a free port there), and offers the
pipeline the worker's methods:

* forward passes (:meth:`compute_log_probs`, :meth:`compute_values`): the batch is put into the
  object store once; every data-parallel rank computes its balanced share of the rows; results
  come back in row order;
* training (:meth:`train_actor`, :meth:`train_critic`, :meth:`train_sft`): the driver plans every
  optimiser step (which rows each rank takes, :func:`~roll_core.distributed.dispatch.plan_training`)
  and the ranks step together; metrics are reduced;
* collective calls (checkpoints, offload/reload) run on every rank; :meth:`export_weights_ref`
  leaves the weights in the object store (put by rank 0) for the inference workers to fetch,
  without a copy through the driver.

A rank that dies (its node lost, OOM-killed) makes every call raise :class:`RankLost`, which names
the rank and its node; the pipeline stops with it (``resume_from_checkpoint`` continues).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roll_core.distributed.dispatch import (
    adjust_rows,
    forward_shares,
    plan_training,
    reduce_metrics,
    token_lengths,
)
from roll_core.errors import RollError

if TYPE_CHECKING:
    from roll_core.run import Run


class RankLost(RollError):
    """A rank of a worker group died; the run cannot go on without it."""

    def __init__(self, role: str, rank: int, node: str, cause: str):
        self.role, self.rank, self.node, self.cause = role, rank, node, cause
        super().__init__(f"{role} rank {rank} (on node {node}) is gone: {cause}")


class TrainGroup:
    """See the module docstring."""

    def __init__(self, run: Run, role: str, placement: Any, *, num_training_steps: int | None = None,
                 num_threads: int | None = None, start_timeout_s: float = 900.0):
        import ray

        from roll_core.distributed.process_group import node_address, rank_env
        from roll_core.workers.train_worker import TrainWorker

        self.role = role
        self.config = run.config
        self.placed = placement.ranks[role]
        world = len(self.placed)
        first = self.placed[0]
        address = ray.remote(node_address).options(
            num_cpus=0, scheduling_strategy=placement.actor_options(self.config, first)["scheduling_strategy"])
        master_addr, master_port = ray.get(address.remote())
        remote = ray.remote(TrainWorker)
        self.actors = [
            remote.options(**placement.actor_options(self.config, p)).remote(
                run, role, num_training_steps=num_training_steps, num_threads=num_threads,
                rank_env=rank_env(p.rank, world, p.local_rank, p.local_world_size, master_addr, master_port))
            for p in self.placed
        ]
        self.info = self._get([a.ready.remote() for a in self.actors], timeout=start_timeout_s)
        self.dp_size = int(self.info[0]["dp_size"])
        #: data-parallel rank -> the rank that returns that shard's results
        self.collectors = {int(i["dp_rank"]): r for r, i in enumerate(self.info) if i["collects"]}

    @property
    def world_size(self) -> int:
        return len(self.actors)

    @property
    def mini_batch_size(self) -> int:
        return int(self.info[0]["mini_batch_size"])

    # -- forward passes -----------------------------------------------------------------------
    def compute_log_probs(self, data: dict[str, Any]) -> Any:
        return self._map_rows("compute_log_probs", data)

    def compute_ref_log_probs(self, data: dict[str, Any]) -> Any:
        """Reference log-probs from the actor's own ranks (LoRA: the base with adapters disabled)."""
        return self._map_rows("compute_ref_log_probs", data)

    def compute_values(self, data: dict[str, Any]) -> Any:
        return self._map_rows("compute_values", data)

    def _map_rows(self, method: str, data: dict[str, Any]) -> Any:
        import ray
        import torch

        shares = forward_shares(token_lengths(data), self.dp_size)
        ref = ray.put(data)
        calls = [getattr(a, method).remote(ref, shares[int(i["dp_rank"])]) for a, i in zip(self.actors, self.info)]
        results = self._get(calls)
        first = results[self.collectors[0]]
        out = torch.zeros((len(data["input_ids"]), *first.shape[1:]), dtype=first.dtype)
        for dp_rank, rank in self.collectors.items():
            out[torch.tensor(shares[dp_rank], dtype=torch.long)] = results[rank]
        return out

    # -- training -----------------------------------------------------------------------------
    def train_actor(self, data: dict[str, Any], *, epochs: int, shuffle_seed: int,
                    old_log_probs_here: bool = False) -> dict[str, float]:
        """The actor's optimiser steps; ``old_log_probs_here``: each rank computes pi_old for its own
        rows before its first update (:meth:`TrainWorker.train_actor`), instead of the driver first."""
        return self._train("train_actor", data, epochs=epochs, shuffle_seed=shuffle_seed,
                           old_log_probs_here=old_log_probs_here)

    def train_critic(self, data: dict[str, Any], *, shuffle_seed: int) -> dict[str, float]:
        return self._train("train_critic", data, epochs=1, shuffle_seed=shuffle_seed)

    def train_sft(self, data: dict[str, Any]) -> dict[str, float]:
        """One optimiser step of supervised learning on all of ``data``'s rows."""
        return self._train("train_sft", data, epochs=1, shuffle_seed=0, one_step=True)

    def _train(self, method: str, data: dict[str, Any], *, epochs: int, shuffle_seed: int,
               one_step: bool = False, **options: Any) -> dict[str, float]:
        import ray
        import torch

        from roll_core.distributed.dispatch import take_rows

        n = len(data["input_ids"])
        rows = adjust_rows(n, self.dp_size, self.config.batch_adjust_mode, seed=shuffle_seed) \
            if self.dp_size > 1 else list(range(n))
        if len(rows) != n:  # copied or dropped rows to split evenly (batch_adjust_mode)
            data = take_rows(data, torch.tensor(rows, dtype=torch.long), n)
        plans = plan_training(token_lengths(data), parts=self.dp_size, mini_batch_size=0 if one_step else
                              self.mini_batch_size, epochs=epochs, shuffle_seed=shuffle_seed)
        ref = ray.put(data)
        calls = [getattr(a, method).remote(ref, plans[int(i["dp_rank"])], epochs=epochs, **options)
                 for a, i in zip(self.actors, self.info)]
        results = self._get(calls)
        weights = [sum(len(step) for step in plans[int(i["dp_rank"])]) for i in self.info]
        metrics = reduce_metrics(results, weights)
        if len(rows) != n:
            metrics[f"{self.role}/adjusted_rows"] = float(len(rows) - n)
        return metrics

    # -- weights, checkpoints, memory -----------------------------------------------------------
    def export_weights_ref(self, *, adapter: bool = False, with_base: bool = False,
                           targets: list[Any] | None = None) -> list[Any]:
        """``[ObjectRef]`` of the HF-named weights (or the LoRA adapter), put by rank 0 (every rank
        takes part: ZeRO-3 gathers); with ``targets`` (the engines' localities) of a weight handoff
        that uses shared memory or CUDA IPC where it can (:mod:`roll_core.workers.weight_handoff`)."""
        refs = self._call("export_weights_ref", adapter=adapter, with_base=with_base, targets=targets)
        return refs[0]

    def release_handoff_device(self) -> int:
        """After the engines loaded a sync's handoff: free its flat GPU buffer (CUDA IPC; the model's
        size of GPU memory a colocated engine needs); bytes freed."""
        return sum(self._call("release_handoff_device"))

    @property
    def parameter_counts(self) -> tuple[int, int] | None:
        """``(trainable, total)`` parameters of one rank's model, when the backend reports them."""
        counts = self.info[0].get("parameters")
        return tuple(counts) if counts else None

    def save_checkpoint(self, path: str) -> None:
        self._call("save_checkpoint", path)

    def load_checkpoint(self, path: str) -> None:
        self._call("load_checkpoint", path)

    def save_model(self, path: str) -> str:
        return self._call("save_model", path)[0]

    def offload(self) -> None:
        self._call("offload")

    def reload(self) -> None:
        self._call("reload")

    def shutdown(self) -> None:
        import ray

        # the weight handoff's /dev/shm file outlives a killed actor: removed first (best effort)
        ray.wait([a.close_handoff.remote() for a in self.actors], num_returns=len(self.actors), timeout=10)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self._get([getattr(a, method).remote(*args, **kwargs) for a in self.actors])

    def _get(self, calls: Sequence[Any], timeout: float | None = None) -> list[Any]:
        """The results of one call per rank, in rank order.

        Results are taken as they finish, so a rank that died is noticed at once: the others may be
        blocked in a collective with it, which would otherwise hang until the collective's timeout.
        """
        import time

        import ray

        calls = list(calls)
        pending, deadline = list(calls), None if timeout is None else time.monotonic() + timeout
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                raise RollError(f"{self.role}: {len(pending)} of {len(calls)} ranks did not answer within "
                                f"{timeout:.0f}s.")
            try:
                ray.get(done[0])
            except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError) as exc:
                rank = calls.index(done[0])
                raise RankLost(self.role, rank, self.placed[rank].node_ip, _first_line(exc)) from exc
            except ray.exceptions.RayTaskError as exc:
                dead = self._dead_ranks()  # a peer's death can surface first as a collective's error
                if dead:
                    rank, cause = dead[0]
                    raise RankLost(self.role, rank, self.placed[rank].node_ip, cause) from exc
                raise exc.as_instanceof_cause() from None
        return ray.get(calls)

    def dead_ranks(self, wait_s: float = 5.0) -> list[tuple[int, str]]:
        """``(rank, cause)`` of every rank whose actor is gone (the pipeline's stop message names them all)."""
        return self._dead_ranks(wait_s)

    def _dead_ranks(self, wait_s: float = 5.0) -> list[tuple[int, str]]:
        """Ranks whose actor is gone (a live rank blocked in a collective just does not answer)."""
        import ray

        pings = [a.ready.remote() for a in self.actors]
        done, _ = ray.wait(pings, num_returns=len(pings), timeout=wait_s)
        dead = []
        for ref in done:
            try:
                ray.get(ref)
            except (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError) as exc:
                dead.append((pings.index(ref), _first_line(exc)))
            except Exception:  # noqa: BLE001  # alive, it only answered with an error
                pass
        return sorted(dead)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
