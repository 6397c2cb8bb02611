"""``roll plugins list | show NAME``: what is installed and what each plugin provides."""

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


def cmd_show(args) -> int:
    manager, plugins = _rows()
    info = manager.get_plugin(args.name)
    if info is not None:
        if args.json:
            print(json.dumps({**info.to_dict(), "traceback": info.traceback}, indent=2))
            return 0
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
        return 0
    regs = [r for r in manager.registry.all() if r.name == args.name or args.name in r.tags]
    if not regs:
        names = list(manager.plugins) + [r.name for r in manager.registry.all()]
        raise RollError(f"No plugin or component called {args.name!r}.{did_you_mean(args.name, names)} "
                        "Run `roll plugins list` to see what is installed.")
    for reg in regs:
        if args.json:
            print(json.dumps(reg.to_dict(), indent=2))
            continue
        print(f"{reg.kind} {reg.name!r} from plugin {reg.plugin!r} -> {reg.target}")
        if reg.tags:
            print(f"tags: {', '.join(reg.tags)}")
        if reg.requires:
            print(f"requires: {', '.join(reg.requires)}")
        try:
            obj = reg.load()
        except RollError as exc:
            print(f"(cannot import: {exc})")
            continue
        doc = inspect.getdoc(obj)
        if doc:
            print("\n" + doc)
        config_model = getattr(obj, "config_model", None)
        if reg.kind == "agent":  # agents may name their config model in a registration option
            from roll_core.config.resolve import agent_config_model

            config_model = agent_config_model(reg)
        if config_model is not None and hasattr(config_model, "model_fields"):
            print("\nconfig fields:")
            for fname, field in config_model.model_fields.items():
                default = field.default if field.default is not None else "-"
                print(f"  {fname:24} default={default!r:<12} {field.description or ''}")
        print()
    return 0
