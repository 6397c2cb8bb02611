"""Registered components, by kind and by name or tag.

The registry only ever holds strings and metadata; :meth:`Registration.load` imports the target
the first time a config selects it. That keeps ``roll plugins list`` and config validation fast
and lets a broken optional backend fail only when somebody actually asks for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from roll_core.errors import PluginError, UnknownComponentError, close_matches

#: kind -> the hook that registers it. The order is the display order of ``roll plugins list``.
KINDS: dict[str, str] = {
    "env": "roll_register_envs",
    "advantage_estimator": "roll_register_advantage_estimators",
    "policy_loss": "roll_register_policy_losses",
    "strategy": "roll_register_strategies",
    "reward": "roll_register_rewards",
    "agent": "roll_register_agents",
}

#: Names provided by roll's own optional packages, for "pip install ..." hints when missing.
KNOWN_PROVIDERS: dict[tuple[str, str], str] = {
    ("env", "frozen_lake"): "roll-env-frozenlake",
    ("env", "sokoban"): "roll-env-sokoban",
    ("env", "webshop"): "roll-env-webshop",
    ("strategy", "vllm"): "roll-strategy-vllm",
    ("strategy", "sglang"): "roll-strategy-sglang",
    ("strategy", "deepspeed_train"): "roll-strategy-deepspeed",
    ("strategy", "megatron_train"): "roll-strategy-megatron",
}

#: ROLL's env tags, for the same hints.
KNOWN_TAG_PROVIDERS: dict[str, str] = {
    "FrozenLake": "roll-env-frozenlake",
    "SimpleSokoban": "roll-env-sokoban",
    "LargerSokoban": "roll-env-sokoban",
    "SokobanDifferentGridVocab": "roll-env-sokoban",
    "WebShopEnv": "roll-env-webshop",
    "WebShop": "roll-env-webshop",
}


@dataclass(frozen=True)
class Registration:
    """One component a plugin announced; nothing is imported until :meth:`load`."""

    kind: str
    name: str
    target: str
    plugin: str
    distribution: str | None = None
    tags: tuple[str, ...] = ()
    description: str = ""
    requires: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __getstate__(self) -> dict[str, Any]:  # a mappingproxy does not pickle; runs ship registrations
        return {**self.__dict__, "options": dict(self.options)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({**state, "options": MappingProxyType(dict(state["options"]))})

    def load(self) -> Any:
        """Import and return the target object, with an install hint if that fails."""
        module_name, _, attr = self.target.partition(":")
        try:
            obj = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except ImportError as exc:
            hint = (
                f" Install what it needs with: pip install {' '.join(repr(r) for r in self.requires)}."
                if self.requires
                else ""
            )
            raise PluginError(
                f"The {self.kind} {self.name!r} (from plugin {self.plugin!r}) could not be imported: "
                f"{exc}.{hint}"
            ) from exc
        except AttributeError as exc:
            raise PluginError(
                f"The {self.kind} {self.name!r} from plugin {self.plugin!r} points at {self.target!r}, "
                f"which does not exist ({exc}). This is a bug in that plugin."
            ) from exc
        return obj

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "target": self.target,
            "plugin": self.plugin,
            "distribution": self.distribution,
            "tags": list(self.tags),
            "description": self.description,
            "requires": list(self.requires),
            "options": dict(self.options),
        }


class Registry:
    """Components by kind; lookups raise errors that say what to type instead."""

    def __init__(self, failed_plugins: Sequence[tuple[str, str]] = ()):
        self._by_kind: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}
        #: (plugin name, error) of plugins that failed to load, for better "unknown" errors.
        self.failed_plugins = list(failed_plugins)

    # -- building -------------------------------------------------------------------------
    def add(self, reg: Registration) -> None:
        if reg.kind not in self._by_kind:
            raise PluginError(f"Unknown component kind {reg.kind!r}; expected one of {sorted(KINDS)}.")
        if ":" not in reg.target:
            raise PluginError(
                f"Plugin {reg.plugin!r} registered {reg.kind} {reg.name!r} with target {reg.target!r}; "
                "a target must look like 'package.module:Attribute'."
            )
        existing = self._by_kind[reg.kind].get(reg.name)
        if existing is not None:
            raise PluginError(
                f"Two plugins register the {reg.kind} {reg.name!r}: {_origin(existing)} and "
                f"{_origin(reg)}. Uninstall one of them, or disable one with "
                f"ROLL_DISABLE_PLUGINS={existing.plugin}."
            )
        self._by_kind[reg.kind][reg.name] = reg

    def remove_plugin(self, plugin: str) -> None:
        for regs in self._by_kind.values():
            for name in [n for n, r in regs.items() if r.plugin == plugin]:
                del regs[name]

    # -- lookups --------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind[kind])

    def all(self, kind: str | None = None) -> Iterator[Registration]:
        kinds = [kind] if kind else list(KINDS)
        for k in kinds:
            yield from (self._by_kind[k][n] for n in sorted(self._by_kind[k]))

    def __contains__(self, key: tuple[str, str]) -> bool:
        kind, name = key
        return name in self._by_kind.get(kind, {})

    def find_by_tag(self, kind: str, tag: str) -> list[Registration]:
        """Registrations of ``kind`` carrying ``tag`` (exact match first, then case-insensitive)."""
        regs = list(self._by_kind[kind].values())
        exact = [r for r in regs if tag in r.tags]
        if exact:
            return exact
        return [r for r in regs if tag.lower() in (t.lower() for t in r.tags)]

    def get(self, kind: str, name: str, *, config_key: str | None = None) -> Registration:
        """The registration called ``name``, or a single registration tagged ``name``."""
        regs = self._by_kind[kind]
        if name in regs:
            return regs[name]
        tagged = self.find_by_tag(kind, name)
        if len(tagged) == 1:
            return tagged[0]
        raise UnknownComponentError(self._unknown_message(kind, name, config_key, tagged))

    def load(self, kind: str, name: str, *, config_key: str | None = None) -> Any:
        return self.get(kind, name, config_key=config_key).load()

    def _unknown_message(self, kind, name, config_key, ambiguous) -> str:
        where = f" (at {config_key})" if config_key else ""
        label = kind.replace("_", " ")
        if ambiguous:
            return (
                f"The {label} tag {name!r}{where} matches several components: "
                f"{', '.join(r.name for r in ambiguous)}. Use one of these names instead."
            )
        choices = set(self._by_kind[kind])
        for r in self._by_kind[kind].values():
            choices.update(r.tags)
        msg = f"Unknown {label} {name!r}{where}."
        hits = close_matches(name, choices)
        if hits:
            msg += " Did you mean " + " or ".join(repr(h) for h in hits) + "?"
        installed = ", ".join(self.names(kind)) or "none"
        msg += f" Installed {_PLURALS.get(kind, label + 's')}: {installed}."
        provider = KNOWN_PROVIDERS.get((kind, name)) or (
            KNOWN_TAG_PROVIDERS.get(name) if kind == "env" else None
        )
        if provider:
            msg += f" {name!r} is provided by the package {provider!r}: pip install {provider}."
        for plugin, error in self.failed_plugins:
            msg += f" Note: plugin {plugin!r} failed to load ({error}); it may provide {name!r}."
        return msg


_PLURALS = {"strategy": "strategies", "policy_loss": "policy losses"}


def _origin(reg: Registration) -> str:
    if reg.distribution and reg.distribution != reg.plugin:
        return f"plugin {reg.plugin!r} (distribution {reg.distribution!r})"
    return f"plugin {reg.plugin!r}"
