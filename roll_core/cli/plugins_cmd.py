"""``roll plugins list | show NAME | new KIND NAME``: what is installed, what each plugin provides,
and a new plugin package to start from."""

from __future__ import annotations

import inspect
import json

from roll_core.errors import RollError, did_you_mean


def register(subparsers) -> None:
    parser = subparsers.add_parser("plugins", help="list installed plugins and their components")
    sub = parser.add_subparsers(dest="plugins_command", metavar="ACTION", required=True)
    p_list = sub.add_parser("list", help="every plugin and what it registers")
    p_list.add_argument("--json", action="store_true", help="machine-readable output")
    p_list.set_defaults(func=cmd_list)
    p_show = sub.add_parser("show", help="details of one plugin or component")
    p_show.add_argument("name", help="a plugin name or a component name (env, estimator, ...)")
    p_show.add_argument("--json", action="store_true", help="machine-readable output")
    p_show.set_defaults(func=cmd_show)
    from roll_core.scaffold import KINDS

    p_new = sub.add_parser("new", help="write a new plugin package (env, strategy, reward, agent) that installs and "
                                       "passes its own tests", description="Kinds: " + "; ".join(
                                           f"{k}: {v[1]}" for k, v in KINDS.items()))
    p_new.add_argument("kind", choices=list(KINDS), help="what the plugin provides")
    p_new.add_argument("name", help="the component's name, as configs select it (e.g. demo_env)")
    p_new.add_argument("--dir", default=None, metavar="DIR",
                       help="where to write the package (default: ./roll-<kind>-<name>)")
    p_new.add_argument("--force", action="store_true", help="write into a non-empty directory")
    p_new.set_defaults(func=cmd_new)


def _rows():
    from roll_core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    return manager, sorted(manager.plugins.values(), key=lambda p: (not p.builtin, p.name))


def cmd_list(args) -> int:
    manager, plugins = _rows()
    if args.json:
        print(json.dumps([p.to_dict() for p in plugins], indent=2))
        return 0
    table = [("PLUGIN", "DISTRIBUTION", "STATUS", "KIND", "NAME", "TAGS", "DESCRIPTION")]
    for p in plugins:
        dist = f"{p.distribution or '-'}{' ' + p.version if p.version else ''}"
        status = p.status.upper() if p.status != "ok" else "ok"
        if p.status != "ok" or not p.provides:
            table.append((p.name, dist, status, "-", "-", "-", p.error or ""))
            continue
        for i, reg in enumerate(p.provides):
            table.append((
                p.name if i == 0 else "", dist if i == 0 else "", status if i == 0 else "",
                reg.kind, reg.name, ",".join(reg.tags), reg.description,
            ))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + str(row[-1]))
    if manager.failures:
        print(f"\n{len(manager.failures)} plugin(s) FAILED to load; `roll plugins show NAME` shows why.")
    return 0


def cmd_new(args) -> int:
    from roll_core.scaffold import new_package

    generated = new_package(args.kind, args.name, args.dir, force=args.force)
    root = generated.root
    print(f"wrote {generated.names['distribution']} ({args.kind} {generated.names['name']!r}) to {root}/:")
    for path in generated.files:
        print(f"  {path.relative_to(root)}")
    print(f"\nnext:\n  cd {root}\n  pip install -e .\n  pytest\n  roll plugins show {generated.names['name']}")
    print({"env": "  roll run configs/grpo.yaml max_steps=2",
           "agent": "  roll rollout configs/grpo.yaml --policy scripted   # its expert plays; reply token counts\n"
                    "  roll run configs/grpo.yaml max_steps=2"}.get(args.kind, "  roll run configs/rlvr.yaml max_steps=2"))
    return 0


