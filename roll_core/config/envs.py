"""Agentic env sections: ``train_env_manager`` / ``val_env_manager`` and ``custom_envs``.

``num_env_groups`` groups of ``group_size`` envs; all envs of a group replay the same seed, which
is what group baselines (GRPO, StarPO) need. Env types are spread over groups by ``tags`` and
``num_groups_partition``; when the partition is absent the groups are split equally (roll's
decision; ROLL defaults it to ``[128]``). ``env_config`` stays a free mapping here: ``resolve``
validates it against the selected env plugin's ``config_model``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from roll_core.config.base import FreeDict, NoneStr, RollModel, compat
from roll_core.config.workers import (
    DataArgs,
    DeviceMapping,
    GeneratingArgs,
    ModelArgs,
    StrategyArgs,
    TrainingArgs,
    WorkerConfig,
)
from roll_core.gateway.exposure import is_loopback, remote_host_error

#: ROLL's default ``group_filter_cls`` class paths (they keep every group): roll's ``keep_all`` filter
ROLL_KEEP_ALL_FILTERS = ("roll.pipeline.agentic.agentic_pipeline.GroupFilter",
                         "roll.pipeline.agentic.env_manager.agent_native_env_manager.GroupFilter")

#: why an env manager's model / device fields do nothing (ROLL's env managers derive from WorkerConfig)
_ENV_WORKER = "Env managers run envs on CPU; the model, its backend and devices are actor_infer's."


class LLMProxyConfig(RollModel):
    """Who answers the env's prompts (ROLL: policy, openai, random)."""

    proxy_type: str = "policy"
    proxy_config: FreeDict = compat({}, "roll's proxies (policy, random, scripted) take no settings.")


class EnvManagerConfig(WorkerConfig):
    """How many envs of which tags run, and how they are grouped and placed on workers."""

    num_env_groups: int = Field(128, ge=1, description="Number of env groups.")
    group_size: int = Field(1, ge=1, description="Envs per group; a group shares config and seed.")
    group_size_redundancy: int = Field(0, ge=0, description="Extra envs per group (the fastest ones win).")
    tags: list[str] = Field(
        default_factory=lambda: ["SimpleSokoban"], min_length=1,
        description="Env tags: custom_envs keys or registered env names/tags.",
    )
    num_groups_partition: list[int] | None = Field(
        None, description="Groups per tag, in tags order; unset: split equally."
    )
    max_env_num_per_worker: int = Field(0, ge=0, description="Envs per env-manager worker; 0: all in one.")
    max_traj_per_env: int = Field(
        -1, description="Episodes each env group may start per training step (per validation pass); -1: no cap."
    )
    format_penalty: float = Field(0.0, description="Reward of a response without a valid action.")
    llm_proxy: LLMProxyConfig = Field(default_factory=LLMProxyConfig)
    # -- roll's bounds on a faulty env (roll_core.rollout.engine.env_manager); defaults never trigger in a healthy run
    env_step_timeout_s: float | None = Field(
        60.0, gt=0, description="Seconds one env.reset / env.step may take; a slower call is abandoned (the env "
        "is replaced, its thread no longer counted) and the attempt dropped as a timeout. null: no limit."
    )
    max_consecutive_env_failures: int = Field(
        50, ge=1, description="Failed attempts in a row (errors, timeouts, episodes that cannot start) after "
        "which one env stops the run with its last error, instead of retrying forever."
    )
    stall_timeout_s: float | None = Field(
        1800.0, gt=0, description="Seconds a batch may wait without any env call or generation of this env "
        "manager completing; then the run stops with the last failure. null: no limit."
    )
    group_filter_cls: Annotated[str | None, NoneStr] = Field(
        None, description="Training: a registered group filter (`roll plugins list`; built-in: equal_returns) that "
        "drops complete groups before they reach the trainer; a fresh group (new seed) takes each one's place. "
        "ROLL's default class (keeps every group) is accepted. Validation never filters."
    )
    model_args: ModelArgs = compat(ModelArgs(), _ENV_WORKER)
    training_args: TrainingArgs = compat(TrainingArgs(), _ENV_WORKER)
    generating_args: GeneratingArgs | None = compat(None, _ENV_WORKER)
    data_args: DataArgs | None = compat(None, _ENV_WORKER)
    strategy_args: StrategyArgs | None = compat(None, _ENV_WORKER)
    device_mapping: DeviceMapping = compat(None, _ENV_WORKER)
    num_gpus_per_worker: int = compat(1, _ENV_WORKER)
    world_size: int | None = compat(None, _ENV_WORKER)
    infer_batch_size: int = compat(16, _ENV_WORKER)

    @field_validator("max_traj_per_env")
    @classmethod
    def _positive_or_unlimited(cls, value: Any) -> Any:
        if value == 0 or value < -1:
            raise ValueError(f"max_traj_per_env must be a positive number of episodes or -1 (no cap), got {value}")
        return value

    @property
    def final_group_size(self) -> int:
        """Envs actually started per group (``group_size`` plus redundancy)."""
        return self.group_size + self.group_size_redundancy

    @property
    def num_envs(self) -> int:
        return self.num_env_groups * self.final_group_size

    def partition(self) -> dict[str, int]:
        """Groups per tag: the configured partition, or an equal split (earlier tags get the rest)."""
        if self.num_groups_partition is not None:
            return dict(zip(self.tags, self.num_groups_partition, strict=True))
        share, rest = divmod(self.num_env_groups, len(self.tags))
        return {tag: share + (1 if i < rest else 0) for i, tag in enumerate(self.tags)}

    def partition_problems(self, path: str) -> list[str]:
        """Why tags / num_groups_partition / num_env_groups do not fit together (empty when they do)."""
        problems = []
        duplicates = sorted({t for t in self.tags if self.tags.count(t) > 1})
        if duplicates:
            problems.append(f"{path}.tags lists {', '.join(map(repr, duplicates))} more than once")
        partition = self.num_groups_partition
        if partition is None:
            if self.num_env_groups < len(self.tags):
                problems.append(
                    f"{path}.num_env_groups ({self.num_env_groups}) is smaller than the number of tags "
                    f"({len(self.tags)}), so some tag would get no env group; raise num_env_groups or set "
                    f"{path}.num_groups_partition"
                )
            return problems
        if len(partition) != len(self.tags):
            problems.append(
                f"{path}.num_groups_partition has {len(partition)} entries {partition} but {path}.tags has "
                f"{len(self.tags)} {self.tags}; give one group count per tag"
            )
        if any(n < 0 for n in partition):
            problems.append(f"{path}.num_groups_partition {partition} has a negative group count")
        empty = [tag for tag, n in zip(self.tags, partition) if n == 0]
        if empty and len(partition) == len(self.tags):
            problems.append(
                f"{path}.num_groups_partition {partition} gives {', '.join(map(repr, empty))} no env group, so "
                f"{'that tag' if len(empty) == 1 else 'those tags'} would never be played; remove "
                f"{'it' if len(empty) == 1 else 'them'} from {path}.tags or give each tag at least one group"
            )
        if sum(partition) != self.num_env_groups:
            problems.append(
                f"{path}.num_groups_partition {partition} sums to {sum(partition)}, but {path}.num_env_groups "
                f"is {self.num_env_groups}; they must be equal"
            )
        return problems


