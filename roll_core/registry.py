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

from roll_core.errors import PluginError, UnknownComponentError, close_matches, did_you_mean

#: kind -> the hook that registers it. The order is the display order of ``roll plugins list``.
KINDS: dict[str, str] = {
    "env": "roll_register_envs",
    "advantage_estimator": "roll_register_advantage_estimators",
    "policy_loss": "roll_register_policy_losses",
    "strategy": "roll_register_strategies",
    "reward": "roll_register_rewards",
    "agent": "roll_register_agents",
    "group_filter": "roll_register_group_filters",
}

def _one_of(*allowed: Any):
    def check(value: Any) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(map(repr, allowed))}"
    return check


def _instance(cls: type | tuple[type, ...], what: str):
    def check(value: Any) -> str | None:
        return None if isinstance(value, cls) else f"must be {what}"
    return check


def _requirements(value: Any) -> str | None:
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) and v.strip() for v in value):
        return None
    return "must be a non-empty list of pip requirement strings"


def _target(value: Any) -> str | None:
    if isinstance(value, str) and ":" in value:
        return None
    return "must be a 'package.module:Attribute' string"


#: kind -> option -> check (None when the value is fine, else what is wrong). The hooks in
#: :mod:`roll_core.hookspecs` document each option; an option not listed here is an error, so a
#: misspelt one (``need_critic=True``) cannot silently do nothing.
KIND_OPTIONS: dict[str, dict[str, Any]] = {
    "env": {"defaults": _instance(Mapping, "a mapping of env_config values"),
            "requirements": _requirements,  # the env's own Python environment (roll_core.distributed.env_python)
            "python": _instance(str, "a Python version or specifier string ('3.11', '>=3.10,<3.13')")},
    "advantage_estimator": {"needs_critic": _instance(bool, "True or False"),
                            "granularity": _one_of("trajectory", "step")},
    "policy_loss": {},
    "strategy": {"role": _one_of("train", "infer"), "needs_gpu": _instance(bool, "True or False"),
                 "critic": _target, "serves_lora": _instance(bool, "True or False")},
    "reward": {},
    "agent": {"config_model": _target,  # roll_core.envs.binding.agent_config_model
              "expert": _target},  # the scripted policy's demonstrator (roll_core.rollout.agents.agent)
    "group_filter": {},
}
#: options a registration of the kind must give
REQUIRED_OPTIONS: dict[str, tuple[str, ...]] = {"strategy": ("role",)}


def check_options(kind: str, name: str, plugin: str, options: Mapping[str, Any]) -> None:
    """Raise :class:`PluginError` for an unknown, missing or malformed registration option."""
    accepted = KIND_OPTIONS.get(kind, {})
    where = f"Plugin {plugin!r} registered the {kind.replace('_', ' ')} {name!r}"
    for option, value in options.items():
        check = accepted.get(option)
        if check is None:
            listed = ", ".join(accepted) or "none"
            raise PluginError(f"{where} with the unknown option {option!r}.{did_you_mean(option, accepted)} "
                              f"Options of this kind: {listed} (see roll_core.hookspecs).")
        problem = check(value)
        if problem:
            raise PluginError(f"{where} with {option}={value!r}, which {problem}.")
    missing = [o for o in REQUIRED_OPTIONS.get(kind, ()) if o not in options]
    if missing:
        raise PluginError(f"{where} without the required option {missing[0]!r} (see roll_core.hookspecs).")


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


def import_target(target: str) -> Any:
    """``"package.module:Attr.attr"`` -> the object: the one loader of import paths in roll."""
    module_name, _, attr = target.partition(":")
    obj = importlib.import_module(module_name)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


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
        try:
            obj = import_target(self.target)
        except PluginError:
            raise
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
        except Exception as exc:  # a SyntaxError or a raising module body: the plugin's bug, said plainly
            where = f" ({exc.filename}, line {exc.lineno})" if isinstance(exc, SyntaxError) else ""
            raise PluginError(
                f"The {self.kind} {self.name!r} from plugin {self.plugin!r} failed while importing "
                f"{self.target.partition(':')[0]!r}: {type(exc).__name__}: {exc}{where}. This is a bug in that plugin."
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
        #: (kind, name) -> the registrations of plugins that both claim that name; neither wins
        self._clashes: dict[tuple[str, str], list[Registration]] = {}
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
        key = (reg.kind, reg.name)
        existing = self._by_kind[reg.kind].pop(reg.name, None)
        if existing is not None or key in self._clashes:
            # which one would win depends on sys.path order: neither does, selecting the name says why
            if existing is not None and existing.plugin == reg.plugin:
                self._by_kind[reg.kind][reg.name] = existing
                raise PluginError(f"Plugin {reg.plugin!r} registers the {reg.kind} {reg.name!r} twice.")
            self._clashes.setdefault(key, [existing] if existing is not None else []).append(reg)
            return
        self._by_kind[reg.kind][reg.name] = reg

    def clashes(self) -> dict[tuple[str, str], list[Registration]]:
        """(kind, name) -> the registrations of several plugins claiming it (none of them is used)."""
        return {key: list(regs) for key, regs in self._clashes.items()}

    def _clash_error(self, kind: str, name: str, config_key: str | None) -> PluginError:
        regs = self._clashes[(kind, name)]
        where = f" (at {config_key})" if config_key else ""
        origins = " and ".join(_origin(r) for r in regs)
        return PluginError(
            f"The {kind.replace('_', ' ')} {name!r}{where} is registered by {len(regs)} plugins: {origins}; "
            f"roll will not guess which one you mean. Uninstall all but one, or disable the others with "
            f"ROLL_DISABLE_PLUGINS={','.join(r.plugin for r in regs[1:])}."
        )

    def remove_plugin(self, plugin: str) -> None:
        for regs in self._by_kind.values():
            for name in [n for n, r in regs.items() if r.plugin == plugin]:
                del regs[name]
        for key in list(self._clashes):
            left = [r for r in self._clashes[key] if r.plugin != plugin]
            if len(left) == len(self._clashes[key]):
                continue
            del self._clashes[key]
            for reg in left:
                self.add(reg)

    # -- lookups --------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(self._by_kind[kind])

    def all(self, kind: str | None = None) -> Iterator[Registration]:
        kinds = [kind] if kind else list(KINDS)
        for k in kinds:
            yield from (self._by_kind[k][n] for n in sorted(self._by_kind[k]))

    def __contains__(self, key: tuple[str, str]) -> bool:
        kind, name = key
        return name in self._by_kind.get(kind, {}) or key in self._clashes

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
        if (kind, name) in self._clashes:
            raise self._clash_error(kind, name, config_key)
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
