"""Dynamic sampling's shared parts: the bound on what one step consumes, the counts, the stop message,
and what a step does when the bound is reached before its batch is full (``unfilled_batch``).

Both filters use them: RLVR's query / response filters (:mod:`roll_core.rollout.rlvr.reward_filters`)
and the agentic group filters (:mod:`roll_core.rollout.engine.group_filters`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

G = TypeVar("G")

#: ``max_groups_per_step`` when unset: this many batches' worth of groups
DEFAULT_GROUPS_PER_BATCH = 10


def max_groups(configured: int | None, batch_groups: int) -> int:
    """``max_groups_per_step``, or its default: ten batches' worth of groups."""
    return int(configured) if configured else DEFAULT_GROUPS_PER_BATCH * max(int(batch_groups), 1)


@dataclass(frozen=True)
class UnfilledBatch:
    """One ``unfilled_batch`` behaviour: what a step does when ``max_groups_per_step`` groups were consumed
    and fewer than a batch passed the filter."""

    #: filtered groups are kept (their samples), to complete the batch with
    keeps_filtered: bool

    def complete(self, passed: Sequence[G], filtered: Sequence[G], wanted: int) -> list[G] | None:
        """The full batch: ``passed`` plus the most recent of ``filtered`` (oldest first, as consumed);
        None when the step stops (``stop``, or too few groups were consumed to fill it)."""
        missing = wanted - len(passed)
        if not self.keeps_filtered or missing > len(filtered):
            return None
        return list(passed) + (list(filtered[len(filtered) - missing:]) if missing > 0 else [])


#: ``unfilled_batch`` -> its behaviour. ``stop``: the run stops with :func:`exhausted_message` (a clear stop
#: for data that cannot fill a batch); ``fill``: the batch is completed with the most recently filtered
#: groups, the groups an unfiltered run would have trained on in those places, so the batch's shape, its
#: mini-batches and the loss normalisers are as without a filter (a policy that solves most prompts makes
#: most groups all-success and filtered: the run goes on instead of dying because it is going well).
UNFILLED_BATCH: dict[str, UnfilledBatch] = {"stop": UnfilledBatch(keeps_filtered=False),
                                            "fill": UnfilledBatch(keeps_filtered=True)}


def filter_metrics(filtered: dict[str, int], trained_groups: int, extra_s: float,
                   refilled: int | None = None) -> dict[str, float]:
    """``rollout/filtered_groups[/<reason>]``, groups consumed per trained group, the time filters cost.

    ``refilled`` (``unfilled_batch: fill``; None: not reported): of the filtered groups, how many completed
    the batch and were trained anyway (``rollout/filtered_groups/refilled``; not a reason, so not in the
    total). Groups consumed = trained - refilled + filtered.
    """
    total = sum(filtered.values())
    metrics = {f"rollout/filtered_groups/{reason}": float(n) for reason, n in sorted(filtered.items())}
    metrics["rollout/filtered_groups"] = float(total)
    consumed = trained_groups - (refilled or 0) + total
    metrics["rollout/groups_per_trained_group"] = consumed / max(trained_groups, 1)
    metrics["rollout/filter_extra_time"] = float(extra_s)
    if refilled is not None:
        metrics["rollout/filtered_groups/refilled"] = float(refilled)
    return metrics


def refilled_message(what: str, passed: int, wanted: int, consumed: int, limit: int,
                     bound: str | None = None) -> str:
    """The warning of a step whose batch was completed with filtered groups (``unfilled_batch: fill``);
    ``bound``: what ended the step's sampling, when not ``max_groups_per_step`` (agentic: the cap
    ``max_traj_per_env``)."""
    bound = bound or f"max_groups_per_step {limit}"
    return (f"dynamic sampling: {passed} of {wanted} {what} passed after {consumed} were consumed "
            f"({bound}); the batch is completed with the {wanted - passed} most recently "
            "filtered ones (unfilled_batch: fill). Usual when the policy solves most of the data.")


def exhausted_message(what: str, filters: str, passed: int, wanted: int, consumed: int, limit: int,
                      filtered: dict[str, int], refill_left: int | None = None) -> str:
    """Why a step stops: the filter, the counts, and what to change. ``refill_left``: with
    ``unfilled_batch: fill``, the filtered groups that were left to complete the batch with (too few)."""
    counts = ", ".join(f"{reason} {n}" for reason, n in sorted(filtered.items())) or "none"
    head = (f"dynamic sampling could not fill the batch: {passed} of {wanted} {what} passed after {consumed} were "
            f"consumed, and max_groups_per_step is {limit} (dropped by reason: {counts}; filters: {filters}). ")
    if refill_left is not None:
        return head + (f"unfilled_batch is fill, but only {refill_left} filtered {what} were left to complete it "
                       f"with (stale ones are dropped): raise max_groups_per_step to at least a batch ({wanted}).")
    return head + ("Too few groups of this data and policy pass the filter: loosen or remove the filter, raise "
                   "max_groups_per_step, or set unfilled_batch: fill to complete such a batch with the most "
                   "recently filtered groups and go on (a policy that solves most of the data gets here too).")
