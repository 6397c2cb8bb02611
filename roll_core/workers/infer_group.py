"""``actor_infer``: its inference workers (:class:`InferWorker`) and the generate scheduler in front.

There is one way to start them, :func:`start_generation` (the pipelines and ``roll rollout`` both
use it): every worker is built from the run's bound ``actor_infer`` strategy with the *same* seed,
so with a locally built model every worker starts from the same weights and they serve one policy
from the first request on. Workers are created with ``max_concurrency=2`` so that ``abort`` runs
while ``generate`` is busy; strategies see aborts between decode steps.

A lost worker is failed over by the scheduler; at each weight sync the group starts a replacement
where the cluster has room again and the scheduler takes it in once it has loaded the weights
(:mod:`roll_core.distributed.replacement`). A sync asks the scheduler for the lost workers once (it
pings every worker), in :meth:`InferGroup.prepare_replacements`; the rest of that sync uses the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from roll_core.distributed.replacement import Replacements
from roll_core.workers.infer_worker import InferWorker

if TYPE_CHECKING:
    from roll_core.run import Run

#: seconds InferGroup.shutdown waits for the scheduler to close, then for the workers' strategies to stop
CLOSE_TIMEOUT_S = 10.0


class InferGroup:
    """The inference workers of a run and the :class:`GenerateScheduler` in front of them.

    With a ``placement`` (the pipeline's), one worker per ``actor_infer`` rank in its bundle, with
    its devices; otherwise ``num_workers`` workers with Ray ``options`` (``roll rollout``, tests).
    """

    def __init__(self, run: Run, *, placement: Any = None, num_workers: int = 1,
                 options: Mapping[str, Any] | None = None, max_batch_size: int | None = None, **overrides: Any):
        import ray

        config = run.config
        infer = config.actor_infer
        pretrain = run.model_path("actor_infer")
        #: where each rank runs (the pipeline's placement), to name a lost one's node
        self.placed = list(placement.ranks["actor_infer"]) if placement is not None else []
        if placement is not None:
            worker_options = [placement.actor_options(config, p) for p in self.placed]
        else:
            worker_options = [dict(options or {})] * max(1, num_workers)
        remote = ray.remote(InferWorker)
        strategy = run.strategy("actor_infer")
        if getattr(run, "syncs_adapters", False):  # the engine gets adapters of this rank (hookspecs: serves_lora)
            overrides.setdefault("max_lora_rank", run.lora.rank)

        def start(options: Mapping[str, Any]) -> Any:
            # one seed for all: it also seeds a locally built model's init, and every worker serves one policy
            return remote.options(**{**options, "max_concurrency": 2}).remote(
                strategy, infer, pretrain, seed=config.seed, plugins=dict(run.plugins), **overrides)

        self.workers = [start(o) for o in worker_options]
        ray.get([w.policy_version.remote() for w in self.workers])
        self.replacements = Replacements("actor_infer", start, placement=placement, config=config,
                                         options=worker_options)
        self._joining: dict[int, Any] | None = None  # replacements up at this sync (prepare_replacements)
        self._sync_lost: dict[int, str] | None = None  # the lost workers as this sync found them (idem)
        self._localities: list[tuple[Any, Any]] = []  # (actor, its Locality), see localities()
        self.scheduler = start_generate_scheduler(self.workers, max_batch_size=max_batch_size or infer.infer_batch_size,
                                                  partial_rollout=getattr(config, "partial_rollout", True))

    def prepare_replacements(self) -> int:
        """Before a weight sync: find the lost workers, start replacements for them where there is
        room; how many are up and join at this sync (a caller that syncs adapters sends the base
        weights then). The lost workers found here serve the whole sync (:meth:`localities`,
        :meth:`reload`), until :meth:`update_weights` ends it: one round of pings per sync."""
        lost = self._sync_lost = self.lost_workers()
        self._joining = self.replacements.poll(lost) if lost else {}
        return len(self._joining)

    def update_weights(self, weights: dict[str, Any] | list[Any], version: int) -> list[int]:
        """Load new weights everywhere: a state dict (put into the object store once here), or
        ``[ObjectRef]`` of one already there (a train group's :meth:`export_weights_ref`), which
        each worker fetches itself, without a copy through the driver. Replacements that are up
        load them too and rejoin; returns their ranks."""
        import ray

        if self._joining is None:
            self.prepare_replacements()
        joining, self._joining = self._joining or {}, None
        self._sync_lost = None  # the sync ends here: a worker lost from now on is found by the next
        refs = weights if isinstance(weights, list) else [ray.put(weights)]
        ray.get(self.scheduler.update_weights.remote(refs, version, joining=joining))
        still_lost = ray.get(self.scheduler.lost_workers.remote()) if joining else {}
        joined = []
        for rank in joining:
            if rank in still_lost:
                self.replacements.discard(rank)
                continue
            try:  # dropped as gone; should it only have been unreachable, it must not linger
                ray.kill(self.workers[rank], no_restart=True)
            except Exception:  # noqa: BLE001  # gone with its node
                pass
            self.workers[rank] = self.replacements.taken(rank)
            where = self.replacements.where(rank)
            if where is not None and rank < len(self.placed):
                self.placed[rank] = where
            joined.append(rank)
        return joined

    def describe_rank(self, rank: int) -> str:
        """``rank 1 on node 127.0.0.1 (ab12cd34)`` (the node unknown without a placement)."""
        where = self.placed[rank] if rank < len(self.placed) else None
        return f"rank {rank}" + (f" on node {where.node_ip} ({where.node_id[:8]})" if where else "")

    def localities(self) -> list[Any]:
        """The :class:`~roll_core.workers.weight_handoff.Locality` of the live workers and of the
        replacements joining at this sync (plans the weight sync: every engine that loads must find
        its form in the handoff)."""
        import ray

        lost = self._lost_now()
        engines = [w for i, w in enumerate(self.workers) if i not in lost] + list((self._joining or {}).values())
        # an actor's node and device are fixed for its life: asked once per actor, not at every sync
        known = [next((loc for actor, loc in self._localities if actor is w), None) for w in engines]
        missing = [w for w, loc in zip(engines, known) if loc is None]
        if missing:
            self._localities = [(a, loc) for a, loc in self._localities if any(a is w for w in engines)]
            self._localities += list(zip(missing, ray.get([w.locality.remote() for w in missing])))
        return [next(loc for actor, loc in self._localities if actor is w) for w in engines]

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def offload(self) -> None:
        self._on_live_workers("offload")

    def reload(self) -> None:
        self._on_live_workers("reload")

    def _on_live_workers(self, method: str) -> None:
        """Call ``method`` on every worker the scheduler has not dropped (a lost one is failed over)."""
        import ray

        lost = self._lost_now()
        ray.get([getattr(w, method).remote() for i, w in enumerate(self.workers) if i not in lost])

    def lost_workers(self, timeout_s: float = 30.0) -> dict[int, str]:
        """Ranks whose worker is gone and why; the scheduler pings the others and fails the dead over."""
        import ray

        return ray.get(self.scheduler.check_workers.remote(), timeout=timeout_s)

    def _lost_now(self) -> dict[int, str]:
        """The lost workers as the sync in progress found them, else (between syncs) asked now."""
        return dict(self._sync_lost) if self._sync_lost is not None else self.lost_workers()

    def lost_ranks(self) -> list[tuple[int, str, str, str]]:
        """``(rank, node_id, node_ip, cause)`` of every lost worker (node unknown without a placement)."""
        out = []
        for rank, cause in sorted(self.lost_workers().items()):
            where = self.placed[rank] if rank < len(self.placed) else None
            out.append((rank, where.node_id if where else "", where.node_ip if where else "?", cause))
        return out

    def stats(self) -> dict[str, Any]:
        """The scheduler's counters (requests, batches, ``requeued_lost``, ``workers_lost``, ...)."""
        import ray

        return ray.get(self.scheduler.stats.remote())

    def activity(self) -> dict[str, float]:
        """Cumulative ``busy_s`` (time generating) and ``completed`` (turns answered) so far, the live
        ``workers`` and ``requeued_lost`` (requests moved off lost workers)."""
        import ray

        return ray.get(self.scheduler.activity.remote())

    def shutdown(self) -> None:
        """Close the scheduler, stop the live workers' strategies, then kill every actor.

        In that order because ``ray.kill`` is asynchronous: a scheduler still dispatching while its
        workers die would report each one lost at every run's end; and a killed actor runs no cleanup,
        so a strategy is stopped first (vLLM's engine and its files in ``/dev/shm``). Each wait is
        bounded by :data:`CLOSE_TIMEOUT_S`: a hung actor is killed all the same.
        """
        import ray

        self.replacements.shutdown()
        self._joining = self._sync_lost = None
        try:
            lost = ray.get(self.scheduler.close.remote(), timeout=CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001  # gone, or hung: killed below all the same
            lost = {}
        stopping = [w.shutdown.remote() for i, w in enumerate(self.workers) if i not in lost]
        if stopping:
            ray.wait(stopping, num_returns=len(stopping), timeout=CLOSE_TIMEOUT_S)
        for actor in [self.scheduler, *self.workers]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001  # already gone with its node
                pass


def start_generation(run: Run, *, placement: Any = None, num_workers: int = 1, options: Mapping[str, Any] | None = None,
                     max_batch_size: int | None = None, **overrides: Any) -> InferGroup:
    """The run's ``actor_infer`` workers (see :class:`InferGroup`) and their scheduler; ready on return."""
    return InferGroup(run, placement=placement, num_workers=num_workers, options=options,
                      max_batch_size=max_batch_size, **overrides)


def start_generate_scheduler(workers: list[Any], *, max_batch_size: int, max_wait_s: float = 0.02,
                             partial_rollout: bool = True) -> Any:
    """The :class:`GenerateScheduler` actor in front of ``workers``."""
    import ray

    from roll_core.distributed.placement import on_driver_node
    from roll_core.workers.generate_scheduler import GenerateScheduler

    return ray.remote(GenerateScheduler).options(num_cpus=0, max_concurrency=100_000,
                                                 scheduling_strategy=on_driver_node()).remote(
        workers, max_batch_size=max_batch_size, max_wait_s=max_wait_s, partial_rollout=partial_rollout
    )
