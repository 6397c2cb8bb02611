"""Group filters (agentic dynamic sampling): groups that would teach nothing are replaced, not trained on.

ROLL's ``group_filter_cls``, chosen by registered name (hook ``roll_register_group_filters``).
The env manager that completes a group asks the filter first; a dropped group is reported to the
group queue as a filtered release (never as a group), and the queue admits a fresh group-episode
(a new seed) in its place: :class:`~roll_core.rollout.engine.admission.DemandAdmission` plans one more
group, :class:`~roll_core.rollout.engine.admission.LookaheadAdmission` sees capacity freed. So a batch
keeps its size and the staleness bound holds as for any other group. ``max_groups_per_step``
bounds what one step may consume (:mod:`roll_core.rollout.dynamic_sampling`); reached before the batch
is full, the queue stops the run with the counts, or (``unfilled_batch: fill``) completes the batch
with the latest filtered groups, which then travel with their releases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: returns closer than this count as equal (rewards are sums of a few floats)
EQUAL_RETURNS_TOL = 1e-6


class KeepAll:
    """ROLL's default ``GroupFilter``: every group is kept."""

    def filter(self, group_id: int, episode_id: int, group: Sequence[Any]) -> bool:
        return False


class EqualReturns:
    """Drop a group whose episodes all earned the same return.

    With group-normalised advantages (GRPO, StarPO) such a group's advantages are all zero: it
    costs a training step's compute and teaches nothing (docs/learning.md: FrozenLake seed 43).
    """

    def filter(self, group_id: int, episode_id: int, group: Sequence[Any]) -> bool:
        returns = [float(t.episode_reward) for t in group]
        return len(returns) > 1 and max(returns) - min(returns) <= EQUAL_RETURNS_TOL


class EqualSuccess:
    """Drop a group whose episodes all succeeded or all failed.

    :class:`EqualReturns` for shaped rewards: with a per-step penalty (``ineffective_penalty``) two
    failed episodes seldom earn the same return, so a group of failures would be kept, though it
    holds nothing of the task's goal; this keeps groups that hold both outcomes (DAPO's accuracy
    filter, per group of episodes).
    """

    def filter(self, group_id: int, episode_id: int, group: Sequence[Any]) -> bool:
        outcomes = {t.metrics.get("success", 0.0) > 0 for t in group}
        return len(group) > 1 and len(outcomes) == 1


class BoundFilter:
    """A loaded filter as the env manager calls it: the verdict as a reason string, or None to keep."""

    def __init__(self, name: str, instance: Any):
        self.name = name
        self.instance = instance

    @classmethod
    def load(cls, registration: Any) -> BoundFilter:
        from roll_core.errors import PluginError

        target = registration.load()
        instance = target() if isinstance(target, type) else target
        if not callable(getattr(instance, "filter", None)):
            raise PluginError(f"The group filter {registration.name!r} from plugin {registration.plugin!r} points "
                              f"at {registration.target!r}, which has no filter(group_id, episode_id, group) "
                              "method. This is a bug in that plugin.")
        return cls(registration.name, instance)

    def reason(self, group_id: int, episode_id: int, group: Sequence[Any]) -> str | None:
        verdict = self.instance.filter(group_id, episode_id, list(group))
        if not verdict:
            return None
        return verdict if isinstance(verdict, str) else self.name
