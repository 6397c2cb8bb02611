"""A reward domain's worker group: its ranks placed like any role's, scoring one sample per call.

With a ``placement`` (the pipeline's), one :class:`~roll_core.workers.reward_worker.RewardWorker`
per rank of the layout role ``rewards.<domain>`` (``device_mapping`` / ``world_size`` /
``num_gpus_per_worker`` / ``ray_resources`` of the domain's section: GPUs, or CPU slots on a CPU
cluster); otherwise ``num_workers`` workers with Ray ``options`` (tests, benchmarks).

:meth:`submit` sends a sample to the rank with the fewest samples in flight and returns the Ray
reference of its ``(reward, correct, failure)``; the caller waits with its own deadline
(:mod:`roll_core.rollout.rlvr.reward_scoring`), so a hung rank costs samples, not the run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roll_core.run import Run

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
        self.workers = [remote.options(**{**o, "max_concurrency": threads}).remote(
            domain, section, run.rewards[domain], seed=config.seed, strategy=run.reward_strategies.get(domain),
            plugins=dict(run.plugins)) for o in worker_options]
        ray.get([w.ready.remote() for w in self.workers], timeout=start_timeout_s)
        self._lock = threading.Lock()
        self._in_flight = [0] * len(self.workers)

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def submit(self, prompt: str, response: str, reference: str | None, response_tokens: int,
               row: Mapping[str, Any] | None) -> tuple[Any, int]:
        """``(ref, rank)``: the pending score; call :meth:`done` with the rank when it is collected."""
        with self._lock:
            rank = min(range(len(self.workers)), key=self._in_flight.__getitem__)
            self._in_flight[rank] += 1
        ref = self.workers[rank].score.remote(prompt, response, reference, response_tokens, dict(row or {}))
        return ref, rank

    def done(self, rank: int) -> None:
        with self._lock:
            self._in_flight[rank] -= 1

    def shutdown(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
