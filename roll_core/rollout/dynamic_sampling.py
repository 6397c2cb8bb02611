"""Dynamic sampling's shared parts: the bound on what one step consumes, the counts, the stop message.

Both filters use them: RLVR's query / response filters (:mod:`roll_core.rollout.rlvr.reward_filters`)
and the agentic group filters (:mod:`roll_core.rollout.engine.group_filters`).
"""

from __future__ import annotations

#: ``max_groups_per_step`` when unset: this many batches' worth of groups
DEFAULT_GROUPS_PER_BATCH = 10


def max_groups(configured: int | None, batch_groups: int) -> int:
    """``max_groups_per_step``, or its default: ten batches' worth of groups."""
    return int(configured) if configured else DEFAULT_GROUPS_PER_BATCH * max(int(batch_groups), 1)


def filter_metrics(filtered: dict[str, int], trained_groups: int, extra_s: float) -> dict[str, float]:
    """``rollout/filtered_groups[/<reason>]``, groups consumed per trained group, the time filters cost."""
    total = sum(filtered.values())
    metrics = {f"rollout/filtered_groups/{reason}": float(n) for reason, n in sorted(filtered.items())}
    metrics["rollout/filtered_groups"] = float(total)
    metrics["rollout/groups_per_trained_group"] = (trained_groups + total) / max(trained_groups, 1)
    metrics["rollout/filter_extra_time"] = float(extra_s)
    return metrics


def exhausted_message(what: str, filters: str, passed: int, wanted: int, consumed: int, limit: int,
                      filtered: dict[str, int]) -> str:
    """Why a step stops: the filter, the counts, and what to change."""
    counts = ", ".join(f"{reason} {n}" for reason, n in sorted(filtered.items())) or "none"
    return (f"dynamic sampling could not fill the batch: {passed} of {wanted} {what} passed after {consumed} were "
            f"consumed, and max_groups_per_step is {limit} (dropped by reason: {counts}; filters: {filters}). "
            "Too few groups of this data and policy pass the filter: loosen or remove the filter, or raise "
            "max_groups_per_step.")
