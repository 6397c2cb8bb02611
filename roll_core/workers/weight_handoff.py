"""Weight sync without the object store where trainer and engine share a node (or a GPU).

Through Ray's object store a sync serialises the whole state dict on the trainer, copies it into
the store and out again on every engine: for a 0.5B model on a GPU that was 2.6-7.2 s a step
(docs/gpu.md). Where the two sides share more than the network, less is needed:

=================  ==================================================================================
``cuda_ipc``       same node, same GPU: the trainer copies its weights into one flat GPU buffer and
                   sends CUDA IPC handles to it; the engine maps the buffer and copies on the
                   device. Nothing leaves the GPU. The buffer (the model's size) is freed once the
                   engines have loaded (:meth:`HandoffWriter.release_device`, at the end of the
                   sync) and made again at the next sync: a colocated engine needs that memory.
``shared_memory``  same node: the trainer writes its CPU weights into one file in ``/dev/shm`` (kept,
                   overwritten in place every sync); the engine maps it and copies into its model.
``object_store``   anywhere else (another node): ``ray.put`` of the state dict, as before.
=================  ==================================================================================

:func:`plan_weight_sync` decides per engine from :class:`Locality` (node id and device), a pure
function. The trainer builds one :class:`WeightHandoff` holding the forms its engines need; each
engine takes the first of its own preference that the handoff holds (:meth:`WeightHandoff.open`),
so a form the trainer could not make (``/dev/shm`` too small, a CUDA IPC error) falls back to the
object store with its reason logged. The handoff itself is small (names, shapes, offsets, handles).

A run killed with SIGKILL cannot remove its ``/dev/shm`` file (RAM the model's size). So the file's
name carries its owner, the writing process, as ``roll-weights-<pid>-<start time>-<tag>`` (the start
time guards against a reused pid), the owner holds a lock on it while it lives (``flock``, released
by the kernel when it dies; :class:`~roll_core.distributed.weight_files.OwnedPaths` makes it), and
:func:`~roll_core.distributed.weight_files.remove_stale_weight_files` removes every such file whose
owner is gone: a writer does so before it creates its file, and the driver's reaper
(:mod:`roll_core.distributed.reaper`) after a killed run. A live owner's file is never touched
(another run on the machine may be syncing through it).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from roll_core.distributed.weight_files import OwnedPaths

logger = logging.getLogger(__name__)

CUDA_IPC, SHARED_MEMORY, OBJECT_STORE = "cuda_ipc", "shared_memory", "object_store"
#: what an engine falls back to when the handoff lacks its planned form
FALLBACKS = {CUDA_IPC: (CUDA_IPC, SHARED_MEMORY, OBJECT_STORE), SHARED_MEMORY: (SHARED_MEMORY, OBJECT_STORE),
             OBJECT_STORE: (OBJECT_STORE,)}
#: every tensor starts at a multiple of this many bytes in a flat buffer (any dtype can view it)
ALIGN = 64


@dataclasses.dataclass(frozen=True)
class Locality:
    """Where a worker's weights live: its Ray node and its device (``cpu`` or ``cuda:<GPU uuid>``)."""

    node_id: str
    device: str = "cpu"

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda:")


def transport_for(source: Locality, target: Locality) -> str:
    """The cheapest way from ``source`` (the trainer) to ``target`` (an engine); see the module docstring."""
    if source.node_id != target.node_id:
        return OBJECT_STORE
    if source.on_cuda and source.device == target.device:
        return CUDA_IPC
    return SHARED_MEMORY


def plan_weight_sync(source: Locality, targets: Sequence[Locality]) -> list[str]:
    """One transport per target, in order (:func:`transport_for`)."""
    return [transport_for(source, t) for t in targets]


