"""Read hyper-parameters from a config object by ROLL's attribute names.

The algorithms never import the config schema; they duck-type, so the pipeline passes the
validated pydantic model and tests pass a ``types.SimpleNamespace``. A field is looked up on
``config.actor_train`` first (where ROLL keeps ``pg_variant`` and its parameters) and then on the
top level, so both a nested and a flat config work.

A missing field raises instead of falling back to a hard-coded default: ROLL silently ignored
``tis_*``/``cispo_*``/``kimi15_tau`` because it read them with ``getattr(..., default)`` from a
config that had no such fields (docs/algorithms.md §6.3 [Q]).
"""

from __future__ import annotations

from typing import Any

from roll_core.errors import ConfigError

_MISSING = object()


def hp(config: Any, name: str, default: Any = _MISSING) -> Any:
    """``config.actor_train.<name>`` or ``config.<name>``; ``default`` only when one is given."""
    for scope in (getattr(config, "actor_train", None), config):
        if scope is not None and hasattr(scope, name):
            return getattr(scope, name)
    if default is _MISSING:
        raise ConfigError(
            f"The config has no field {name!r} (looked on actor_train and at the top level); "
            "the algorithms need it. Use roll's config schema, or add the field."
        )
    return default


def lookup(table: dict, key: Any, field: str) -> Any:
    """``table[key]`` with an error that names the config field and the valid choices."""
    try:
        return table[key]
    except KeyError:
        choices = ", ".join(repr(k) for k in table)
        raise ConfigError(f"{field}={key!r} is not supported; choose one of {choices}.") from None
