"""Build envs from the registry by name or tag, with the registration's preset ``defaults``.

``make_env("sokoban")``, ``make_env("LargerSokoban")`` and a ``custom_envs`` entry
(``env_type`` + ``env_config``) all go through :func:`env_config_for`: the registration's
``defaults`` first, then the given ``env_config`` on top, validated by the env's pydantic
``config_model`` so a typo in YAML fails with the field's name before any worker starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from roll_core.envs.base import EnvConfig, TextEnv
from roll_core.errors import ConfigError, PluginError
from roll_core.registry import Registration, Registry


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    from roll_core.plugins import get_registry

    return get_registry()


def resolve_env(name_or_tag: str, *, registry: Registry | None = None,
                config_key: str | None = None) -> Registration:
    """The env registration called or tagged ``name_or_tag`` (did-you-mean error otherwise)."""
    return _registry(registry).get("env", name_or_tag, config_key=config_key)


def env_class(reg: Registration) -> type[TextEnv]:
    """Import ``reg``'s target and check that it honours the env contract."""
    cls = reg.load()
    if not (isinstance(cls, type) and issubclass(cls, TextEnv)):
        raise PluginError(
            f"The env {reg.name!r} from plugin {reg.plugin!r} points at {reg.target!r}, which is not a "
            "subclass of roll_core.envs.TextEnv. This is a bug in that plugin."
        )
    return cls


def env_config_for(name_or_tag: str, env_config: Mapping[str, Any] | EnvConfig | None = None, *,
                   registry: Registry | None = None, config_key: str | None = None) -> EnvConfig:
    """The validated ``env_config`` for an env: registration defaults, then ``env_config``."""
    reg = resolve_env(name_or_tag, registry=registry, config_key=config_key)
    cls = env_class(reg)
    if isinstance(env_config, EnvConfig):
        return env_config
    values = {**dict(reg.options.get("defaults") or {}), **dict(env_config or {})}
    try:
        return cls.config_model.model_validate(values)
    except ValidationError as exc:
        where = f"{config_key}.env_config" if config_key else "env_config"
        problems = "; ".join(
            f"{where}.{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(
            f"Invalid env_config for env {reg.name!r}: {problems}. "
            f"`roll plugins show {reg.name}` lists its fields."
        ) from exc


def make_env(name_or_tag: str, env_config: Mapping[str, Any] | EnvConfig | None = None, *,
             registry: Registry | None = None, config_key: str | None = None,
             **overrides: Any) -> TextEnv:
    """A new env instance for a registered name or tag; ``overrides`` win over ``env_config``."""
    if overrides:
        base = env_config.model_dump() if isinstance(env_config, EnvConfig) else dict(env_config or {})
        env_config = {**base, **overrides}
    config = env_config_for(name_or_tag, env_config, registry=registry, config_key=config_key)
    cls = env_class(resolve_env(name_or_tag, registry=registry))
    return cls(config)
