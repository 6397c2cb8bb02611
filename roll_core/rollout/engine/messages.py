"""Messages between env managers and the group queue (small, picklable, no torch).

A :class:`Ticket` admits one group to one episode: every member of the group plays the episode
with the ticket's seed. Env managers send back a :class:`GroupResult` (all members finished) or
a :class:`Release` (the group gave the episode up), so the queue only ever holds complete groups.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

from roll_core.chat.trajectory import Trajectory


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


class GroupResult:
    """A finished group: its ticket, env tag and trajectories (in member order).

    The trajectories travel env manager -> group queue -> driver as one pickled blob: the queue
    routes a group by its ticket, size and policy versions and never looks inside, so it forwards
    the blob instead of unpickling and pickling every trajectory again (that was half of the
    queue's CPU at 1024 envs; docs/benchmarks.md, section 1). They are unpickled on first use.
    """

    __slots__ = ("ticket", "tag", "size", "min_version", "max_version", "_trajectories", "_blob")

    def __init__(self, ticket: Ticket, tag: str, trajectories: list[Trajectory]):
        self.ticket, self.tag = ticket, tag
        self._trajectories: list[Trajectory] | None = list(trajectories)
        self._blob: bytes | None = None
        self.size = len(self._trajectories)
        self.min_version = min((t.min_version for t in self._trajectories), default=-1)
        self.max_version = max((t.max_version for t in self._trajectories), default=-1)

    @property
    def trajectories(self) -> list[Trajectory]:
        if self._trajectories is None:
            self._trajectories, self._blob = pickle.loads(self._blob), None
        return self._trajectories

    def __getstate__(self) -> tuple:
        blob = self._blob if self._trajectories is None else pickle.dumps(self._trajectories, protocol=5)
        return self.ticket, self.tag, self.size, self.min_version, self.max_version, blob

    def __setstate__(self, state: tuple) -> None:
        self.ticket, self.tag, self.size, self.min_version, self.max_version, self._blob = state
        self._trajectories = None

    def __repr__(self) -> str:
        return f"GroupResult({self.ticket!r}, {self.tag!r}, {self.size} trajectories)"


@dataclass(frozen=True)
class Release:
    """The group gave up ``ticket``'s episode (a member kept failing, or its group filter dropped it);
    the queue may admit another."""

    ticket: Ticket
    reason: str
    #: the group finished but its group filter dropped it (``reason`` is the filter's): counted as
    #: filtered, not as a failure, and replaced by a fresh group-episode
    filtered: bool = False
    #: the filtered group itself, sent only when a batch may be completed with filtered groups
    #: (``unfilled_batch: fill``); None otherwise
    group: GroupResult | None = None


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
