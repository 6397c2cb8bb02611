"""An agentic config (ROLL field names) -> the :class:`RolloutSpec` of its train or val env manager.

Only what the rollout needs is read, and nothing here needs a strategy plugin or a model: a
ROLL config written for GPUs (megatron, vLLM) rolls out with a model-free policy on a laptop.
Env names are checked against the registry here, so a typo fails before any actor starts.
"""

from __future__ import annotations

from typing import Any

from roll_core.errors import ConfigError
from roll_core.rollout.policies import check_policy
from roll_core.rollout.spec import EnvSpec, RolloutSpec, partition_groups
from roll_core.strategies.base import SamplingParams

#: mode -> (env manager section, batch size key)
SECTIONS: dict[str, tuple[str, str]] = {
    "train": ("train_env_manager", "rollout_batch_size"),
    "val": ("val_env_manager", "val_batch_size"),
}


def sampling_from_config(config: Any, mode: str) -> SamplingParams:
    """``actor_infer.generating_args`` as :class:`SamplingParams`; validation samples greedily."""
    args = config.actor_infer.generating_args
    return SamplingParams(
        max_new_tokens=args.max_new_tokens or 128,
        temperature=0.0 if mode == "val" else args.temperature,
        top_p=args.top_p,
        top_k=args.top_k if args.top_k and args.top_k > 0 else 0,
        stop_strings=tuple(args.stop_strings or ()),
    )


def env_specs_from_config(config: Any, tags: list[str], *, registry: Any = None) -> dict[str, EnvSpec]:
    """One :class:`EnvSpec` per tag: its ``custom_envs`` entry, else the env registered under the tag.

    Each env config is validated here (registration defaults, then the YAML), so a typo fails
    in the driver with its YAML path instead of in every env-manager actor.
    """
    from roll_core.envs.factory import env_config_for, resolve_env

    specs = {}
    for tag in tags:
        entry = config.custom_envs.get(tag)
        if entry is None:
            reg = resolve_env(tag, registry=registry, config_key=f"env tag {tag!r}")
            env_config_for(reg.name, {}, registry=registry, config_key=f"custom_envs.{tag}")
            specs[tag] = EnvSpec(tag=tag, env_type=reg.name)
            continue
        resolve_env(entry.env_type, registry=registry, config_key=f"custom_envs.{tag}.env_type")
        env_config_for(entry.env_type, dict(entry.env_config), registry=registry, config_key=f"custom_envs.{tag}")
        specs[tag] = EnvSpec(
            tag=tag, env_type=entry.env_type, env_config=dict(entry.env_config), max_steps=entry.max_steps,
            max_tokens_per_step=entry.max_tokens_per_step, history_window=entry.history_length,
            system_template=entry.agent_system_template, turn_template=entry.agent_template,
        )
    return specs


def granularity_from_config(config: Any, *, registry: Any = None) -> str:
    """``trajectory`` or ``step``: the ``granularity`` option of the configured advantage estimator."""
    from roll_core.plugins import get_registry

    registry = registry or get_registry()
    if ("advantage_estimator", config.adv_estimator) not in registry:
        return "trajectory"
    return registry.get("advantage_estimator", config.adv_estimator).options.get("granularity", "trajectory")


def rollout_spec_from_config(config: Any, mode: str = "train", *, policy: str | None = None,
                             registry: Any = None, **overrides: Any) -> RolloutSpec:
    """The rollout of ``config``'s ``<mode>_env_manager``; ``overrides`` set RolloutSpec fields."""
    if mode not in SECTIONS:
        raise ConfigError(f"rollout mode must be one of {', '.join(SECTIONS)}, got {mode!r}")
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
        seed=config.seed,
        num_env_groups=manager.num_env_groups,
        group_size=manager.group_size,
        group_size_redundancy=manager.group_size_redundancy,
        max_env_num_per_worker=manager.max_env_num_per_worker or manager.num_envs,
        group_tags=group_tags,
        envs=env_specs_from_config(config, sorted(set(tags)), registry=registry),
        sequence_length=sequence_length,
        sampling=sampling_from_config(config, mode),
        policy=policy,
        async_generation_ratio=float(config.async_generation_ratio) if mode == "train" else 0.0,
        granularity=granularity_from_config(config, registry=registry),
        render_save_dir=config.render_save_dir,
        format_penalty=manager.format_penalty,
    )
    values.update(overrides)
    return RolloutSpec(**values)


def batch_size_from_config(config: Any, mode: str) -> int:
    """``rollout_batch_size`` / ``val_batch_size`` (negative: every env of the manager once)."""
    section, key = SECTIONS[mode]
    size = int(getattr(config, key))
    manager = getattr(config, section)
    return size if size > 0 else manager.num_env_groups * manager.group_size
