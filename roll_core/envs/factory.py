"""Build envs by registered name or tag, with the registration's preset ``defaults``.

``make_env("sokoban")``, ``make_env("LargerSokoban")`` and a ``custom_envs`` entry
(``env_type`` + ``env_config``) all bind the env the way :func:`roll_core.config.resolve` does
(:func:`roll_core.envs.binding.bind_env`): the registration's ``defaults`` first, then the given
``env_config`` on top, validated by the env's pydantic ``config_model`` so a typo fails with the
field's name. Inside a run, envs are built from the run's bindings, never by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roll_core.envs.base import EnvConfig, TextEnv
from roll_core.envs.binding import bind_env, build_env, lookup_env
from roll_core.registry import Registration, Registry


def resolve_env(name_or_tag: str, *, registry: Registry | None = None,
                config_key: str | None = None) -> Registration:
    """The env registration called or tagged ``name_or_tag`` (did-you-mean error otherwise)."""
    return lookup_env(name_or_tag, registry=registry, config_key=config_key)


def env_config_for(name_or_tag: str, env_config: Mapping[str, Any] | EnvConfig | None = None, *,
                   registry: Registry | None = None, config_key: str | None = None) -> EnvConfig:
    """The validated ``env_config`` for an env: registration defaults, then ``env_config``."""
    return _bind(name_or_tag, env_config, registry, config_key).config


def make_env(name_or_tag: str, env_config: Mapping[str, Any] | EnvConfig | None = None, *,
             registry: Registry | None = None, config_key: str | None = None,
             **overrides: Any) -> TextEnv:
    """A new env instance for a registered name or tag; ``overrides`` win over ``env_config``."""
    if overrides:
        base = env_config.model_dump() if isinstance(env_config, EnvConfig) else dict(env_config or {})
        env_config = {**base, **overrides}
    return build_env(_bind(name_or_tag, env_config, registry, config_key))


def _bind(name_or_tag, env_config, registry, config_key):
    return bind_env(name_or_tag, env_config, registry=registry, config_key=config_key)
