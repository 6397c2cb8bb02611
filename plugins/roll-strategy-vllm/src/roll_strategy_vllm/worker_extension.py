"""Methods roll adds to every vLLM worker (``worker_extension_cls``), called through ``collective_rpc``.

Runs inside vLLM's worker processes, where vLLM is already imported.
"""

from __future__ import annotations

from collections.abc import Iterator


class RollWorkerExtension:
    """Mixed into vLLM's ``Worker``: weight loading from a safetensors file that roll wrote."""

    def roll_load_weights(self, path: str) -> int:
        """Load every tensor of the safetensors file ``path`` (HF names) in place; return the count.

        Tensors stream from the memory-mapped file into the model's own ``load_weights`` through
        the worker's ``reload_weights`` (which fuses q/k/v and gate/up and shards for tensor
        parallelism as the initial load does), so no second full copy is held.
        """
        from safetensors import safe_open

        count = 0

        def tensors() -> Iterator:
            nonlocal count
            with safe_open(path, framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    count += 1
                    yield name, f.get_tensor(name)

        self.reload_weights(weights_iterator=tensors(), is_checkpoint_format=True)  # type: ignore[attr-defined]
        return count
