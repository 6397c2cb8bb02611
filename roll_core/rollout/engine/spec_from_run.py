"""A resolved run (ROLL field names) -> the :class:`RolloutSpec` of its train or val env manager.

Only what the rollout needs is read, and nothing here needs a strategy plugin or a model: a
ROLL config written for GPUs (megatron, vLLM) rolls out with a model-free policy on a laptop
(``resolve(config, roles=())`` binds the envs and nothing else). The envs come bound from the
:class:`~roll_core.run.Run`, so nothing is looked up or validated again here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roll_core.errors import ConfigError
from roll_core.rollout.engine.spec import EnvSpec, GatewaySpec, RolloutSpec, partition_groups
from roll_core.rollout.engine.turn_policies import check_policy
from roll_core.strategies.base import SamplingParams
from roll_core.strategies.generating_args import sampling_from_generating_args

if TYPE_CHECKING:
    from roll_core.run import Run

#: mode -> (env manager section, batch size key)
SECTIONS: dict[str, tuple[str, str]] = {
    "train": ("train_env_manager", "rollout_batch_size"),
    "val": ("val_env_manager", "val_batch_size"),
}


def sampling_from_config(config: Any, mode: str) -> SamplingParams:
    """``actor_infer.generating_args`` as :class:`SamplingParams` (the shared converter); validation is greedy."""
    return sampling_from_generating_args(config.actor_infer.generating_args, greedy=mode == "val")


def env_specs(run: Run, tags: list[str]) -> dict[str, EnvSpec]:
    """One :class:`EnvSpec` per tag, from the run's bound env and its ``custom_envs`` entry."""
    specs = {}
    for tag in tags:
        entry = run.config.custom_envs.get(tag)
        extra: dict[str, Any] = {}
        if entry is not None:
            extra = dict(max_steps=entry.max_steps, max_tokens_per_step=entry.max_tokens_per_step,
                         history_window=entry.history_length, system_template=entry.agent_system_template,
                         turn_template=entry.agent_template)
        binding = run.agents[tag] if tag in getattr(run, "agents", {}) else run.envs[tag]
        specs[tag] = EnvSpec(tag=tag, env=binding, **extra)
    return specs


def gateway_spec(config: Any) -> GatewaySpec:
    """``agent_gateway`` as the env managers' gateways use it (a fresh API key unless one is set)."""
    from roll_core.run import model_path

    gateway = config.agent_gateway
    values: dict[str, Any] = dict(host=gateway.host, port=gateway.port, allow_remote=gateway.allow_remote,
                                  max_request_bytes=gateway.max_request_bytes,
                                  model_name=gateway.model_name or model_path(config, "actor_infer", required=False)
                                  or "policy")
    if gateway.api_key:
        values["api_key"] = gateway.api_key
    return GatewaySpec(**values)


def rollout_spec(run: Run, mode: str = "train", *, policy: str | None = None, **overrides: Any) -> RolloutSpec:
    """The rollout of the run's ``<mode>_env_manager``; ``overrides`` set RolloutSpec fields."""
    if mode not in SECTIONS:
        raise ConfigError(f"rollout mode must be one of {', '.join(SECTIONS)}, got {mode!r}")
    config = run.config
    section, _ = SECTIONS[mode]
    manager = getattr(config, section)
    tags = list(manager.tags)
    group_tags = partition_groups(manager.num_env_groups, tags, manager.num_groups_partition, key=section)
    sequence_length = (
        (config.val_sequence_length if mode == "val" else None) or config.effective_sequence_length
    )
    if sequence_length is None:
        raise ConfigError("set sequence_length: it bounds the tokens of every trajectory")
    policy = check_policy(policy or manager.llm_proxy.proxy_type)
    values: dict[str, Any] = dict(
        mode=mode,
        seed=config.val_seed if mode == "val" and config.val_seed is not None else config.seed,
        num_env_groups=manager.num_env_groups,
        group_size=manager.group_size,
        group_size_redundancy=manager.group_size_redundancy,
        max_traj_per_env=manager.max_traj_per_env,
        worker_resources=dict(manager.ray_resources),
        max_env_num_per_worker=manager.max_env_num_per_worker or manager.num_envs,
        group_tags=group_tags,
        envs=env_specs(run, sorted(set(tags))),
        sequence_length=sequence_length,
        sampling=sampling_from_config(config, mode),
        policy=policy,
        async_generation_ratio=float(config.async_generation_ratio) if mode == "train" else 0.0,
        lockstep=reproducible_generation(config),
        granularity=run.granularity,
        render_save_dir=config.render_save_dir,
        format_penalty=manager.format_penalty,
        step_timeout_s=manager.env_step_timeout_s,
        max_consecutive_env_failures=manager.max_consecutive_env_failures,
        stall_timeout_s=manager.stall_timeout_s,
        plugins=dict(run.plugins),
        gateway=gateway_spec(config),
        group_filter=getattr(run, "group_filter", None) if mode == "train" else None,
        max_groups_per_step=config.max_groups_per_step,
        unfilled_batch=config.unfilled_batch,
    )
    values.update(overrides)
    return RolloutSpec(**values)


def reproducible_generation(config: Any) -> bool:
    """``reproducible_generation`` as it applies: a synchronous run's setting, by default on without GPUs."""
    if float(config.async_generation_ratio) != 0:
        return False
    if config.reproducible_generation is not None:
        return bool(config.reproducible_generation)
    import ray

    from roll_core.distributed.placement import cluster_gpus

    return not ray.is_initialized() or cluster_gpus() == 0


def batch_size_from_config(config: Any, mode: str) -> int:
    """``rollout_batch_size`` / ``val_batch_size`` (negative: every env of the manager once)."""
    section, key = SECTIONS[mode]
    size = int(getattr(config, key))
    manager = getattr(config, section)
    return size if size > 0 else manager.num_env_groups * manager.group_size
