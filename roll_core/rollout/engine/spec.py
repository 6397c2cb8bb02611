"""What a rollout needs to know, as small picklable dataclasses.

The pipeline config (pydantic, ROLL field names) stays in the driver; env-manager actors receive a
:class:`WorkerSpec` built from it. Keeping these plain dataclasses (no pydantic, no torch) keeps
actor start-up light and lets tests build a rollout without a YAML file.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from roll_core.errors import ConfigError
from roll_core.rollout.dynamic_sampling import UNFILLED_BATCH
from roll_core.run import AgentBinding, EnvBinding
from roll_core.strategies.base import SamplingParams

#: ``mode`` values: which env manager of the config (and which seed stream) a rollout uses.
MODES = ("train", "val")
#: sample layouts the batch builder produces (an advantage estimator's ``granularity`` option).
GRANULARITIES = ("trajectory", "step")


@dataclass(frozen=True)
class EnvSpec:
    """One env type as ``custom_envs[tag]`` describes it, bound to its registration and config."""

    tag: str
    #: the registration and validated env_config (roll_core.config.resolve binds it); an
    #: :class:`AgentBinding` for tags played by OpenAI-API agent code (roll_core.rollout.agents.agent)
    env: EnvBinding | AgentBinding
    max_steps: int | None = None  # turns per episode (``custom_envs.<tag>.max_steps``); agents: model calls
    max_tokens_per_step: int | None = None  # caps max_new_tokens of every turn
    history_window: int | None = None  # step-wise rollouts: turns of history in each prompt (None: all)
    system_template: str | None = None  # ``agent_system_template``: replaces / wraps the env instruction
    turn_template: str | None = None  # ``agent_template``: the per-turn user message (roll_core.envs.prompt)

    @property
    def is_agent(self) -> bool:
        """Whether agent code plays this tag (through the gateway) rather than a text env."""
        return isinstance(self.env, AgentBinding)


def new_api_key() -> str:
    return "roll-" + secrets.token_urlsafe(24)


@dataclass(frozen=True)
class GatewaySpec:
    """The OpenAI-compatible gateway of agent tags (``agent_gateway`` in the config; roll_core.gateway)."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port; else env-manager worker i listens on port + i
    allow_remote: bool = False  # a host other than loopback is refused without it
    api_key: str = field(default_factory=new_api_key, repr=False)  # a new one per rollout unless the config sets one
    model_name: str = "policy"  # the id /v1/models serves and requests must name
    max_request_bytes: int = 4 << 20