class AgentGatewayConfig(RollModel):
    """The OpenAI-compatible endpoint agents talk to (one per env-manager worker; see roll_core.gateway)."""

    host: str = Field("127.0.0.1", description="Listen address; anything but loopback needs allow_remote.")
    allow_remote: bool = Field(False, description="Accept a host other than loopback: the calls and the API key "
                                                  "then travel in plain HTTP on the network.")
    port: int = Field(0, ge=0, le=65535,
                      description="0: a free port per env-manager worker; else worker i listens on port + i.")
    api_key: str | None = Field(None, description="Bearer key clients must send; unset: a random key per run.")
    model_name: str | None = Field(None, description="The model id served at /v1/models; unset: pretrain.")
    max_request_bytes: int = Field(4 << 20, ge=1024, description="Larger request bodies are refused (413).")

    @model_validator(mode="after")
    def _loopback_unless_allowed(self) -> AgentGatewayConfig:
        if not self.allow_remote and not is_loopback(self.host):
            raise ValueError(remote_host_error(self.host))
        return self


class CustomEnvConfig(RollModel):
    """One ``custom_envs`` entry: an env plugin plus its settings, selected by its tag."""

    env_type: str = Field(description="A registered env name or tag (`roll plugins list`).")
    env_config: FreeDict = Field(
        default_factory=dict, description="Settings validated by the env's config_model at resolve time."
    )
    max_tokens_per_step: int | None = Field(None, ge=1, description="Generation cap of one turn.")
    max_steps: int | None = Field(None, ge=1, description="Turns per episode.")
    agent_system_template: str | None = Field(None, description="System prompt template of the agent.")
    agent_template: str | None = Field(None, description="Per-turn user prompt template.")
    history_length: int | None = Field(None, ge=0, description="Turns of history shown (step-wise rollout).")
    reward: str | None = Field(
        None, description="Agents: a registered reward function scoring the final conversation when the "
                          "agent returns no reward itself.")
    env_manager_cls: str | None = compat(None, "roll picks the env manager from the estimator's granularity.")
    use_thread_lock: bool = compat(False)
    max_env_step_concurrent: int | None = compat(None)
