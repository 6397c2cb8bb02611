"""When may a group start an episode, and which one: the group queue's admission policies.

Admitting episodes (instead of letting every env loop run freely and discarding the surplus) is
what makes sync mode exact: a batch of n trajectories admits n / group_size group-episodes, env
loops then wait for the next ``get_batch``, and nothing generated is thrown away. The same hook
is where an asynchronous pipeline keeps generation ahead of training (``LookaheadAdmission``).

* :class:`DemandAdmission` -- training, ``async_generation_ratio: 0``.
* :class:`LookaheadAdmission` -- training, ``async_generation_ratio: k > 0``: up to k extra
  batches of groups run while the trainer trains.
* :class:`PlannedAdmission` -- validation: each ``get_batch`` is a pass over the same
  (group, episode) pairs, so every evaluation sees the same seeded instances.
"""

from __future__ import annotations

import abc
from collections import deque


class Admission(abc.ABC):
    """Decides whether a waiting group may start an episode, and which episode id it plays."""

    #: validation passes restart episode ids at 0 every ``get_batch``
    per_pass: bool = False

    def __init__(self, num_groups: int):
        self.num_groups = num_groups
        self.next_episode = [0] * num_groups
        self.returned: list[deque[int]] = [deque() for _ in range(num_groups)]

    def start_request(self, groups: int) -> None:
        """A ``get_batch`` asks for ``groups`` more complete groups."""

    def end_request(self, groups: int) -> None:
        """That ``get_batch`` returned (or gave up)."""

    @abc.abstractmethod
    def allows(self, group_id: int, busy: int) -> bool:
        """May ``group_id`` start an episode now? ``busy`` = admitted but unconsumed group-episodes."""

    def take_episode(self, group_id: int) -> int:
        if self.returned[group_id]:
            return self.returned[group_id].popleft()
        episode = self.next_episode[group_id]
        self.next_episode[group_id] += 1
        return episode

    def give_back(self, group_id: int, episode_id: int) -> None:
        """An admitted episode will not come (its worker died): admit it again first (same seed)."""
        self.returned[group_id].appendleft(episode_id)

    def released(self, group_id: int, episode_id: int) -> None:
        """The group gave the episode up (a member kept failing); nothing to do when admitting on demand."""

    def forget(self, group_id: int, episode_id: int) -> None:
        """A given-back episode was delivered after all (the worker was only slow)."""
        if episode_id in self.returned[group_id]:
            self.returned[group_id].remove(episode_id)


class DemandAdmission(Admission):
    """Admit exactly as many group-episodes as pending ``get_batch`` calls still need.

    ``max_per_group`` (``max_traj_per_env``) caps the new episodes one group starts between two
    ``get_batch`` calls, so fast groups cannot fill a batch on their own (None: no cap).
    """

    def __init__(self, num_groups: int, max_per_group: int | None = None):
        super().__init__(num_groups)
        self.demand = 0
        self.max_per_group = max_per_group
        self.started = [0] * num_groups

    def start_request(self, groups: int) -> None:
        self.demand += groups
        self.started = [0] * self.num_groups

    def end_request(self, groups: int) -> None:
        self.demand -= groups

    def capacity(self) -> int:
        return self.demand

    def allows(self, group_id: int, busy: int) -> bool:
        under_cap = self.max_per_group is None or self.started[group_id] < self.max_per_group
        return busy < self.capacity() and under_cap

    def take_episode(self, group_id: int) -> int:
        if not self.returned[group_id]:  # a re-admitted episode was counted when it first started
            self.started[group_id] += 1
        return super().take_episode(group_id)


class LookaheadAdmission(DemandAdmission):
    """Keep ``ratio`` (k) batches of groups generating ahead of the trainer (async training).

    Why k batches and no more: batches are served oldest admission first, so a group admitted at
    version v has fewer than ``demand + k * batch`` groups ahead of it and is served by one of the
    next k batches after the pending one, i.e. while the trainer is at version v + k at the latest.
    Admitting more would start work that could only be dropped as stale. What can still go stale
    is a group that finishes after younger ones (served out of order); env loops stop it as soon as
    its oldest turn falls more than k versions behind (roll_core.rollout.env_manager).
    """

    def __init__(self, num_groups: int, ratio: float, max_per_group: int | None = None):
        super().__init__(num_groups, max_per_group)
        self.ratio = ratio
        self.batch_groups = 0

    def start_request(self, groups: int) -> None:
        super().start_request(groups)
        self.batch_groups = max(self.batch_groups, groups)

    def capacity(self) -> int:
        return self.demand + int(self.ratio * self.batch_groups)


class PlannedAdmission(Admission):
    """Validation: a pass runs the first n/group_size (group, episode) pairs in a fixed order."""

    per_pass = True

    def __init__(self, num_groups: int):
        super().__init__(num_groups)
        self.plan: list[deque[int]] = [deque() for _ in range(num_groups)]

    def start_request(self, groups: int) -> None:
        self.plan = [deque() for _ in range(self.num_groups)]
        for i in range(groups):
            episode, group = divmod(i, self.num_groups)
            self.plan[group].append(episode)
        self.next_episode = [len(p) for p in self.plan]

    def released(self, group_id: int, episode_id: int) -> None:
        """A given-up instance is replaced by the group's next unplanned one, so the pass completes."""
        self.plan[group_id].append(super().take_episode(group_id))

    def end_request(self, groups: int) -> None:
        self.plan = [deque() for _ in range(self.num_groups)]

    def allows(self, group_id: int, busy: int) -> bool:
        return bool(self.plan[group_id])

    def take_episode(self, group_id: int) -> int:
        return self.plan[group_id].popleft()

    def give_back(self, group_id: int, episode_id: int) -> None:
        self.plan[group_id].appendleft(episode_id)

    def forget(self, group_id: int, episode_id: int) -> None:
        if episode_id in self.plan[group_id]:
            self.plan[group_id].remove(episode_id)


#: rollout mode -> admission policy (training switches to lookahead when async)
ADMISSIONS: dict[str, type[Admission]] = {"train": DemandAdmission, "val": PlannedAdmission}


def make_admission(mode: str, num_groups: int, async_generation_ratio: float,
                   max_per_group: int | None = None) -> Admission:
    """Validation plans its passes; training admits on demand, with lookahead when async.

    A validation pass spreads its episodes evenly over the groups, so ``max_per_group`` (checked
    against ``val_batch_size`` by the config) needs no enforcing there.
    """
    cls = ADMISSIONS[mode]
    if cls is DemandAdmission and async_generation_ratio > 0:
        return LookaheadAdmission(num_groups, async_generation_ratio, max_per_group)
    if cls is DemandAdmission:
        return cls(num_groups, max_per_group)
    return cls(num_groups)
