"""The plugin manager: finds plugins, isolates their failures, builds the registry.

Plugins are Python packages that expose an entry point in the ``roll`` group::

    [project.entry-points.roll]
    maze = "roll_env_maze.plugin"

The entry module implements hooks from :mod:`roll_core.hookspecs`. roll-core's own components
are registered by the modules in :data:`BUILTIN_PLUGINS` through the same hooks.

A plugin that raises while importing or registering is recorded as failed (``roll plugins list``
shows it with its error) and everything it registered is withdrawn; the others keep working.

Environment variables:

``ROLL_DISABLE_PLUGIN_AUTOLOAD``
    when set (non-empty), entry points are not loaded; only built-ins and ``ROLL_PLUGINS``.
``ROLL_DISABLE_PLUGINS``
    comma-separated plugin (entry point) names to skip.
``ROLL_PLUGINS``
    comma-separated module names to load as extra plugins (handy in tests and notebooks).

Every process builds its own manager on first use (:func:`get_plugin_manager`); Ray workers do
the same in their own interpreter, so nothing about plugins has to be pickled.
"""

from __future__ import annotations

import importlib
import os
import threading
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from roll_core import hookspecs
from roll_core.errors import PluginError, did_you_mean
from roll_core.registry import KINDS, Registration, Registry, check_options

ENTRY_POINT_GROUP = "roll"

#: roll-core's own plugins: modules implementing the same hooks as external ones.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "roll_core.builtin.algorithms",
    "roll_core.builtin.strategies",
    "roll_core.builtin.rewards",
    "roll_core.builtin.group_filters",
)


