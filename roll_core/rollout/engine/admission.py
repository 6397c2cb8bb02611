"""When may a group start an episode, and which one: the group queue's admission policies.

Admitting episodes (instead of letting every env loop run freely and discarding the surplus) is
what makes sync mode exact: a batch of n trajectories admits n / group_size group-episodes, env
loops then wait for the next ``get_batch``, and nothing generated is thrown away. The same hook
is where an asynchronous pipeline keeps generation ahead of training (``LookaheadAdmission``).

* :class:`DemandAdmission` -- training, ``async_generation_ratio: 0``: exactly the groups a batch
  needs, planned round-robin (reproducible).
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

    def __init__(self, num_groups: int, max_per_group: int | None = None):
        self.num_groups = num_groups
        self.next_episode = [0] * num_groups
        self.returned: list[deque[int]] = [deque() for _ in range(num_groups)]
        #: ``max_traj_per_env``: new episodes one group may start per ``get_batch`` (None: no cap)
        self.max_per_group = max_per_group
        self.started = [0] * num_groups

    def start_request(self, groups: int) -> None:
        """A ``get_batch`` asks for ``groups`` more complete groups."""

    def end_request(self, groups: int) -> None:
        """That ``get_batch`` returned (or gave up)."""

    @abc.abstractmethod
    def allows(self, group_id: int, busy: int) -> bool:
        """May ``group_id`` start an episode now? ``busy`` = admitted but unconsumed group-episodes."""

    def take_episode(self, group_id: int) -> int:
        if self.returned[group_id]:  # a re-admitted episode was counted when it first started
            return self.returned[group_id].popleft()
        self.started[group_id] += 1
        episode = self.next_episode[group_id]
        self.next_episode[group_id] += 1
        return episode

    def under_cap(self, group_id: int, planned: int = 0) -> bool:
        """Whether ``group_id`` may start another episode in this ``get_batch`` (``max_traj_per_env``)."""
        return self.max_per_group is None or self.started[group_id] + planned < self.max_per_group

    def give_back(self, group_id: int, episode_id: int) -> None:
        """An admitted episode will not come (its worker died): admit it again first (same seed)."""
        self.returned[group_id].appendleft(episode_id)

    def released(self, group_id: int, episode_id: int) -> None:
        """The group gave the episode up (a member kept failing); nothing to do when admitting on demand."""

    def forget(self, group_id: int, episode_id: int) -> None:
        """A given-back episode was delivered after all (the worker was only slow)."""
        if episode_id in self.returned[group_id]:
            self.returned[group_id].remove(episode_id)

    def state_dict(self) -> dict[str, int]:
        """What a resumed run needs besides the episode counters (the group queue saves those)."""
        return {}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore :meth:`state_dict`."""


class DemandAdmission(Admission):
    """Sync training: each ``get_batch`` of k groups plans the next k group-episodes round-robin.

    Which groups play is decided by the plan, never by which env loop asks first: with more groups
    than a batch needs (a warm start's 64 single-env groups, 16 a batch), the batch is the same
    instances in every run, so a sync run is reproducible. The cursor moves on across batches (and
    is checkpointed). ``max_per_group`` (``max_traj_per_env``) caps the episodes one group starts
    per ``get_batch``: the plan skips a group at its cap.
    """

    def __init__(self, num_groups: int, max_per_group: int | None = None):
        super().__init__(num_groups, max_per_group)
        self.demand = 0
        self.cursor = 0
        self.planned = [0] * num_groups

    def start_request(self, groups: int) -> None:
        self.demand += groups
        self.started = [0] * self.num_groups
        for _ in range(groups):
            self._plan_next()

    def _plan_next(self) -> None:
        for _ in range(self.num_groups):
            group, self.cursor = self.cursor, (self.cursor + 1) % self.num_groups
            if self.under_cap(group, self.planned[group]):
                self.planned[group] += 1
                return

    def end_request(self, groups: int) -> None:
        self.demand -= groups
        if self.demand <= 0:  # a request that gave up leaves no plan behind
            self.demand, self.planned = 0, [0] * self.num_groups

    def allows(self, group_id: int, busy: int) -> bool:
        return self.planned[group_id] > 0

    def take_episode(self, group_id: int) -> int:
        self.planned[group_id] -= 1
        return super().take_episode(group_id)

    def give_back(self, group_id: int, episode_id: int) -> None:
        super().give_back(group_id, episode_id)
        self.planned[group_id] += 1  # the same episode, replayed

    def released(self, group_id: int, episode_id: int) -> None:
        """A given-up episode is replaced by one of the next group in the plan, so the batch still
        fills even when one group's env keeps failing."""
        self._plan_next()

    def state_dict(self) -> dict[str, int]:
        return {"cursor": self.cursor}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.cursor = int(state.get("cursor", 0)) % self.num_groups


class LookaheadAdmission(Admission):
    """Async training: keep ``ratio`` (k) batches of groups generating ahead of the trainer.

    First come, first admitted: generation is timing-dependent anyway in async mode, and a free
    env loop starting at once is what hides stragglers. Why k batches and no more: batches are
    served oldest admission first, so a group admitted at version v has fewer than ``demand + k *
    batch`` groups ahead of it and is served by one of the next k batches after the pending one,
    i.e. while the trainer is at version v + k at the latest. Admitting more would start work that
    could only be dropped as stale. What can still go stale is a group that finishes after younger
    ones (served out of order); env loops stop it as soon as its oldest turn falls more than k
    versions behind (roll_core.rollout.engine.env_manager). ``max_per_group`` caps new episodes of a
    group between two ``get_batch`` calls.
    """

    def __init__(self, num_groups: int, ratio: float, max_per_group: int | None = None):
        super().__init__(num_groups, max_per_group)
        self.ratio = ratio
        self.batch_groups = 0
        self.demand = 0

    def start_request(self, groups: int) -> None:
        self.demand += groups
        self.batch_groups = max(self.batch_groups, groups)
        self.started = [0] * self.num_groups

    def end_request(self, groups: int) -> None:
        self.demand -= groups

    def capacity(self) -> int:
        return self.demand + int(self.ratio * self.batch_groups)

    def allows(self, group_id: int, busy: int) -> bool:
        return busy < self.capacity() and self.under_cap(group_id)


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