def current_locality(device: Any = None) -> Locality:
    """This process's :class:`Locality`: its Ray node (``local`` outside Ray) and ``device``'s GPU uuid."""
    node = "local"
    try:
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001  # no Ray: one node
        pass
    if device is None or getattr(device, "type", str(device)) != "cuda":
        return Locality(node, "cpu")
    import torch

    index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
    return Locality(node, f"cuda:{torch.cuda.get_device_properties(index).uuid}")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each tensor of a state dict sits in one flat byte buffer."""

    entries: tuple[tuple[str, str, tuple[int, ...], int, int], ...]  # name, dtype, shape, offset, nbytes
    nbytes: int

    @classmethod
    def of(cls, weights: Mapping[str, Any]) -> Layout:
        entries, offset = [], 0
        for name, t in weights.items():
            size = t.numel() * t.element_size()
            entries.append((name, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset, size))
            offset += -(-size // ALIGN) * ALIGN
        return cls(tuple(entries), max(offset, ALIGN))

    def write(self, flat: Any, weights: Mapping[str, Any]) -> None:
        """Copy ``weights`` into ``flat`` (a uint8 tensor of :attr:`nbytes`)."""
        for name, view in self.views(flat).items():
            view.copy_(weights[name])

    def views(self, flat: Any) -> dict[str, Any]:
        """The tensors as views of ``flat`` (no copy)."""
        import torch

        return {name: flat[offset:offset + size].view(getattr(torch, dtype)).view(shape)
                for name, dtype, shape, offset, size in self.entries}


@dataclasses.dataclass
class WeightHandoff:
    """One sync's weights in every form its engines need (see the module docstring); picklable, small."""

    source: Locality
    layout: Layout | None = None  # of the shared-memory file
    shm_path: str | None = None
    ipc: tuple[Layout, Any, Any] | None = None  # layout, torch's (rebuild function, arguments) of the GPU buffer
    ref: list[Any] | None = None  # [ObjectRef] of the state dict
    #: why a planned form is missing (logged by the trainer; kept for the engines' reports)
    missing: dict[str, str] = dataclasses.field(default_factory=dict)

    def forms(self) -> set[str]:
        held = {OBJECT_STORE} if self.ref else set()
        held |= {SHARED_MEMORY} if self.shm_path else set()
        return held | ({CUDA_IPC} if self.ipc else set())

    def open(self, target: Locality, mapped: dict[Any, Any]) -> tuple[str, Mapping[str, Any]]:
        """``(transport, state dict)`` for ``target``; the tensors alias the shared buffer (copy them).
        ``mapped`` caches the opened shared-memory file across syncs (the engine keeps it). A form that
        fails to open (e.g. CUDA IPC between processes that number the GPU differently) gives way to
        the next one the handoff holds."""
        held = self.forms()
        usable = [t for t in FALLBACKS[transport_for(self.source, target)] if t in held]
        if not usable:
            raise RuntimeError(f"weight handoff holds {sorted(held)}, none usable from {target} "
                               f"(source {self.source}; missing: {self.missing})")
        for transport in usable:
            try:
                return transport, OPENERS[transport](self, mapped)
            except Exception as exc:  # noqa: BLE001
                if transport == usable[-1]:
                    raise
                logger.warning("weight sync: %s handoff failed to open (%s: %s); trying %s", transport,
                               type(exc).__name__, exc, usable[usable.index(transport) + 1])
        raise AssertionError("unreachable")


def _open_object_store(handoff: WeightHandoff, mapped: dict[Any, Any]) -> Mapping[str, Any]:
    import ray

    return ray.get(handoff.ref[0])


def _open_shared_memory(handoff: WeightHandoff, mapped: dict[Any, Any]) -> Mapping[str, Any]:
    key = (handoff.shm_path, handoff.layout.nbytes)
    if key not in mapped:
        import torch

        mapped.clear()
        mapped[key] = torch.from_file(handoff.shm_path, shared=True, size=handoff.layout.nbytes, dtype=torch.uint8)
    return handoff.layout.views(mapped[key])


def _open_cuda_ipc(handoff: WeightHandoff, mapped: dict[Any, Any]) -> Mapping[str, Any]:
    layout, rebuild, args = handoff.ipc
    return layout.views(rebuild(*args))


OPENERS = {OBJECT_STORE: _open_object_store, SHARED_MEMORY: _open_shared_memory, CUDA_IPC: _open_cuda_ipc}


