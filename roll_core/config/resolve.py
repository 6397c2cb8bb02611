"""From a validated config to the :class:`~roll_core.run.Run` that a run uses and saves.

:func:`resolve` is the only step that looks at installed plugins (with :func:`bind_env`, its
one-env form). It

* checks every plugin name the run will use against the registry, with the YAML path as the
  config key (``adv_estimator``, ``actor_train.pg_variant``, the ``strategy_name`` of each worker
  the run builds, ``custom_envs.<tag>.env_type`` or a tag of an env manager, RLVR reward
  functions), and rewrites tags to the registered names;
* validates each ``env_config`` of an env the run uses against that env's ``config_model``
  (registration ``defaults`` first, the YAML on top, as :mod:`roll_core.envs.factory` builds envs),
  importing only those env classes;
* fills what ROLL derives at start-up, so the saved YAML shows what actually ran: model paths from
  ``pretrain``, default strategies (roll's built-in ``hf_train`` / ``hf_infer``), the effective
  ``sequence_length``, env-group partitions, ``enable_reference`` when a KL term is on,
  ``enable_old_logprobs_recompute`` for step-wise estimators, RLVR's sampling settings.

and binds each selected component (the registration, never its name) into the ``Run``.

The dp-size dependent switch of ``enable_old_logprobs_recompute`` (more than one backward step per
rank) needs the placement, so the pipeline applies it at run time.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from roll_core.config.base import compat_warnings
from roll_core.config.envs import ROLL_KEEP_ALL_FILTERS
from roll_core.config.pipeline import AgenticConfig, PipelineConfig, RLVRConfig
from roll_core.envs.binding import (
    bind_agent_registration,
    bind_env_registration,
)
from roll_core.errors import ConfigError, UnknownComponentError, close_matches, did_you_mean
from roll_core.registry import Registration, Registry
from roll_core.run import ROLES, AgentBinding, EnvBinding, Run, installed_version
from roll_core.validation import ConfigWarning, config_error, warn


def resolve(config: PipelineConfig, *, registry: Registry | None = None,
            roles: Iterable[str] | None = None) -> Run:
    """Check ``config`` against the installed plugins, fill in its derived values, bind its components.

    ``roles`` limits the strategies bound to those workers (``roll rollout`` with a model-free
    policy builds none, with the model only ``actor_infer``); by default every worker the run
    trains with is bound.
    """
    return _Resolver(config, _registry(registry), roles).run()


def unknown_player(registry: Registry, name: str, env_error: Exception) -> str:
    """The error for ``name`` that is neither an env nor an agent: did-you-mean over both kinds."""
    import re

    names = [n for kind in ("env", "agent") for r in registry.all(kind) for n in (r.name, *r.tags)]
    message = re.sub(r" Did you mean [^?]*\?", "", str(env_error), count=1)
    message = message.replace(f"Unknown env {name!r}", f"Unknown env or agent {name!r}", 1)
    head, dot, rest = message.partition(". ")
    agents = ", ".join(registry.names("agent")) or "none"
    return f"{head}{dot.strip()}{did_you_mean(name, names)} {rest} Installed agents: {agents}."


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    from roll_core.plugins import get_registry

    return get_registry()


class _Resolver:
    """One resolution: edits a plain copy of the config, then validates it once more."""

    def __init__(self, config: PipelineConfig, registry: Registry, roles: Iterable[str] | None):
        self.config = config
        self.registry = registry
        self.roles = None if roles is None else set(roles)
        self.data: dict[str, Any] = copy.deepcopy(config.model_dump())
        self.strategies: dict[str, Registration] = {}
        self.envs: dict[str, EnvBinding] = {}
        self.agents: dict[str, AgentBinding] = {}
        self.rewards: dict[str, Registration] = {}
        self.group_filter: Registration | None = None
        self.reward_strategies: dict[str, Registration] = {}
        self.components: dict[str, Registration] = {}
        self.warnings: list[str] = []

    def run(self) -> Run:
        c, d = self.config, self.data
        builds_model = self.roles is None or bool(self.roles)
        if builds_model and not (c.pretrain or c.actor_train.model_args.model_name_or_path):
            raise ConfigError("pretrain is not set: name the policy model (a Hugging Face id or a local path) "
                              "with `pretrain: ...` or override it with pretrain=PATH.")
        d["sequence_length"] = c.effective_sequence_length
        d["val_prompt_length"] = c.val_prompt_length or c.prompt_length
        d["val_sequence_length"] = c.val_sequence_length or d["sequence_length"]

        estimator = self.lookup("advantage_estimator", c.adv_estimator, "adv_estimator")
        d["adv_estimator"] = estimator.name
        loss = self.lookup("policy_loss", c.actor_train.pg_variant, "actor_train.pg_variant")
        d["actor_train"]["pg_variant"] = loss.name

        d["enable_reference"] = c.runs_reference
        step_wise = estimator.options.get("granularity") == "step"
        d["enable_old_logprobs_recompute"] = not c.force_disable_old_logprobs_recompute and (
            c.enable_old_logprobs_recompute or step_wise or c.init_kl_coef > 0
        )
        needs_critic = bool(estimator.options.get("needs_critic"))
        from roll_core.strategies.lora import LoraSettings

        lora = LoraSettings.from_worker_config(c.actor_train)
        if lora is not None and lora.target is not None and d["actor_train"]["model_args"]["lora_alpha"] is None:
            d["actor_train"]["model_args"]["lora_alpha"] = lora.scale_alpha  # ROLL's default, written out
        # with LoRA the reference is the actor's base with adapters disabled: no second model (as ROLL)
        reference_from_actor = bool(d["enable_reference"] and lora is not None)
        builds_reference = d["enable_reference"] and not reference_from_actor
        wanted = {"actor_train", "actor_infer", *(["critic"] * needs_critic), *(["reference"] * builds_reference)}
        if builds_model:
            self.fill_models(needs_critic)
        for worker in ROLES:
            if worker in wanted and (self.roles is None or worker in self.roles):
                self.strategy(worker)

        from roll_core.pipeline.tracking import check_tracker

        check_tracker(c.track_with, c.tracker_kwargs)
        for line in compat_warnings(c):
            self.note(line)
        if isinstance(c, AgenticConfig):
            self.agentic(c)
        elif isinstance(c, RLVRConfig):
            self.rlvr(c)
        run = Run(config=self.validated(), estimator=estimator, policy_loss=loss, strategies=self.strategies,
                  envs=self.envs, agents=self.agents, rewards=self.rewards, group_filter=self.group_filter,
                  reward_strategies=self.reward_strategies,
                  plugins=self.plugin_versions(),
                  components=self.components, warnings=tuple(self.warnings),
                  reference_from_actor=reference_from_actor)
        if self.roles is None:  # a training run: what would otherwise fail only after Ray has started
            from roll_core.config.run_checks import check_training_run

            check_training_run(run)
        return run

    # -- helpers ------------------------------------------------------------------------------
    def lookup(self, kind: str, name: str, path: str) -> Registration:
        reg = self.registry.get(kind, name, config_key=path)
        self.components[path] = reg
        return reg

    def plugin_versions(self) -> dict[str, str]:
        """distribution -> version of every distribution a bound component comes from."""
        versions = {}
        for reg in self.components.values():
            if reg.distribution and reg.distribution not in versions:
                version = installed_version(reg.distribution)
                if version is not None:
                    versions[reg.distribution] = version
        return versions

    def note(self, message: str) -> None:
        self.warnings.append(message)
        warn(message)

    def validated(self) -> PipelineConfig:
        cls = type(self.config)
        try:
            with warnings.catch_warnings():  # the user saw validation's warnings already
                warnings.simplefilter("ignore", ConfigWarning)
                return cls.model_validate(self.data)
        except ValidationError as exc:
            raise config_error(exc, cls, source="(after resolving plugins)") from None

    def fill_models(self, needs_critic: bool) -> None:
        c, d = self.config, self.data
        for worker in ("actor_train", "actor_infer", "reference"):
            if d[worker]["model_args"]["model_name_or_path"] is None:
                d[worker]["model_args"]["model_name_or_path"] = c.pretrain
        if d["critic"]["model_args"]["model_name_or_path"] is None:
            d["critic"]["model_args"]["model_name_or_path"] = c.reward_pretrain
        if needs_critic and d["critic"]["model_args"]["model_name_or_path"] is None:
            raise ConfigError(
                f"adv_estimator {c.adv_estimator!r} trains a critic, but no critic model is set: set "
                "reward_pretrain (or critic.model_args.model_name_or_path) to the model the value head starts from."
            )

    def strategy(self, worker: str) -> None:
        args = self.data[worker]["strategy_args"] or {"strategy_name": ROLES[worker].default_strategy,
                                                      "strategy_config": {}}
        path = f"{worker}.strategy_args.strategy_name"
        reg = self.lookup("strategy", args["strategy_name"], path)
        role, wanted = reg.options.get("role"), ROLES[worker].strategy_role
        if wanted and role and role != wanted:
            fitting = [r.name for r in self.registry.all("strategy") if r.options.get("role") == wanted]
            raise ConfigError(
                f"{path} is {args['strategy_name']!r}, {_a(role)} strategy, but {worker} needs {_a(wanted)} strategy "
                f"(installed: {', '.join(fitting) or 'none'})."
            )
        if worker == "critic" and not reg.options.get("critic"):
            raise ConfigError(
                f"{path} is {reg.name!r}, which provides no critic (value-head) model, but adv_estimator "
                f"{self.config.adv_estimator!r} trains a critic. Choose a train strategy with a critic "
                "(roll's built-in hf_train has one), or an estimator without a critic (grpo, reinforce)."
            )
        self.data[worker]["strategy_args"] = {**args, "strategy_name": reg.name}
        self.strategies[worker] = reg

    # -- agentic ------------------------------------------------------------------------------
    def agentic(self, c: AgenticConfig) -> None:
        d = self.data
        d["actor_infer"]["generating_args"]["num_return_sequences"] = 1
        for path, manager in c.env_managers().items():
            d[path]["num_groups_partition"] = list(manager.partition().values())
            if manager.max_env_num_per_worker == 0:
                d[path]["max_env_num_per_worker"] = manager.num_envs
        for path, manager in c.env_managers().items():
            for i, tag in enumerate(manager.tags):
                if tag not in self.envs:
                    self.env(c, tag, f"{path}.tags[{i}]")
        self.group_filters(c)

    def group_filters(self, c: AgenticConfig) -> None:
        """Bind the train env manager's group filter; ROLL's keep-everything default binds none."""
        for path in ("train_env_manager", "val_env_manager"):
            name = getattr(c, path).group_filter_cls
            if name is None:
                continue
            if name in ROLL_KEEP_ALL_FILTERS:
                name = "keep_all"
            reg = self.lookup("group_filter", name, f"{path}.group_filter_cls")
            self.data[path]["group_filter_cls"] = reg.name
            keeps_all = reg.name == "keep_all"
            if path == "val_env_manager" and not keeps_all:
                self.note(f"val_env_manager.group_filter_cls ({reg.name!r}) is ignored: validation scores every "
                          "planned episode, filtered or not")
            elif path == "train_env_manager" and not keeps_all:
                self.group_filter = reg

    def env(self, c: AgenticConfig, tag: str, tag_path: str) -> None:
        entry = c.custom_envs.get(tag)
        if entry is not None:
            reg = self.lookup_player(entry.env_type, f"custom_envs.{tag}.env_type")
        else:
            reg = self.env_by_tag(c, tag, tag_path)
        if reg.kind == "agent":
            self.agent(c, tag, reg)
            return
        if entry is not None and entry.reward is not None:
            raise ConfigError(f"custom_envs.{tag}.reward is set, but {reg.name!r} is an env, which gives its own "
                              "rewards; `reward` scores the conversations of agents. Remove it.")
        binding = bind_env_registration(reg, entry.env_config if entry is not None else {},
                            prefix=("custom_envs", tag, "env_config"))
        self.envs[tag] = binding
        base = self.data["custom_envs"].get(tag) or {"env_type": reg.name}
        self.data["custom_envs"][tag] = {**base, "env_type": reg.name,
                                         "env_config": binding.config.model_dump(mode="json")}

    def lookup_player(self, name: str, path: str) -> Registration:
        """The env called or tagged ``name``, or else the agent (a name both kinds register is an error)."""
        try:
            reg = self.registry.get("env", name, config_key=path)
        except UnknownComponentError as exc:
            try:
                reg = self.registry.get("agent", name, config_key=path)
            except UnknownComponentError:
                raise UnknownComponentError(unknown_player(self.registry, name, exc)) from None
        else:
            if ("agent", reg.name) in self.registry or ("agent", name) in self.registry:
                agent = self.registry.get("agent", name if ("agent", name) in self.registry else reg.name)
                raise ConfigError(f"{path} is {name!r}, which names both the env {reg.name!r} (plugin "
                                  f"{reg.plugin!r}) and the agent {agent.name!r} (plugin {agent.plugin!r}); "
                                  "rename one of them, or disable one plugin with ROLL_DISABLE_PLUGINS.")
        self.components[path] = reg
        return reg

    def agent(self, c: AgenticConfig, tag: str, reg: Registration) -> None:
        """Bind an agent tag: its config, its reward function, and what agents cannot use."""
        entry = c.custom_envs.get(tag)
        prefix = ("custom_envs", tag, "env_config")
        binding = bind_agent_registration(reg, entry.env_config if entry is not None else {}, prefix=prefix)
        if entry is not None:
            for key in ("history_length", "agent_template", "agent_system_template"):
                if getattr(entry, key) is not None:
                    raise ConfigError(f"custom_envs.{tag}.{key} is set, but {reg.name!r} is an agent: agent code "
                                      "writes its own prompts and history. Remove it.")
            if entry.reward is not None:
                binding = AgentBinding(reg, binding.config,
                                       self.lookup("reward", entry.reward, f"custom_envs.{tag}.reward"))
        warmup = c.warmup_sft
        if warmup is not None and warmup.steps > 0 and warmup.policy == "random" and (
                tag in c.train_env_manager.tags):
            raise ConfigError(f"warmup_sft.policy is 'random', but the train tag {tag!r} is the agent {reg.name!r}, "
                              "which has no random actions: use warmup_sft.policy: scripted (the agent's expert "
                              "plays the demonstrations).")
        if warmup is not None and warmup.steps > 0 and warmup.slip_rate and tag in c.train_env_manager.tags:
            raise ConfigError(f"warmup_sft.slip_rate is set, but the train tag {tag!r} is the agent {reg.name!r}, whose "
                              "expert writes whole replies and cannot slip: remove warmup_sft.slip_rate.")
        self.agents[tag] = binding
        config = binding.config.model_dump(mode="json") if isinstance(binding.config, BaseModel) else binding.config
        base = self.data["custom_envs"].get(tag) or {"env_type": reg.name}
        self.data["custom_envs"][tag] = {**base, "env_type": reg.name, "env_config": config,
                                         "reward": binding.reward.name if binding.reward else None}
        if self.data["agent_gateway"]["model_name"] is None:
            self.data["agent_gateway"]["model_name"] = c.actor_infer.model_args.model_name_or_path or c.pretrain

    def env_by_tag(self, c: AgenticConfig, tag: str, tag_path: str) -> Registration:
        try:
            return self.lookup_player(tag, tag_path)
        except UnknownComponentError as exc:
            near = close_matches(tag, c.custom_envs)
            defined = ", ".join(c.custom_envs) or "none"
            hint = f" Did you mean the custom_envs entry {' or '.join(map(repr, near))}?" if near else ""
            raise ConfigError(
                f"{tag_path} is {tag!r}, which is neither a custom_envs entry (defined: {defined}) nor a "
                f"registered env or agent name or tag.{hint} {exc}"
            ) from None

    # -- RLVR ---------------------------------------------------------------------------------
    def rlvr(self, c: RLVRConfig) -> None:
        d = self.data
        if not c.rewards:
            raise ConfigError("rewards is empty: an RLVR config needs at least one reward domain, e.g. "
                              "`rewards: {math_rule: {tag_included: [...]}}` (see `roll plugins list` for "
                              "installed reward functions).")
        n = c.num_return_sequences_in_group
        generating = d["actor_infer"]["generating_args"]
        generating["num_return_sequences"] = n
        new_tokens = d["sequence_length"] - (c.prompt_length or 0)
        if "max_new_tokens" in c.actor_infer.generating_args.model_fields_set and (
            generating["max_new_tokens"] != new_tokens
        ):
            self.note(f"actor_infer.generating_args.max_new_tokens ({generating['max_new_tokens']}) is replaced "
                      f"by sequence_length - prompt_length ({new_tokens}), as in ROLL")
        generating["max_new_tokens"] = new_tokens
        if c.validation is not None:
            d["validation"]["generating_args"]["max_new_tokens"] = d["val_sequence_length"] - d["val_prompt_length"]
        if c.async_generation_ratio > 0 and n > 1 and not c.is_num_return_sequences_expand:
            d["is_num_return_sequences_expand"] = True
            self.note("is_num_return_sequences_expand is switched on: asynchronous RLVR generates each of the "
                      f"{n} responses of a prompt as its own request")
        from roll_core.data.prompts import check_dataset_type

        for args in (c.actor_train.data_args, c.validation.data_args if c.validation else None):
            if args is not None:
                check_dataset_type(args.dataset_type)
        if c.importance_sampling is not None:  # ROLL's RLVR name of the one ratio setting
            if "ratio_type" in c.model_fields_set and c.ratio_type != c.importance_sampling:
                raise ConfigError(f"importance_sampling ({c.importance_sampling}) and ratio_type ({c.ratio_type}) "
                                  "disagree; they are one setting (ROLL's RLVR name and roll's): keep one.")
            d["ratio_type"] = c.importance_sampling
        d["importance_sampling"] = None
        for domain, reward in c.rewards.items():
            path = f"rewards.{domain}.reward_type" if reward.reward_type else f"rewards.{domain}"
            reg = self.lookup("reward", reward.reward_type or domain, path)
            d["rewards"][domain]["reward_type"] = reg.name
            self.rewards[domain] = reg
            self.reward_strategy(domain, reward, reg)

    def reward_strategy(self, domain: str, section: Any, reg: Registration) -> None:
        """A reward that generates with a model (``llm_judge`` with ``judge_model_type: inference``)
        gets the domain's inference strategy (``strategy_args.strategy_name``, default ``hf_infer``)."""
        needs = getattr(reg.load(), "needs_generator", None)
        if needs is None or not needs(section):
            return
        args = self.data["rewards"][domain]["strategy_args"] or {"strategy_name": "hf_infer", "strategy_config": {}}
        path = f"rewards.{domain}.strategy_args.strategy_name"
        strategy = self.lookup("strategy", args["strategy_name"], path)
        if strategy.options.get("role") not in (None, "infer"):
            raise ConfigError(f"{path} is {args['strategy_name']!r}, a {strategy.options.get('role')} strategy; a "
                              "judge model generates: choose an inference strategy (e.g. hf_infer).")
        self.data["rewards"][domain]["strategy_args"] = {**args, "strategy_name": strategy.name}
        self.reward_strategies[domain] = strategy

