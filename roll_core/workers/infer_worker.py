"""``actor_infer``'s rank: a Ray actor hosting an infer strategy, behind the generate scheduler.

Started only by :class:`roll_core.workers.infer_group.InferGroup` (the train side's counterpart is
:mod:`roll_core.workers.train_worker`).
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
        from roll_core.run import check_plugin_versions

        check_plugin_versions(plugins or {}, "actor_infer worker")
        cls = strategy.load()
        self.strategy = cls.from_worker_config(worker_config, pretrain, seed, **overrides)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        return self.strategy.generate(requests)

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        self.strategy.abort(request_ids)

    def load_weights(self, weights: Any, version: int) -> str | None:
        """A HF-named state dict, a LoRA adapter for a strategy that serves adapters natively, or a
        :class:`~roll_core.workers.weight_handoff.WeightHandoff` (returns the transport it used)."""
        from roll_core.strategies.lora import LoraAdapter
        from roll_core.workers.weight_handoff import WeightHandoff

        if isinstance(weights, LoraAdapter):
            self.strategy.load_adapter(weights, version)
            return None
        if isinstance(weights, WeightHandoff):
            if not hasattr(self, "_mapped"):
                self._mapped: dict[Any, Any] = {}  # the shared-memory file, mapped once
            transport, state = weights.open(self.locality(), self._mapped)
            self.strategy.load_weights(state, version)
            return transport
        self.strategy.load_weights(weights, version)
        return None

    def locality(self) -> Any:
        """This worker's :class:`~roll_core.workers.weight_handoff.Locality` (node and device)."""
        from roll_core.workers.weight_handoff import current_locality

        return current_locality(getattr(self.strategy, "device", None))

    def node(self) -> tuple[str, str]:
        """``(node_id, node_ip)`` where this worker runs; answering it says the engine is built."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def policy_version(self) -> int:
        return int(self.strategy.policy_version)

    def offload(self) -> None:
        self.strategy.offload()

    def reload(self) -> None:
        self.strategy.reload()

    def shutdown(self) -> None:
        """Stop the strategy's engine (for those that have one to stop, e.g. vLLM's, which also removes its
        files in ``/dev/shm``): called before the actor is killed, which runs no cleanup of its own."""
        stop = getattr(self.strategy, "shutdown", None)
        if callable(stop):
            stop()
