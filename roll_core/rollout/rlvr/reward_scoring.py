"""Scoring RLVR samples while the batch is still generating: in the driver or in reward workers.

Each response is handed to its domain's scorer the moment its generation finishes
(:meth:`RLVRRollout.generate <roll_core.rollout.rlvr.rlvr_rollout.RLVRRollout.generate>`: the
scheduler streams the batch's round back chunk by chunk), so a batch's scoring overlaps its own
generation instead of following it; results are collected in row order. Where a domain is scored:

* **reward workers** (:class:`~roll_core.workers.reward_group.RewardGroup`) when its ``rewards``
  section places workers (``world_size`` or ``device_mapping``), or its reward loads a model (a
  ``reward_model``, a ``generative_reward_model``, an ``llm_judge`` with ``judge_model_type: inference``);
* **the driver** otherwise: a few threads of the driver process call the registered function.
  Rule rewards (``math_verify``, ``regex``) take well under a millisecond to a few ms a sample,
  less than one Ray call to a worker costs (docs/benchmarks.md, "Reward scoring"), so moving them
  would only add latency; a domain that is slow (code in a sandbox, a remote judge) gets workers
  by setting ``world_size``.

A sample whose scorer raises, does not answer within the domain's ``score_timeout`` (seconds, from
the moment it was handed over) or whose worker died scores 0 and is counted by reason
(``rollout/reward_failures/<reason>``: ``error``, ``timeout``, ``worker_lost``, or a reward's own
reason such as ``judge_unparsable``); the run goes on. A hung driver thread or worker thread is left
behind (Python cannot stop a thread); the pool has enough of them that one does not stall scoring.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roll_core.rewards.dispatch import RewardDispatcher, runs_in_workers
from roll_core.rewards.failures import ERROR, TIMEOUT, WORKER_LOST

if TYPE_CHECKING:
    from roll_core.run import Run

#: threads of the driver that call driver-side reward functions
DRIVER_THREADS = 8


def scored_in_workers(section: Any, reward: Any) -> bool:
    """Whether a domain is scored by a reward worker group (see the module docstring)."""
    return bool(section.world_size or section.device_mapping or runs_in_workers(reward, section))


@dataclass
class PendingScore:
    domain: str
    deadline: float
    future: Future | None = None  # driver
    ref: Any = None  # worker
    rank: int = -1


class RewardScoring:
    """``submit(...) -> PendingScore``; ``result(pending) -> (reward, correct, failure)``."""

    def __init__(self, sections: Mapping[str, Any], dispatcher: RewardDispatcher,
                 groups: Mapping[str, Any] | None = None, *, threads: int = DRIVER_THREADS):
        self.sections = dict(sections)
        self.dispatcher = dispatcher
        self.groups = dict(groups or {})
        self._pool = _DaemonPool(threads) if dispatcher.domains else None

    @classmethod
    def start(cls, run: Run, *, placement: Any = None, worker_options: Mapping[str, Any] | None = None
              ) -> RewardScoring:
        """The run's scorers: a dispatcher for the driver's domains, a started group per worker domain."""
        from roll_core.workers.reward_group import RewardGroup

        sections = run.config.rewards
        in_workers = worker_domains(run)
        dispatcher = RewardDispatcher({d: s for d, s in sections.items() if d not in in_workers},
                                      {d: r for d, r in run.rewards.items() if d not in in_workers}, seed=run.config.seed)
        groups = {}
        try:
            for domain in in_workers:
                world = int(sections[domain].world_size or 1)
                groups[domain] = RewardGroup(run, domain, placement=placement, num_workers=world, options=worker_options)
        except BaseException:
            for group in groups.values():
                group.shutdown()
            raise
        return cls(sections, dispatcher, groups)

    def submit(self, domain: str, prompt: str, response: str, reference: str | None, response_tokens: int = 0,
               row: Mapping[str, Any] | None = None) -> PendingScore:
        deadline = time.monotonic() + float(getattr(self.sections.get(domain), "score_timeout", 60.0) or 60.0)
        group = self.groups.get(domain)
        if group is not None:
            ref, rank = group.submit(prompt, response, reference, response_tokens, row)
            return PendingScore(domain, deadline, ref=ref, rank=rank)
        if domain not in self.dispatcher.domains:  # a config error: say which domains exist
            self.dispatcher.score(domain, prompt, response, reference, response_tokens, row)
        future = self._pool.submit(self.dispatcher.score_checked, domain, prompt, response, reference,
                                   response_tokens, row)
        return PendingScore(domain, deadline, future=future)

    def result(self, pending: PendingScore) -> tuple[float, bool, str]:
        left = max(0.0, pending.deadline - time.monotonic())
        if pending.future is not None:
            try:
                return pending.future.result(timeout=left)
            except FutureTimeout:
                return 0.0, False, TIMEOUT
            except Exception:
                return 0.0, False, ERROR
        import ray

        lost = None
        try:
            return tuple(ray.get(pending.ref, timeout=left))
        except ray.exceptions.GetTimeoutError:
            return 0.0, False, TIMEOUT
        except ray.exceptions.RayActorError as exc:  # the rank is gone: later samples go to the others
            lost = exc
            return 0.0, False, WORKER_LOST
        except ray.exceptions.RayError:
            return 0.0, False, ERROR
        finally:
            self.groups[pending.domain].done(pending.rank, lost)

    def score(self, domain: str, prompt: str, response: str, reference: str | None, response_tokens: int = 0,
              row: Mapping[str, Any] | None = None) -> tuple[float, bool, str]:
        """One sample, waited for."""
        return self.result(self.submit(domain, prompt, response, reference, response_tokens, row))

    def replace_lost(self) -> list[tuple[str, str]]:
        """Reward workers that rejoined (see :meth:`RewardGroup.replace_lost`): ``(role, "rank r on node ...")``."""
        from roll_core.workers.reward_group import reward_role

        return [(reward_role(domain), group.describe_rank(rank))
                for domain, group in self.groups.items() for rank in group.replace_lost()]

    def describe(self) -> list[str]:
        """One line per domain: where it is scored."""
        lines = []
        for domain in self.sections:
            group = self.groups.get(domain)
            where = (f"{group.world_size} reward worker{'s' if group.world_size > 1 else ''}" if group
                     else "the driver")
            lines.append(f"rewards.{domain}: scored in {where}")
        return lines

    def shutdown(self) -> None:
        for group in self.groups.values():
            group.shutdown()
        self.groups.clear()
        if self._pool is not None:
            self._pool.close()


class InlineScoring:
    """A bare scorer (``score(domain, prompt, response, reference, tokens, row) -> (reward, correct)``,
    e.g. a :class:`RewardDispatcher`) with :class:`RewardScoring`'s interface, scoring on submit."""

    def __init__(self, scorer: Any):
        self.scorer = scorer

    def submit(self, domain: str, prompt: str, response: str, reference: str | None, response_tokens: int = 0,
               row: Mapping[str, Any] | None = None) -> tuple[float, bool, str]:
        reward, correct = self.scorer.score(domain, prompt, response, reference, response_tokens, row)[:2]
        return float(reward), bool(correct), ""

    def result(self, pending: tuple[float, bool, str]) -> tuple[float, bool, str]:
        return pending


def worker_domains(run: Run) -> list[str]:
    """The domains of ``run`` scored by reward worker groups (the layout roles ``rewards.<domain>``)."""
    return [d for d, s in run.config.rewards.items() if scored_in_workers(s, run.rewards[d].load())]


class _DaemonPool:
    """Daemon threads (a hung reward must not keep the process from exiting, as an executor's would)."""

    def __init__(self, threads: int):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"roll-reward-{i}", daemon=True)
                         for i in range(max(1, threads))]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Any, *args: Any) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