class HandoffWriter:
    """The trainer's side: builds a :class:`WeightHandoff` per sync, overwriting its ``/dev/shm`` file
    in place; its GPU buffer lives from :meth:`build` to :meth:`release_device` (the end of the sync)."""

    def __init__(self, tag: str | None = None):
        self.tag = tag or uuid.uuid4().hex[:12]
        self.shm_path: str | None = None
        self._shm: Any = None
        self._files = OwnedPaths()  # the /dev/shm file: named for this process, locked while it lives
        self._gpu: Any = None
        self._layout: Layout | None = None

    def build(self, source: Locality, targets: Sequence[Locality], host_weights: Any, device_weights: Any = None
              ) -> WeightHandoff:
        """The handoff for ``targets``. ``host_weights()`` gives the CPU state dict (called at most once),
        ``device_weights()`` the on-GPU one (``None``: not available, no CUDA IPC)."""
        import ray

        plan = set(plan_weight_sync(source, targets))
        handoff = WeightHandoff(source)
        host: dict[str, Any] | None = None
        if CUDA_IPC in plan:
            try:
                weights = device_weights() if device_weights is not None else None
                if weights is None:
                    raise RuntimeError("the train strategy gives no on-device weights")
                handoff.ipc = self._write_gpu(weights)
            except Exception as exc:  # noqa: BLE001  # any failure: the next form (shared memory)
                handoff.missing[CUDA_IPC] = f"{type(exc).__name__}: {exc}"
                plan.add(SHARED_MEMORY)
        if SHARED_MEMORY in plan:
            host = host_weights()
            try:
                handoff.layout, handoff.shm_path = self._write_shm(host), self.shm_path
            except OSError as exc:
                handoff.missing[SHARED_MEMORY] = f"{type(exc).__name__}: {exc}"
                plan.add(OBJECT_STORE)
        if OBJECT_STORE in plan or not targets:
            handoff.ref = [ray.put(host if host is not None else host_weights())]
        for transport, why in handoff.missing.items():
            logger.warning("weight sync: no %s handoff (%s); engines that would use it fall back", transport, why)
        return handoff

    def _write_shm(self, weights: Mapping[str, Any]) -> Layout:
        import torch

        layout = Layout.of(weights)
        if self._shm is None or self._shm.numel() != layout.nbytes:
            self.close_shm()
            self.shm_path = self._files.create(self.tag, size=layout.nbytes)  # ENOSPC here, not SIGBUS later
            self._shm = torch.from_file(self.shm_path, shared=True, size=layout.nbytes, dtype=torch.uint8)
        layout.write(self._shm, weights)
        return layout

    @property
    def device_bytes(self) -> int:
        """Bytes of the flat device buffer held now (0: none)."""
        return 0 if self._gpu is None else int(self._gpu.numel())

    def release_device(self) -> int:
        """Free the flat device buffer once every engine has loaded from it; returns the bytes freed.

        Not at the trainer's offload: a colocated run offloads the trainer *before* the engines load
        (they reload into the freed memory, then copy from this buffer). Torch keeps a block an engine
        still maps until that engine lets go of it, so freeing early cannot corrupt a load."""
        nbytes, on_cuda = self.device_bytes, self._gpu is not None and self._gpu.device.type == "cuda"
        self._gpu = None
        if on_cuda:
            import torch

            torch.cuda.ipc_collect()  # blocks the engines have released are freed now, not at a later allocation
            torch.cuda.empty_cache()  # and handed back to the driver: the engine is another process
        return nbytes

    def _write_gpu(self, weights: Mapping[str, Any]) -> tuple[Layout, Any, Any]:
        import torch
        from torch.multiprocessing.reductions import reduce_tensor

        layout = Layout.of(weights)
        device = next(iter(weights.values())).device
        if self._gpu is None or self._gpu.numel() != layout.nbytes or self._gpu.device != device:
            self._gpu = None
            self._gpu = torch.empty(layout.nbytes, dtype=torch.uint8, device=device)
        layout.write(self._gpu, weights)
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()  # the engine reads it from another process
        return (layout, *reduce_tensor(self._gpu))

    def close_shm(self) -> None:
        self._files.remove(self.shm_path)
        self._shm, self.shm_path = None, None

    def close(self) -> None:
        """Remove the shared-memory file and free the GPU buffer (the worker is going away)."""
        self.close_shm()
        self.release_device()