def cmd_show(args) -> int:
    """A plugin's summary and/or the components called or tagged NAME, with their config fields.

    A plugin and the env it registers usually share a name (``demo_env``), so both are shown.
    """
    manager, _ = _rows()
    info = manager.get_plugin(args.name)
    regs = [r for r in manager.registry.all() if r.name == args.name or args.name in r.tags]
    if info is None and not regs:
        names = list(manager.plugins) + [r.name for r in manager.registry.all()]
        names += [t for r in manager.registry.all() for t in r.tags]
        raise RollError(f"No plugin or component called {args.name!r}.{did_you_mean(args.name, names)} "
                        "Run `roll plugins list` to see what is installed.")
    components = [_component(reg) for reg in regs]
    if args.json:
        plugin = None if info is None else {**info.to_dict(), "traceback": info.traceback}
        print(json.dumps({"plugin": plugin, "components": components}, indent=2, default=str))
        return 0
    if info is not None:
        print(f"plugin:       {info.name}")
        print(f"module:       {info.module}")
        print(f"distribution: {info.distribution or '-'} {info.version or ''}")
        print(f"status:       {info.status}")
        if info.error:
            print(f"error:        {info.error}")
        if info.traceback:
            print(info.traceback)
        for reg in info.provides:
            print(f"  {reg.kind:20} {reg.name:20} {reg.description}")
    for component in components:
        print()
        _print_component(component)
    return 0


def _component(reg) -> dict:
    """One registration with its docstring and config fields (registration ``defaults`` applied)."""
    out = reg.to_dict()
    try:
        obj = reg.load()
    except RollError as exc:
        out["error"] = str(exc)
        return out
    out["doc"] = inspect.getdoc(obj) or ""
    model = getattr(obj, "config_model", None)
    if reg.kind == "agent":  # agents may name their config model in a registration option
        from roll_core.envs.binding import agent_config_model

        model = agent_config_model(reg)
        out["expert"] = bool(reg.options.get("expert") or callable(getattr(obj, "expert", None)))
    if model is not None and hasattr(model, "model_fields"):
        out["config_fields"] = config_fields(model, reg.options.get("defaults") or {})
    return out


def config_fields(model, presets) -> list[dict]:
    """The fields of a pydantic config model: type, default (a registration's preset wins), description."""
    from roll_core.validation import describe

    fields = []
    for name, field in model.model_fields.items():
        row = {"name": name, "type": describe(field.annotation), "description": field.description or "",
               "required": field.is_required()}
        if not field.is_required():
            row["default"] = field.get_default(call_default_factory=True)
        if name in presets:
            row["preset"] = presets[name]
        fields.append(row)
    return fields


def _print_component(c: dict) -> None:
    print(f"{c['kind']} {c['name']!r} from plugin {c['plugin']!r} -> {c['target']}")
    if c["tags"]:
        print(f"tags: {', '.join(c['tags'])}")
    if c["requires"]:
        print(f"requires: {', '.join(c['requires'])}")
    presets = c["options"].get("defaults")
    if presets:
        print("preset env_config (registration defaults): "
              + ", ".join(f"{k}={v!r}" for k, v in presets.items()))
    if c["options"].get("requirements"):
        python = c["options"].get("python")
        print(f"own Python environment: {' '.join(c['options']['requirements'])}"
              + (f" (Python {python})" if python else "") + "; its env managers run in it (docs/guides/env-python.md)")
    if "error" in c:
        print(f"(cannot import: {c['error']})")
        return
    if c["kind"] == "agent":
        print(f"expert: {'yes' if c.get('expert') else 'none (no scripted policy, no warmup_sft)'}; what its "
              "replies cost in tokens: `roll rollout CONFIG --policy scripted` (per batch) or check_agent(...)")
    if c["doc"]:
        print("\n" + c["doc"])
    fields = c.get("config_fields")
    if fields:
        where = "custom_envs.<tag>.env_config" if c["kind"] in ("env", "agent") else "its config"
        print(f"\nconfig fields ({where}; a preset of this registration is marked *):")
        rows = [(f["name"], f["type"], _default(f), f["description"]) for f in fields]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for row in rows:
            print("  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  " + row[3])


def _default(field: dict) -> str:
    if "preset" in field:
        base = "required" if field["required"] else repr(field["default"])
        return f"{field['preset']!r}* (class: {base})"
    return "required" if field["required"] else repr(field["default"])
