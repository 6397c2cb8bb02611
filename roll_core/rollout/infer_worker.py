"""``actor_infer``: inference workers (Ray actors hosting an infer strategy) behind the generate scheduler.

There is one way to start them, :func:`start_generation` (the pipelines and ``roll rollout`` both
use it): every worker is built from the run's bound ``actor_infer`` strategy with the *same* seed,
so with a locally built model every worker starts from the same weights and they serve one policy
from the first request on. Workers are created with ``max_concurrency=2`` so that ``abort`` runs
while ``generate`` is busy; strategies see aborts between decode steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from roll_core.registry import Registration
from roll_core.strategies.base import GenerationOutput, GenerationRequest


class InferWorker:
    """Wraps :class:`roll_core.strategies.base.InferStrategy` for :class:`GenerateScheduler`."""

    def __init__(self, strategy: Registration, worker_config: Any, pretrain: str, *, seed: int = 0,
                 plugins: Mapping[str, str] | None = None, **overrides: Any):
        from roll_core.config.run import check_plugin_versions

        check_plugin_versions(plugins or {}, "actor_infer worker")
        cls = strategy.load()
        self.strategy = cls.from_worker_config(worker_config, pretrain, seed, **overrides)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        return self.strategy.generate(requests)

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        self.strategy.abort(request_ids)

    def load_weights(self, weights: Any, version: int) -> None:
        """A HF-named state dict, or a LoRA adapter for a strategy that serves adapters natively."""
        from roll_core.strategies.lora import LoraAdapter

        if isinstance(weights, LoraAdapter):
            self.strategy.load_adapter(weights, version)
        else:
            self.strategy.load_weights(weights, version)

    def policy_version(self) -> int:
        return int(self.strategy.policy_version)

    def offload(self) -> None:
        self.strategy.offload()

    def reload(self) -> None:
        self.strategy.reload()


class Generation:
    """The inference workers of a run and the :class:`GenerateScheduler` in front of them.

    With a ``placement`` (the pipeline's), one worker per ``actor_infer`` rank in its bundle, with
    its devices; otherwise ``num_workers`` workers with Ray ``options`` (``roll rollout``, tests).
    """

    def __init__(self, run: Any, *, placement: Any = None, num_workers: int = 1,
                 options: Mapping[str, Any] | None = None, max_batch_size: int | None = None, **overrides: Any):
        import ray

        config = run.config
        infer = config.actor_infer
        pretrain = infer.model_args.model_name_or_path or config.pretrain
        if placement is not None:
            worker_options = [placement.actor_options(config, p) for p in placement.ranks["actor_infer"]]
        else:
            worker_options = [dict(options or {})] * max(1, num_workers)
        remote = ray.remote(InferWorker)
        strategy = run.strategy("actor_infer")
        if getattr(run, "syncs_adapters", False):  # the engine gets adapters of this rank (hookspecs: serves_lora)
            overrides.setdefault("max_lora_rank", run.lora.rank)
        # one seed for all: it also seeds a locally built model's init, and every worker serves one policy
        self.workers = [remote.options(**{**o, "max_concurrency": 2}).remote(
            strategy, infer, pretrain, seed=config.seed, plugins=dict(run.plugins), **overrides)
            for o in worker_options]
        ray.get([w.policy_version.remote() for w in self.workers])
        self.scheduler = start_generate_scheduler(self.workers, max_batch_size=max_batch_size or infer.infer_batch_size)

    def update_weights(self, weights: dict[str, Any] | list[Any], version: int) -> None:
        """Load new weights everywhere: a state dict (put into the object store once here), or
        ``[ObjectRef]`` of one already there (a train group's :meth:`export_weights_ref`), which
        each worker fetches itself, without a copy through the driver."""
        import ray

        refs = weights if isinstance(weights, list) else [ray.put(weights)]
        ray.get(self.scheduler.update_weights.remote(refs, version))

    def offload(self) -> None:
        import ray

        ray.get([w.offload.remote() for w in self.workers])

    def reload(self) -> None:
        import ray

        ray.get([w.reload.remote() for w in self.workers])

    def activity(self) -> dict[str, float]:
        """Cumulative ``busy_s`` (time generating) and ``completed`` (turns answered) so far."""
        import ray

        return ray.get(self.scheduler.activity.remote())

    def shutdown(self) -> None:
        import ray

        for actor in [self.scheduler, *self.workers]:
            ray.kill(actor, no_restart=True)


def start_generation(run: Any, *, placement: Any = None, num_workers: int = 1, options: Mapping[str, Any] | None = None,
                     max_batch_size: int | None = None, **overrides: Any) -> Generation:
    """The run's ``actor_infer`` workers (see :class:`Generation`) and their scheduler; ready on return."""
    return Generation(run, placement=placement, num_workers=num_workers, options=options,
                      max_batch_size=max_batch_size, **overrides)


def start_generate_scheduler(workers: list[Any], *, max_batch_size: int, max_wait_s: float = 0.02) -> Any:
    """The :class:`GenerateScheduler` actor in front of ``workers``."""
    import ray

    from roll_core.distributed.placement import on_driver_node
    from roll_core.rollout.generate_scheduler import GenerateScheduler

    return ray.remote(GenerateScheduler).options(num_cpus=0, max_concurrency=100_000,
                                                 scheduling_strategy=on_driver_node()).remote(
        workers, max_batch_size=max_batch_size, max_wait_s=max_wait_s
    )
