"""Starting the lost ranks of a role again, for the roles a run can go on without (inference, reward workers).

The rule (docs/architecture.md, "Failures"): at every weight sync the pipeline asks each such
group to replace its lost ranks. A lost rank is started again in its own placement-group bundle
once Ray has placed that bundle on a live node again (:meth:`~roll_core.distributed.placement.Placement.relocate`):
Ray does that by itself when a node with room joins, and a rank killed on a live node keeps its
bundle there. The new actor builds its engine while the run goes on; the group takes it in at the
first sync that finds it up (an inference worker after loading that sync's weights, so it serves
the current policy from its first request). Without a placement (``roll rollout``, tests) the
replacement is started with the rank's Ray options at once and Ray places it when it can.

Training ranks are not replaced: a lost one breaks its process group mid-step, and the run stops
with the one message of :mod:`roll_core.pipeline.stop`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("roll.distributed")


class Replacements:
    """The replacements of one role's lost ranks, from started to taken in.

    ``start(options)`` creates the rank's actor with Ray ``options``; the actor must have a
    ``node()`` method (``(node_id, node_ip)``), called to know that its constructor finished.
    ``options`` are the ranks' Ray options when there is no ``placement``.
    """

    def __init__(self, role: str, start: Callable[[Mapping[str, Any]], Any], *, placement: Any = None,
                 config: Any = None, options: Sequence[Mapping[str, Any]] = ()):
        self.role = role
        self.start = start
        self.placement = placement
        self.config = config
        self.options = [dict(o) for o in options]
        #: rank -> (actor, ref of its node() call)
        self.pending: dict[int, tuple[Any, Any]] = {}
        self.started = 0  # replacements started, for the counters

    def poll(self, lost: Iterable[int]) -> dict[int, Any]:
        """Start a replacement for every ``lost`` rank that has room and none yet; return
        ``{rank: actor}`` of the replacements that are up (not yet taken in)."""
        import ray

        for rank in sorted(set(lost) - set(self.pending)):
            options = self._options(rank)
            if options is None:
                continue
            actor = self.start(options)
            self.pending[rank] = (actor, actor.node.remote())
            self.started += 1
            logger.warning("%s rank %d: starting a replacement", self.role, rank)
        refs = [ref for _, ref in self.pending.values()]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        up: dict[int, Any] = {}
        for rank, (actor, ref) in list(self.pending.items()):
            if ref not in done:
                continue
            try:
                node_id, node_ip = ray.get(ref)
            except ray.exceptions.RayError as exc:  # it died starting (its node went too): tried again later
                logger.warning("%s rank %d: the replacement did not start (%s)", self.role, rank,
                               str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
                self.discard(rank)
                continue
            if self.placement is not None:  # where it came up: the bundle may have moved since it was started
                self.placement.arrived(self.role, rank, node_id, node_ip)
            up[rank] = actor
        return up

    def taken(self, rank: int) -> Any:
        """The replacement of ``rank`` joined its group: forget it here; returns its actor."""
        return self.pending.pop(rank)[0]

    def discard(self, rank: int) -> None:
        """Give up this replacement (it failed to join); the next poll may start another."""
        actor, _ = self.pending.pop(rank, (None, None))
        if actor is not None:
            _kill(actor)

    def shutdown(self) -> None:
        for rank in list(self.pending):
            self.discard(rank)

    def where(self, rank: int) -> Any:
        """The rank's placement record (moved by :meth:`Placement.relocate`), or None without a placement."""
        if self.placement is None:
            return None
        return self.placement.ranks[self.role][rank]

    def _options(self, rank: int) -> dict[str, Any] | None:
        if self.placement is None:
            return self.options[rank] if rank < len(self.options) else None
        where = self.placement.relocate(self.role, rank)
        return None if where is None else self.placement.actor_options(self.config, where)


def _kill(actor: Any) -> None:
    import ray

    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001  # already gone with its node
        pass
