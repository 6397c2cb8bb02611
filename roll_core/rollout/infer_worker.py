"""InferWorker: a Ray actor hosting one infer strategy (``hf_infer``, ``vllm``, ...) for the scheduler.

The strategy is looked up in this process's own registry by ``strategy_name`` (plugins are never
pickled). Create it with ``max_concurrency=2`` (what :func:`start_infer_workers` does) so that
``abort`` runs while ``generate`` is busy; strategies see aborts between decode steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from roll_core.strategies.base import GenerationOutput, GenerationRequest


class InferWorker:
    """Wraps :class:`roll_core.strategies.base.InferStrategy` for :class:`GenerateScheduler`."""

    def __init__(self, strategy_name: str, worker_config: Any, pretrain: str, *, seed: int = 0,
                 plugin_modules: Sequence[str] = (), **overrides: Any):
        from roll_core.plugins import PluginManager, get_registry

        registry = PluginManager(extra_modules=list(plugin_modules)).registry if plugin_modules else get_registry()
        cls = registry.load("strategy", strategy_name, config_key="actor_infer.strategy_args.strategy_name")
        build = getattr(cls, "from_worker_config", None)
        self.strategy = (
            build(worker_config, pretrain, seed, **overrides) if build is not None
            else cls(pretrain, seed=seed, **overrides)
        )

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        return self.strategy.generate(requests)

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        self.strategy.abort(request_ids)

    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        self.strategy.load_weights(weights, version)

    def policy_version(self) -> int:
        return int(self.strategy.policy_version)


#: the backend of ``actor_infer`` when its YAML names none (roll's built-in torch/transformers one)
DEFAULT_INFER_STRATEGY = "hf_infer"


def infer_strategy_name(config: Any, *, check: bool = False, registry: Any = None) -> str:
    """``actor_infer.strategy_args.strategy_name`` (default hf_infer); ``check`` looks it up in the registry."""
    args = config.actor_infer.strategy_args
    name = args.strategy_name if args else DEFAULT_INFER_STRATEGY
    if check:
        from roll_core.plugins import get_registry

        (registry or get_registry()).get("strategy", name, config_key="actor_infer.strategy_args.strategy_name")
    return name


def start_infer_workers(config: Any, *, num_workers: int = 1, plugin_modules: Sequence[str] = (),
                        num_cpus: float = 1.0, **overrides: Any) -> list[Any]:
    """``num_workers`` InferWorker actors for ``config.actor_infer`` (ROLL names); ready on return."""
    import ray

    infer = config.actor_infer
    strategy = infer_strategy_name(config)
    pretrain = infer.model_args.model_name_or_path or config.pretrain
    actor = ray.remote(InferWorker).options(num_cpus=num_cpus, max_concurrency=2)
    # one seed for all: it also seeds a tiny model's init, and every worker must hold the same policy
    workers = [actor.remote(strategy, infer, pretrain, seed=config.seed, plugin_modules=plugin_modules,
                            **overrides) for i in range(num_workers)]
    ray.get([w.policy_version.remote() for w in workers])
    return workers


def start_generate_scheduler(workers: list[Any], *, max_batch_size: int, max_wait_s: float = 0.02) -> Any:
    """The :class:`GenerateScheduler` actor in front of ``workers``."""
    import ray

    from roll_core.rollout.generate_scheduler import GenerateScheduler

    return ray.remote(GenerateScheduler).options(num_cpus=0, max_concurrency=100_000).remote(
        workers, max_batch_size=max_batch_size, max_wait_s=max_wait_s
    )
