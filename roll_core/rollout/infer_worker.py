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

    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        self.strategy.load_weights(weights, version)

    def policy_version(self) -> int:
        return int(self.strategy.policy_version)


def num_infer_workers(config: Any, *, on_gpus: bool) -> int:
    """``actor_infer.world_size``, else its devices divided by ``num_gpus_per_worker`` on GPUs, else 1."""
    infer = config.actor_infer
    if infer.world_size:
        return int(infer.world_size)
    if on_gpus and infer.device_mapping:
        return max(1, len(infer.device_mapping) // infer.num_gpus_per_worker)
    return 1


class Generation:
    """The inference workers of a run and the :class:`GenerateScheduler` in front of them."""

    def __init__(self, run: Any, *, num_workers: int, options: Mapping[str, Any] | None = None,
                 max_batch_size: int | None = None, **overrides: Any):
        import ray

        config = run.config
        infer = config.actor_infer
        pretrain = infer.model_args.model_name_or_path or config.pretrain
        remote = ray.remote(InferWorker).options(**{**dict(options or {}), "max_concurrency": 2})
        strategy = run.strategy("actor_infer")
        # one seed for all: it also seeds a locally built model's init, and every worker serves one policy
        self.workers = [remote.remote(strategy, infer, pretrain, seed=config.seed, plugins=dict(run.plugins),
                                      **overrides) for _ in range(max(1, num_workers))]
        ray.get([w.policy_version.remote() for w in self.workers])
        self.scheduler = start_generate_scheduler(self.workers, max_batch_size=max_batch_size or infer.infer_batch_size)

    def update_weights(self, weights: dict[str, Any], version: int) -> None:
        import ray

        ray.get(self.scheduler.update_weights.remote([ray.put(weights)], version))

    def activity(self) -> dict[str, float]:
        """Cumulative ``busy_s`` (time generating) and ``completed`` (turns answered) so far."""
        import ray

        return ray.get(self.scheduler.activity.remote())

    def shutdown(self) -> None:
        import ray

        for actor in [self.scheduler, *self.workers]:
            ray.kill(actor, no_restart=True)


def start_generation(run: Any, *, num_workers: int, options: Mapping[str, Any] | None = None,
                     max_batch_size: int | None = None, **overrides: Any) -> Generation:
    """``num_workers`` inference workers for the run's ``actor_infer`` and their scheduler; ready on return."""
    return Generation(run, num_workers=num_workers, options=options, max_batch_size=max_batch_size, **overrides)


def start_generate_scheduler(workers: list[Any], *, max_batch_size: int, max_wait_s: float = 0.02) -> Any:
    """The :class:`GenerateScheduler` actor in front of ``workers``."""
    import ray

    from roll_core.rollout.generate_scheduler import GenerateScheduler

    return ray.remote(GenerateScheduler).options(num_cpus=0, max_concurrency=100_000).remote(
        workers, max_batch_size=max_batch_size, max_wait_s=max_wait_s
    )