@dataclass(frozen=True)
class RolloutSpec:
    """Everything the rollout engine reads from the config, for one env manager (train or val)."""

    mode: str
    seed: int
    num_env_groups: int
    group_size: int
    max_env_num_per_worker: int
    group_tags: tuple[str, ...]  # tag of each group, index = group id
    envs: Mapping[str, EnvSpec]
    sequence_length: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    policy: str = "model"  # "model" | "random" | "scripted" (see roll_core.rollout.engine.turn_policies)
    policy_options: Mapping[str, Any] = field(default_factory=dict)  # a model-free policy's options (slip_rate)
    async_generation_ratio: float = 0.0
    #: synchronous batches generate in lock-step rounds (reproducible; generate_scheduler.py)
    lockstep: bool = False
    granularity: str = "trajectory"
    group_size_redundancy: int = 0  # extra envs per group; the first group_size to finish count
    max_traj_per_env: int = -1  # new episodes a group may start per training step (-1: no cap)
    render_save_dir: str | None = None
    render_max_trajectories: int = 8  # validation trajectories saved as GIF per pass
    step_timeout_s: float | None = 60.0  # env.reset/env.step slower than this fail the trajectory
    max_episode_retries: int = 8  # attempts of one (group, episode) before the group gives it up
    max_consecutive_env_failures: int = 50  # failed attempts in a row of one env that stop the rollout
    stall_timeout_s: float | None = 1800.0  # a batch without any env call / generation completing stops
    format_penalty: float = 0.0  # added to the reward of a turn without a valid action (env manager level)
    worker_max_restarts: int = 4  # Ray restarts of a crashed env-manager actor
    worker_num_cpus: float = 0.0  # Ray CPU reservation per env-manager actor (they mostly wait)
    worker_resources: Mapping[str, float] = field(default_factory=dict)  # Ray resources per env-manager actor
    #: distribution -> version of the run's plugins; env-manager workers check theirs against it
    plugins: Mapping[str, str] = field(default_factory=dict)
    gateway: GatewaySpec = field(default_factory=GatewaySpec)  # used by agent tags only
    #: the group filter's registration (train only; roll_core.rollout.engine.group_filters), None: keep every group
    group_filter: Any = None
    max_groups_per_step: int | None = None  # groups one step may consume while the filter drops some
    unfilled_batch: str = "stop"  # at max_groups_per_step: stop, or fill with filtered groups (dynamic_sampling.py)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"rollout mode must be one of {MODES}, got {self.mode!r}")
        if self.granularity not in GRANULARITIES:
            raise ConfigError(f"rollout granularity must be one of {GRANULARITIES}, got {self.granularity!r}")
        if self.num_env_groups < 1 or self.group_size < 1:
            raise ConfigError(f"{self.manager_key}: num_env_groups and group_size must be >= 1")
        if len(self.group_tags) != self.num_env_groups:
            raise ConfigError(f"{self.manager_key}: {len(self.group_tags)} group tags for "
                              f"{self.num_env_groups} groups")
        if self.max_consecutive_env_failures < 1:
            raise ConfigError(f"{self.manager_key}.max_consecutive_env_failures must be >= 1")
        if self.unfilled_batch not in UNFILLED_BATCH:
            raise ConfigError(f"unfilled_batch must be one of {sorted(UNFILLED_BATCH)}, got {self.unfilled_batch!r}")
        if self.group_size_redundancy < 0:
            raise ConfigError(f"{self.manager_key}.group_size_redundancy must be >= 0")
        if self.members_per_group > self.max_env_num_per_worker:
            raise ConfigError(
                f"{self.manager_key}.group_size ({self.members_per_group} with redundancy) is larger than "
                f"max_env_num_per_worker ({self.max_env_num_per_worker}); a group lives in one "
                "env-manager worker so that its members can share a seed and restart together. "
                "Raise max_env_num_per_worker."
            )
        missing = sorted(set(self.group_tags) - set(self.envs))
        if missing:
            raise ConfigError(f"{self.manager_key}.tags: no env spec for {missing}")
        for env in self.envs.values():
            if env.history_window is not None and env.history_window < 0:
                raise ConfigError(f"custom_envs.{env.tag}.history_length must be >= 0 (or null: all turns)")
            if env.is_agent and (env.history_window is not None or env.system_template or env.turn_template):
                raise ConfigError(f"custom_envs.{env.tag}: agent code writes its own prompts and history; "
                                  "history_length, agent_template and agent_system_template do not apply")
            if env.is_agent and self.policy == "random":
                raise ConfigError(f"the {self.mode} rollout's policy is 'random', but the tag {env.tag!r} is played "
                                  "by agent code, which has no random actions; use the model or 'scripted' "
                                  "(the agent's expert)")

    @property
    def manager_key(self) -> str:
        return f"{self.mode}_env_manager"

    @property
    def members_per_group(self) -> int:
        """Envs per group: ``group_size`` plus the redundant ones."""
        return self.group_size + self.group_size_redundancy

    @property
    def num_envs(self) -> int:
        return self.num_env_groups * self.members_per_group

    @property
    def groups_per_worker(self) -> int:
        return max(1, self.max_env_num_per_worker // self.members_per_group)

    @property
    def num_workers(self) -> int:
        return len(self.worker_layout)

    @functools.cached_property
    def worker_layout(self) -> tuple[tuple[int, ...], ...]:
        """Group ids of each env-manager worker: whole groups, consecutive ids, ``groups_per_worker``
        at most, and only envs of one Python environment per worker (an env registered with
        ``requirements`` runs in its own, :mod:`roll_core.distributed.env_python`)."""
        layout: list[tuple[int, ...]] = []
        current: list[int] = []
        current_key: str | None = None
        for group, tag in enumerate(self.group_tags):
            python_env = self.envs[tag].env.python_env
            key = python_env.key if python_env is not None else None
            if current and (len(current) >= self.groups_per_worker or key != current_key):
                layout.append(tuple(current))
                current = []
            current_key = key
            current.append(group)
        if current:
            layout.append(tuple(current))
        return tuple(layout)

    def worker_groups(self, worker_index: int) -> list[int]:
        """Group ids hosted by worker ``worker_index`` (see :attr:`worker_layout`)."""
        return list(self.worker_layout[worker_index])

    def worker_python_env(self, worker_index: int) -> Any:
        """The Python environment worker ``worker_index`` runs in (an ``EnvPython``), or None: the trainer's."""
        return self.envs[self.group_tags[self.worker_layout[worker_index][0]]].env.python_env

    def with_(self, **changes: Any) -> RolloutSpec:
        return replace(self, **changes)


def partition_groups(num_groups: int, tags: Sequence[str], partition: Sequence[int] | None,
                     *, key: str = "env_manager") -> tuple[str, ...]:
    """Tag of each group: ``partition[i]`` groups of ``tags[i]``, or an equal split when absent."""
    tags = list(tags)
    if not tags:
        raise ConfigError(f"{key}.tags is empty; name at least one env tag")
    if partition is None:
        base, extra = divmod(num_groups, len(tags))
        partition = [base + (1 if i < extra else 0) for i in range(len(tags))]
    partition = list(partition)
    if len(partition) != len(tags):
        raise ConfigError(f"{key}.num_groups_partition has {len(partition)} entries for {len(tags)} tags")
    if any(p < 0 for p in partition) or sum(partition) != num_groups:
        raise ConfigError(f"{key}.num_groups_partition {partition} must be non-negative and sum to "
                          f"num_env_groups ({num_groups})")
    return tuple(tag for tag, count in zip(tags, partition) for _ in range(count))


def derive_seed(base_seed: int, stream: str, *keys: int) -> int:
    """A 31-bit seed from ``base_seed``, a stream name and integer keys, stable across processes.

    Python's ``hash`` is salted per process, so seeds are derived through blake2b instead: every
    env-manager actor (and a restarted one) computes the same seed for the same (group, episode).
    """
    payload = ",".join([str(int(base_seed)), stream, *(str(int(k)) for k in keys)]).encode()
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little") & 0x7FFFFFFF


def episode_seed(spec: RolloutSpec, group_id: int, episode_id: int) -> int:
    """The env seed of every member of ``group_id`` in episode ``episode_id``."""
    return derive_seed(spec.seed, f"{spec.mode}/env", group_id, episode_id)
