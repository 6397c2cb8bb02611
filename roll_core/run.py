"""The resolved run: one frozen object that every part of a run receives instead of a name.

A ``Run`` is data: its env and agent bindings *describe* (registration + validated config); what
builds envs and agents from them is :mod:`roll_core.rollout.build` (and
:func:`roll_core.envs.binding.build_env` outside a run). It sits low in the layers so that the
pipeline, the rollouts and the workers take it without importing the config schema.

:func:`roll_core.config.resolve` builds a :class:`Run` once, in the driver: the validated config
with its derived values filled in, every component the run uses bound to its registration
(advantage estimator, policy loss, a strategy per role, an env per tag, a reward per RLVR domain),
each env config validated once, and the plugin distributions (with versions) those components come
from. The pipeline, the rollouts, the Ray workers, ``roll rollout`` and ``roll env play`` take the
``Run`` (or one bound component of it) and never look a name up again.

Everything here pickles: a worker process receives the ``Run`` and imports a component's target
when it needs it (:meth:`Registration.load`). The only thing a worker checks against its own
installation is :meth:`Run.check_plugins`: the versions of the distributions the run uses must be
the driver's, or the worker would silently train with other code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from roll_core.errors import ConfigError, PluginError
from roll_core.registry import Registration


@dataclass(frozen=True)
class Role:
    """How a run builds one worker role (its config section has the role's name)."""

    #: the ``role`` option its strategy registration must carry (``train`` / ``infer``); None: any
    strategy_role: str | None
    #: strategy of a worker whose YAML has no strategy_args (roll's built-in torch/transformers backend)
    default_strategy: str
    #: registration option naming the class (None: the registration's target). The critic uses the
    #: train strategy's ``critic`` option (a value-head model), as ROLL selects the critic backend by
    #: the same strategy name as the actor.
    target_option: str | None
    trainable: bool
    #: top-level config field the model falls back to
    model_attr: str


#: the one role table: role -> how it is built, in start-up order
ROLES: dict[str, Role] = {
    "actor_train": Role("train", "hf_train", None, True, "pretrain"),
    "critic": Role("train", "hf_train", "critic", True, "reward_pretrain"),
    "reference": Role(None, "hf_train", None, False, "pretrain"),
    "actor_infer": Role("infer", "hf_infer", None, False, "pretrain"),
}
#: the config section a component's registration is named in, for messages
COMPONENT_PATHS: dict[str, str] = {
    "estimator": "adv_estimator",
    "policy_loss": "actor_train.pg_variant",
}


@dataclass(frozen=True)
class EnvBinding:
    """One env as a run uses it: its registration and its validated ``env_config``."""

    registration: Registration
    config: BaseModel

    @property
    def name(self) -> str:
        return self.registration.name

    @property
    def python_env(self) -> Any:
        """The env's own Python environment (:class:`roll_core.distributed.env_python.EnvPython`), or
        None when its registration declares no ``requirements``: its env managers then run in it."""
        from roll_core.distributed.env_python import EnvPython

        return EnvPython.from_options(self.registration.options, self.registration.name)


@dataclass(frozen=True)
class AgentBinding:
    """One agent (OpenAI-API agent code, :mod:`roll_core.rollout.agents.agent`) as a run uses it: its
    registration, its validated ``env_config`` (a pydantic model, or a plain dict for agents without
    a config model) and the reward function scoring its final conversation, if the tag names one."""

    registration: Registration
    config: Any
    reward: Registration | None = None

    @property
    def name(self) -> str:
        return self.registration.name

    @property
    def python_env(self) -> None:
        """Agents run in the trainer's Python environment: their client talks to the run's gateway
        (an env's own ``requirements`` environment is an env option only)."""
        return None


@dataclass(frozen=True)
class Run:
    """See the module docstring. Build it with :func:`roll_core.config.resolve`."""

    config: Any  # PipelineConfig (AgenticConfig | RLVRConfig), derived values filled in
    estimator: Registration
    policy_loss: Registration
    #: role -> strategy registration, for exactly the roles this run builds
    strategies: Mapping[str, Registration] = field(default_factory=dict)
    #: env tag -> bound env (agentic runs)
    envs: Mapping[str, EnvBinding] = field(default_factory=dict)
    #: env tag -> bound agent, for tags played by OpenAI-API agent code (agentic runs)
    agents: Mapping[str, AgentBinding] = field(default_factory=dict)
    #: the train env manager's group filter (``group_filter_cls``), None when groups are not filtered
    group_filter: Registration | None = None
    #: reward domain -> reward registration (RLVR runs)
    rewards: Mapping[str, Registration] = field(default_factory=dict)
    #: reward domain -> the inference strategy of its judge model (rewards that generate)
    reward_strategies: Mapping[str, Registration] = field(default_factory=dict)
    #: distribution -> version of every plugin distribution a bound component comes from
    plugins: Mapping[str, str] = field(default_factory=dict)
    #: YAML path that selects a component -> its registration (for messages and ``roll config show``)
    components: Mapping[str, Registration] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: the reference log-probs come from actor_train with its LoRA adapters disabled (no reference workers)
    reference_from_actor: bool = False
    #: the CLI arguments that started the run (``run CONFIG key=value ...``), for the resume advice
    argv: tuple[str, ...] = ()

    # -- what the run does ----------------------------------------------------------------------
    @property
    def pipeline_type(self) -> str:
        return self.config.pipeline_type

    @property
    def needs_critic(self) -> bool:
        """Whether the estimator trains a critic (its registration's ``needs_critic`` option)."""
        return bool(self.estimator.options.get("needs_critic"))

    @property
    def granularity(self) -> str:
        """``trajectory`` or ``step``: the rows the estimator wants (its ``granularity`` option)."""
        return str(self.estimator.options.get("granularity", "trajectory"))

    @property
    def uses_reference(self) -> bool:
        """Whether the run needs reference log-probs (a KL term), from reference workers or the actor."""
        return "reference" in self.strategies or self.reference_from_actor

    @property
    def lora(self) -> Any:
        """actor_train's :class:`~roll_core.strategies.lora.LoraSettings`, or None (full fine-tuning)."""
        from roll_core.strategies.lora import LoraSettings

        return LoraSettings.from_worker_config(self.config.actor_train)

    @property
    def syncs_adapters(self) -> bool:
        """Whether weight sync sends the LoRA adapter (the infer strategy serves adapters natively and
        no module is trained in full) rather than merged weights."""
        lora = self.lora
        infer = self.strategies.get("actor_infer")
        return bool(lora is not None and not lora.additional_target and infer is not None
                    and infer.options.get("serves_lora"))

    @property
    def train_roles(self) -> list[str]:
        """The roles hosted by train strategies, in start-up order."""
        return [role for role in ROLES if role != "actor_infer" and role in self.strategies]

    def model_path(self, role: str, *, required: bool = True) -> str:
        """The model ``role`` starts from (see :func:`model_path`)."""
        return model_path(self.config, role, required=required)

    @property
    def env_configs(self) -> dict[str, BaseModel]:
        """env tag -> validated env config."""
        return {tag: binding.config for tag, binding in self.envs.items()}

    def registration(self, path: str) -> Registration:
        """The registration selected at YAML ``path`` (e.g. ``"adv_estimator"``)."""
        return self.components[path]

    def strategy(self, role: str) -> Registration:
        """The strategy registration of ``role``; a clear error for a role this run does not build."""
        try:
            return self.strategies[role]
        except KeyError:
            raise PluginError(f"This run builds no {role!r} worker (it builds {', '.join(self.strategies)}); "
                              "this is a bug in the caller.") from None

    def replace_config(self, config: Any) -> Run:
        """The same bound components with another config (e.g. the warm-started model's path)."""
        from dataclasses import replace

        return replace(self, config=config)

    # -- plugins --------------------------------------------------------------------------------
    def plugin_summary(self) -> str:
        """``roll-core 0.1.0, roll-env-frozenlake 0.1.0`` -- the run header's plugin line."""
        return ", ".join(f"{dist} {version}" for dist, version in sorted(self.plugins.items())) or "none"

    def check_plugins(self, where: str) -> None:
        """Raise when this process's plugin distributions differ from the driver's (see
        :func:`check_plugin_versions`); every worker process calls it at start-up."""
        check_plugin_versions(self.plugins, where)

    # -- saving ---------------------------------------------------------------------------------
    def to_yaml(self) -> str:
        """The resolved config as YAML, headed by a comment naming the plugins used."""
        header = f"# resolved by roll; plugins: {self.plugin_summary()}\n"
        lora = self.lora
        if lora is not None:
            header += f"# actor_train trains {lora.describe()}; the base model stays frozen\n"
            if self.reference_from_actor:
                header += "# reference log-probs: actor_train with its adapters disabled (no reference workers)\n"
            header += ("# weight sync: the adapter (served natively by actor_infer)\n" if self.syncs_adapters
                       else "# weight sync: merged weights (base + adapter)\n")
        return header + dump_config(self.config)

    def save(self, path: str | Path) -> Path:
        """Write :meth:`to_yaml` (what ``roll run`` saves with a run); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_yaml())
        return path


def check_plugin_versions(plugins: Mapping[str, str], where: str) -> None:
    """Raise when the installed versions of ``plugins`` (distribution -> version) differ here.

    A worker on another node, or a venv changed since the driver started, would otherwise run
    other code than the config was resolved against. ``where`` names the process in the message.
    """
    mismatches = []
    for dist, wanted in plugins.items():
        have = installed_version(dist)
        if have != wanted:
            mismatches.append(f"{dist} {have or 'not installed'} (the driver has {wanted})")
    if mismatches:
        raise PluginError(
            f"The {where} process runs with other plugin versions than the driver: {'; '.join(mismatches)}. "
            "Install the same versions on every node of the Ray cluster (or restart the run after an "
            "upgrade) so that all workers run the code the config was resolved against."
        )


def model_path(config: Any, role: str, *, required: bool = True) -> str:
    """``role``'s ``model_args.model_name_or_path``, which resolve fills in from ``pretrain`` (or
    ``reward_pretrain`` for the critic); the one place a worker's model path is read. Not
    ``required``: an empty string when none is set (a model-free rollout)."""
    spec = ROLES[role]
    path = getattr(config, role).model_args.model_name_or_path or getattr(config, spec.model_attr) or config.pretrain
    if not path and required:
        raise ConfigError(f"{role}.model_args.model_name_or_path is not set (and neither is {spec.model_attr}).")
    return path


def installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None



def dump_config(config: Any) -> str:
    """The config as YAML that :func:`roll_core.config.load_config` reads back to an equal config."""
    return yaml.dump(config.model_dump(mode="json"), Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     width=110)


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (prompt templates) as readable ``|`` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value and not value.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)
