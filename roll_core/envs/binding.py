"""Env and agent bindings: a registration with its ``env_config`` validated, and envs built from one.

:func:`roll_core.config.resolve` binds every env and agent of a run here; :func:`bind_env` binds
one outside a config (``make_env``, ``roll env play``, tests): the registration's ``defaults``
first, then the given ``env_config``, validated by the env's ``config_model`` so a typo fails with
the field's name. A binding only describes; :func:`build_env` (and, inside a run,
:mod:`roll_core.rollout.build`) makes the env.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from roll_core.envs.base import TextEnv
from roll_core.errors import PluginError
from roll_core.registry import Registration, Registry
from roll_core.run import AgentBinding, EnvBinding
from roll_core.validation import config_error


def bind_env(name_or_tag: str, env_config: Mapping[str, Any] | BaseModel | None = None, *,
             registry: Registry | None = None, config_key: str | None = None) -> EnvBinding:
    """One env outside a config (``make_env``, ``roll env play``, tests): registration defaults, then
    ``env_config``, validated by the env's ``config_model``."""
    reg = lookup_env(name_or_tag, registry=registry, config_key=config_key)
    env_class(reg)  # an env built on its own must honour the env contract before its config is read
    prefix = (*config_key.split("."), "env_config") if config_key else ("env_config",)
    return bind_env_registration(reg, env_config, prefix=prefix)


def lookup_env(name_or_tag: str, *, registry: Registry | None = None,
               config_key: str | None = None) -> Registration:
    """The env registration called or tagged ``name_or_tag`` (did-you-mean error otherwise)."""
    return _registry(registry).get("env", name_or_tag, config_key=config_key)


def bind_env_registration(reg: Registration, env_config: Mapping[str, Any] | BaseModel | None,
              prefix: tuple[str, ...]) -> EnvBinding:
    cls = reg.load()  # the env contract itself is checked when an env is built (build_env)
    model = getattr(cls, "config_model", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PluginError(f"The env {reg.name!r} from plugin {reg.plugin!r} has no pydantic config_model; "
                          "every roll env declares one (see roll_core.envs.TextEnv). This is a bug in that plugin.")
    python_env = EnvBinding(reg, None).python_env  # an env's own Python environment: readable, runnable here
    if python_env is not None:
        python_env.check()
    if isinstance(env_config, model):
        return EnvBinding(reg, env_config)
    if isinstance(env_config, BaseModel):
        env_config = env_config.model_dump()
    values = {**dict(reg.options.get("defaults") or {}), **dict(env_config or {})}
    try:
        return EnvBinding(reg, model.model_validate(values))
    except ValidationError as exc:
        raise config_error(exc, model, prefix=prefix,
                           source=f"(env {reg.name!r}; `roll plugins show {reg.name}` lists its fields)") from None


def bind_agent_registration(reg: Registration, env_config: Mapping[str, Any] | BaseModel | None,
                            prefix: tuple[str, ...] = ("env_config",)) -> AgentBinding:
    """An agent with its ``env_config`` validated by its config model (the ``config_model`` option,
    else the target's ``config_model`` attribute); without one the config stays a plain dict."""
    model = agent_config_model(reg)
    if model is None:
        if isinstance(env_config, BaseModel):
            env_config = env_config.model_dump()
        return AgentBinding(reg, dict(env_config or {}))
    if isinstance(env_config, model):
        return AgentBinding(reg, env_config)
    if isinstance(env_config, BaseModel):
        env_config = env_config.model_dump()
    try:
        return AgentBinding(reg, model.model_validate(dict(env_config or {})))
    except ValidationError as exc:
        raise config_error(exc, model, prefix=prefix,
                           source=f"(agent {reg.name!r}; `roll plugins show {reg.name}` lists its fields)") from None


def agent_config_model(reg: Registration) -> type[BaseModel] | None:
    """The pydantic model validating an agent's ``env_config``, or None (imports the agent's module)."""
    option = reg.options.get("config_model")
    if option is not None:
        model = Registration(reg.kind, reg.name, str(option), reg.plugin, reg.distribution,
                             requires=reg.requires).load()
    else:
        model = getattr(reg.load(), "config_model", None)
    if model is None:
        return None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise PluginError(f"The agent {reg.name!r} from plugin {reg.plugin!r} declares config_model {model!r}, "
                          "which is not a pydantic model. This is a bug in that plugin.")
    return model


def env_class(reg: Registration) -> type[TextEnv]:
    """The class ``reg`` names, checked against the env contract (imports the plugin's module)."""
    cls = reg.load()
    if not (isinstance(cls, type) and issubclass(cls, TextEnv)):
        raise PluginError(
            f"The env {reg.name!r} from plugin {reg.plugin!r} points at {reg.target!r}, which is not a "
            "subclass of roll_core.envs.TextEnv. This is a bug in that plugin."
        )
    return cls


def build_env(binding: EnvBinding) -> TextEnv:
    """A new env instance of ``binding`` (its config is already validated)."""
    return env_class(binding.registration)(binding.config)


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    from roll_core.plugins import get_registry

    return get_registry()
