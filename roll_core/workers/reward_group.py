"""A reward domain's worker group: its ranks placed like any role's, scoring one sample per call.

With a ``placement`` (the pipeline's), one :class:`~roll_core.workers.reward_worker.RewardWorker`
per rank of the layout role ``rewards.<domain>`` (``device_mapping`` / ``world_size`` /
``num_gpus_per_worker`` / ``ray_resources`` of the domain's section: GPUs, or CPU slots on a CPU
cluster); otherwise ``num_workers`` workers with Ray ``options`` (tests, benchmarks).

:meth:`submit` sends a sample to the rank with the fewest samples in flight and returns the Ray
reference of its ``(reward, correct, failure)``; the caller waits with its own deadline
(:mod:`roll_core.rollout.rlvr.reward_scoring`), so a hung rank costs samples, not the run.

A rank whose actor died (its node lost, OOM-killed) costs the samples it held (``worker_lost``) and
gets no more: later samples go to the live ranks. At each weight sync the pipeline calls
:meth:`replace_lost`, which starts a replacement where the cluster has room again and takes it in
once it is up (:mod:`roll_core.distributed.replacement`; a reward worker loads no policy weights).
With no live rank left, samples go to the lost ones and cost ``worker_lost`` until a replacement joins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from roll_core.distributed.replacement import Replacements

if TYPE_CHECKING:
    from roll_core.run import Run

logger = logging.getLogger("roll.rewards")


def reward_role(domain: str) -> str:
    """The layout role of a reward domain's workers."""
    from roll_core.distributed.layout import REWARD_ROLE_PREFIX

    return f"{REWARD_ROLE_PREFIX}{domain}"


class RewardGroup:
    """See the module docstring."""

    def __init__(self, run: Run, domain: str, *, placement: Any = None, num_workers: int = 1,
                 options: Mapping[str, Any] | None = None, start_timeout_s: float = 900.0):
        import ray

        from roll_core.workers.reward_worker import RewardWorker

        config = run.config
        section = config.rewards[domain]
        self.domain = domain
        if placement is not None:
            worker_options = [placement.actor_options(config, p) for p in placement.ranks[reward_role(domain)]]
        else:
            worker_options = [dict(options or {})] * max(1, num_workers)
        threads = max(1, int(section.infer_batch_size))
        remote = ray.remote(RewardWorker)

        def start(options: Mapping[str, Any]) -> Any:
            return remote.options(**{**options, "max_concurrency": threads}).remote(
                domain, section, run.rewards[domain], seed=config.seed, strategy=run.reward_strategies.get(domain),
                plugins=dict(run.plugins))

        self.workers = [start(o) for o in worker_options]
        ray.get([w.ready.remote() for w in self.workers], timeout=start_timeout_s)
        self._lock = threading.Lock()
        self._in_flight = [0] * len(self.workers)
        #: rank -> why it was dropped (the first line of Ray's error)
        self.lost: dict[int, str] = {}
        self.placed = list(placement.ranks[reward_role(domain)]) if placement is not None else []
        self.replacements = Replacements(reward_role(domain), start, placement=placement, config=config,
                                         options=worker_options)

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def submit(self, prompt: str, response: str, reference: str | None, response_tokens: int,
               row: Mapping[str, Any] | None) -> tuple[Any, int]:
        """``(ref, rank)``: the pending score; call :meth:`done` with the rank when it is collected."""
        with self._lock:
            live = [r for r in range(len(self.workers)) if r not in self.lost] or range(len(self.workers))
            rank = min(live, key=self._in_flight.__getitem__)
            self._in_flight[rank] += 1
            worker = self.workers[rank]
        ref = worker.score.remote(prompt, response, reference, response_tokens, dict(row or {}))
        return ref, rank

    def done(self, rank: int, lost: BaseException | None = None) -> None:
        """A sample of ``rank`` was collected; ``lost``: Ray said its actor is gone (no more samples go there)."""
        with self._lock:
            self._in_flight[rank] -= 1
            if lost is not None and rank not in self.lost:
                text = str(lost).strip().splitlines()
                self.lost[rank] = text[0] if text else type(lost).__name__
                logger.warning("%s rank %d is gone (%s); %d rank(s) score on", reward_role(self.domain), rank,
                               self.lost[rank], len(self.workers) - len(self.lost))

    def replace_lost(self) -> list[int]:
        """Take in the replacements of lost ranks that are up (starting those that have room); their ranks."""
        with self._lock:
            lost = list(self.lost)
        if not lost:
            return []
        import ray

        up = self.replacements.poll(lost)
        with self._lock:
            for rank in up:
                try:  # dropped as gone; should it only have been unreachable, it must not linger
                    ray.kill(self.workers[rank], no_restart=True)
                except Exception:  # noqa: BLE001  # gone with its node
                    pass
                self.workers[rank] = self.replacements.taken(rank)
                self._in_flight[rank] = 0
                del self.lost[rank]
                where = self.replacements.where(rank)
                if where is not None and rank < len(self.placed):
                    self.placed[rank] = where
        return sorted(up)

    def describe_rank(self, rank: int) -> str:
        """``rank 1 on node 127.0.0.1 (ab12cd34)`` (the node unknown without a placement)."""
        where = self.placed[rank] if rank < len(self.placed) else None
        return f"rank {rank}" + (f" on node {where.node_ip} ({where.node_id[:8]})" if where else "")

    def shutdown(self) -> None:
        import ray

        self.replacements.shutdown()
        for worker in self.workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception:  # noqa: BLE001  # already gone with its node
                pass