@dataclass
class PluginInfo:
    """One plugin as ``roll plugins list`` shows it."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    status: str = "ok"  # "ok" | "failed" | "disabled"
    error: str | None = None
    traceback: str | None = None
    provides: list[Registration] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "builtin": self.builtin,
            "status": self.status,
            "error": self.error,
            "provides": [{"kind": r.kind, "name": r.name, "tags": list(r.tags)} for r in self.provides],
        }


def _env_list(var: str) -> list[str]:
    return [item.strip() for item in os.environ.get(var, "").split(",") if item.strip()]


class PluginManager:
    """Loads plugins in isolation and builds a :class:`Registry` from their hooks."""

    def __init__(self, *, autoload: bool | None = None, disabled: list[str] | None = None,
                 extra_modules: list[str] | None = None):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        if autoload is None:
            autoload = not os.environ.get("ROLL_DISABLE_PLUGIN_AUTOLOAD")
        self.disabled = set(disabled if disabled is not None else _env_list("ROLL_DISABLE_PLUGINS"))
        for module_name in BUILTIN_PLUGINS:
            self._load(name=module_name.rsplit(".", 1)[-1], module_name=module_name, builtin=True,
                       distribution="roll-core")
        if autoload:
            self._load_entry_points()
        for module_name in extra_modules if extra_modules is not None else _env_list("ROLL_PLUGINS"):
            self._load(name=module_name, module_name=module_name)
        self.registry = self._build_registry()

    # -- loading -------------------------------------------------------------------------
    def _load_entry_points(self) -> None:
        seen: set[tuple[str, str]] = set()
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = getattr(ep, "dist", None)
            key = (ep.name, ep.value)
            if key in seen:  # the same distribution visible twice on sys.path
                continue
            seen.add(key)
            self._load(
                name=ep.name,
                module_name=ep.value,
                distribution=dist.metadata["Name"] if dist else None,
                version=dist.version if dist else None,
                entry_point=ep,
            )

    def _load(self, *, name: str, module_name: str, builtin: bool = False,
              distribution: str | None = None, version: str | None = None, entry_point=None) -> None:
        if name in self.plugins:
            # another distribution's entry point has this name: load both, under distinct names, so
            # neither silently replaces the other (sys.path order would decide); components both
            # register are refused when selected (Registry: "registered by 2 plugins")
            name = f"{name} ({distribution or module_name})"
        info = PluginInfo(name=name, module=module_name, distribution=distribution, version=version,
                          builtin=builtin)
        self.plugins[name] = info
        if name in self.disabled and not builtin:
            info.status = "disabled"
            return
        try:
            module = entry_point.load() if entry_point is not None else importlib.import_module(module_name)
            if not isinstance(module, ModuleType):
                raise TypeError(f"entry point {module_name!r} must name a module, got {type(module).__name__}")
            check_hook_names(module)
            self.pm.register(module, name=name)
        except (Exception, SystemExit) as exc:  # a broken plugin must not break roll, not even sys.exit()
            info.status, info.error = "failed", f"{type(exc).__name__}: {exc}"
            info.traceback = traceback.format_exc()

    def _build_registry(self) -> Registry:
        registry = Registry()
        for kind, hook_name in KINDS.items():
            hook = getattr(self.pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                info = self.plugins.get(impl.plugin_name)
                if info is None or info.status != "ok":
                    continue
                try:
                    impl.function(register=_Registrar(registry, kind, info))
                except Exception as exc:
                    registry.remove_plugin(info.name)
                    info.provides.clear()
                    info.status, info.error = "failed", f"{type(exc).__name__}: {exc}"
                    info.traceback = traceback.format_exc()
                    self.pm.unregister(name=info.name)
        self.pm.check_pending()  # every registered hook implementation has a spec (check_hook_names)
        for info in self.plugins.values():
            if info.status == "failed":
                registry.failed_plugins.append((info.name, info.error or ""))
        return registry

    # -- queries -------------------------------------------------------------------------
    @property
    def failures(self) -> list[PluginInfo]:
        return [p for p in self.plugins.values() if p.status == "failed"]

    def get_plugin(self, name: str) -> PluginInfo | None:
        return self.plugins.get(name)


def check_hook_names(module: ModuleType) -> None:
    """Raise :class:`PluginError` when ``module`` marks a function as a roll hook that does not exist.

    pluggy would only find it at ``check_pending()`` time, for the whole process; here the plugin
    that misspelt its hook fails alone, with the hook's name and the closest real one.
    """
    marker = f"{hookspecs.PROJECT_NAME}_impl"
    specs = [n for n in dir(hookspecs) if hasattr(getattr(hookspecs, n), f"{hookspecs.PROJECT_NAME}_spec")]
    for attr in dir(module):
        obj = getattr(module, attr, None)
        if callable(obj) and hasattr(obj, marker) and attr not in specs:
            raise PluginError(f"{module.__name__}.{attr} is marked @hookimpl but roll has no hook {attr!r}."
                              f"{did_you_mean(attr, specs)} The hooks are listed in roll_core.hookspecs.")


class _Registrar:
    """The ``register`` callback handed to one plugin's hook for one kind."""

    def __init__(self, registry: Registry, kind: str, info: PluginInfo):
        self.registry, self.kind, self.info = registry, kind, info

    def __call__(self, name: str, target: str, *, tags=(), description: str = "", requires=(),
                 **options: Any) -> Registration:
        if isinstance(tags, str):
            tags = (tags,)
        if isinstance(requires, str):
            requires = (requires,)
        check_options(self.kind, name, self.info.name, options)
        reg = Registration(
            kind=self.kind,
            name=name,
            target=target,
            plugin=self.info.name,
            distribution=self.info.distribution,
            tags=tuple(tags),
            description=description,
            requires=tuple(requires),
            options=options,
        )
        self.registry.add(reg)
        self.info.provides.append(reg)
        return reg


_lock = threading.Lock()
_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """This process's plugin manager, built on first use."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = PluginManager()
        return _manager


def get_registry() -> Registry:
    """This process's registry of components."""
    return get_plugin_manager().registry


def reset_plugin_manager() -> None:
    """Forget the cached manager so the next use rescans entry points (tests, new installs)."""
    global _manager
    with _lock:
        _manager = None
