"""roll's configuration: ROLL-compatible YAML, validated by pydantic, resolved against plugins.

Typical use (what ``roll run`` does)::

    from roll_core.config import load_config, resolve

    config = load_config("examples/sokoban/grpo.yaml", ["actor_train.training_args.learning_rate=2e-6"])
    run = resolve(config)               # checks plugin names, validates env configs, fills defaults,
    run.save(run_dir / "config.yaml")   # binds every component: the one object a run passes down

:func:`load_config` reads, composes (Hydra ``defaults:``), overrides, interpolates and validates;
it returns an :class:`AgenticConfig` or :class:`RLVRConfig`. :func:`validate_config` does only the
last step, on plain data. Both are pure: they never touch the plugin registry. Every problem is a
:class:`roll_core.errors.ConfigError` naming the YAML path; warnings are :class:`ConfigWarning`.

This package imports neither torch nor ray: ``roll plugins`` and the CLI validate configs too.
"""

from roll_core.config.algorithm import (
    AlgorithmConfig,
    RewardNormalizationConfig,
    TrainInferCorrection,
    TrainInferFilter,
    TrainInferISWeight,
)
from roll_core.config.device_mapping import parse_device_mapping
from roll_core.config.envs import AgentGatewayConfig, CustomEnvConfig, EnvManagerConfig, LLMProxyConfig
from roll_core.config.loader import config_file, load_config, load_config_data
from roll_core.config.pipeline import (
    PIPELINES,
    AgenticConfig,
    PipelineConfig,
    RLVRConfig,
    RunSettings,
    pipeline_class,
    validate_config,
)
from roll_core.config.resolve import resolve
from roll_core.config.rlvr import RewardConfig, ValidationConfig
from roll_core.config.workers import (
    ActorInferConfig,
    ActorTrainConfig,
    DataArgs,
    GeneratingArgs,
    ModelArgs,
    PolicyLossArgs,
    StrategyArgs,
    TrainingArgs,
    WorkerConfig,
)
from roll_core.envs.binding import bind_env
from roll_core.errors import ConfigError
from roll_core.run import AgentBinding, EnvBinding, Run, dump_config
from roll_core.validation import ConfigWarning

__all__ = [
    "PIPELINES",
    "ActorInferConfig",
    "ActorTrainConfig",
    "AgentBinding",
    "AgentGatewayConfig",
    "AgenticConfig",
    "AlgorithmConfig",
    "ConfigError",
    "ConfigWarning",
    "CustomEnvConfig",
    "DataArgs",
    "EnvBinding",
    "EnvManagerConfig",
    "GeneratingArgs",
    "LLMProxyConfig",
    "ModelArgs",
    "PipelineConfig",
    "PolicyLossArgs",
    "RLVRConfig",
    "RewardConfig",
    "RewardNormalizationConfig",
    "Run",
    "RunSettings",
    "StrategyArgs",
    "TrainInferCorrection",
    "TrainInferFilter",
    "TrainInferISWeight",
    "TrainingArgs",
    "ValidationConfig",
    "WorkerConfig",
    "bind_env",
    "config_file",
    "dump_config",
    "load_config",
    "load_config_data",
    "parse_device_mapping",
    "pipeline_class",
    "resolve",
    "validate_config",
]
