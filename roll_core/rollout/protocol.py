"""Messages between env managers and the group queue (small, picklable, no torch).

A :class:`Ticket` admits one group to one episode: every member of the group plays the episode
with the ticket's seed. Env managers send back a :class:`GroupResult` (all members finished) or
a :class:`Release` (the group gave the episode up), so the queue only ever holds complete groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roll_core.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class Ticket:
    group_id: int
    episode_id: int
    seed: int
    version: int  # policy version when the episode was admitted
    pass_id: int = 0  # validation pass (0 for training)
    serial: int = 0  # admission order: "oldest group first" is the lowest serial

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.pass_id, self.group_id, self.episode_id)


@dataclass
class GroupResult:
    ticket: Ticket
    tag: str
    trajectories: list[Trajectory]

    @property
    def min_version(self) -> int:
        return min(t.min_version for t in self.trajectories)

    @property
    def max_version(self) -> int:
        return max(t.max_version for t in self.trajectories)


@dataclass(frozen=True)
class Release:
    """The group gave up ``ticket``'s episode (a member kept failing); the queue may admit another."""

    ticket: Ticket
    reason: str


@dataclass
class Report:
    """One flush of an env manager's outbox."""

    groups: list[GroupResult] = field(default_factory=list)
    releases: list[Release] = field(default_factory=list)
    drops: dict[str, int] = field(default_factory=dict)  # dropped trajectories by reason
    progress: int = 0  # env calls and generations completed since the last report
    last_failure: str | None = None  # the latest dropped attempt: env tag, reason, first line of the error
    fatal: str | None = None  # a fault no retry heals: the rollout must stop (the message says why)

    def __bool__(self) -> bool:
        return bool(self.groups or self.releases or self.drops or self.progress or self.fatal)
