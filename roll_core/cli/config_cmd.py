"""``roll config show CONFIG [KEY=VALUE ...]``: the config a run would use, as YAML, and its layout.

The layout (roles -> ranks -> devices, :func:`roll_core.distributed.layout.build_layout`) follows
as YAML comments: it is computed without Ray, and a config whose ``world_size``, ``device_mapping``
and ``num_gpus_per_worker`` contradict each other is refused by the resolve that precedes it.

Also home of the config arguments ``roll run`` shares: ``CONFIG`` is a YAML file, or a directory
with ``--config-name`` (ROLL's ``--config_path`` / ``--config_name`` spellings work too), followed
by overrides.
"""

from __future__ import annotations

import sys
import warnings

from roll_core.errors import RollError


def register(subparsers) -> None:
    parser = subparsers.add_parser("config", help="inspect configs")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print the resolved config (plugin names checked, defaults filled)")
    add_config_arguments(show)
    show.add_argument("--no-resolve", action="store_true",
                      help="only validate; do not check plugin names or fill derived values")
    show.set_defaults(func=cmd_show)


def add_config_arguments(parser) -> None:
    parser.add_argument("config", nargs="?", metavar="CONFIG",
                        help="a YAML config file, or a config directory together with --config-name")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="overrides such as actor_train.training_args.learning_rate=2e-6 "
                             "(+key=value adds a key, ~key removes one)")
    parser.add_argument("--config-name", "--config_name", dest="config_name", metavar="NAME",
                        help="config file name (without .yaml) inside the CONFIG directory")
    parser.add_argument("--config-path", "--config_path", dest="config_path", metavar="DIR",
                        help="ROLL-style config directory; CONFIG may then be left out")


def config_source(args) -> tuple[str, list[str], str | None]:
    """(path, overrides, config name) from the parsed arguments."""
    overrides = list(args.overrides)
    if args.config_path:
        if args.config:  # argparse put the first override into the CONFIG slot
            overrides.insert(0, args.config)
        return args.config_path, overrides, args.config_name
    if not args.config:
        raise RollError("No config given: pass a YAML file, or a directory with --config-name NAME.")
    if "=" in args.config:
        raise RollError(f"No config given: {args.config!r} looks like an override; the config file comes first.")
    return args.config, overrides, args.config_name


def load_from_args(args, *, resolve_plugins: bool = True):
    """The validated config (or the :class:`Run`) the arguments name; warnings go to stderr."""
    from roll_core.config import ConfigWarning, load_config, resolve

    path, overrides, config_name = config_source(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            config = load_config(path, overrides, config_name=config_name)
            return resolve(config) if resolve_plugins else config
        finally:
            _report(caught, ConfigWarning)


def _report(caught, category) -> None:
    seen = set()
    for record in caught:
        if not issubclass(record.category, category):
            warnings.warn_explicit(record.message, record.category, record.filename, record.lineno)
        elif str(record.message) not in seen:
            seen.add(str(record.message))
            print(f"roll: warning: {record.message}", file=sys.stderr)


def cmd_show(args) -> int:
    from roll_core.config import dump_config

    loaded = load_from_args(args, resolve_plugins=not args.no_resolve)
    sys.stdout.write(dump_config(loaded) if args.no_resolve else loaded.to_yaml())
    if not args.no_resolve:
        sys.stdout.write("".join(f"# {line}\n" for line in layout_lines(loaded)))
    return 0


def layout_lines(run) -> list[str]:
    """Where a run's ranks go: one line per role, then one per rank with its devices."""
    from roll_core.distributed.layout import build_layout

    roles = [*run.train_roles, "actor_infer"]
    lines = ["layout (roles -> ranks -> devices; on a cluster without GPUs every rank takes a CPU slot "
             "instead, and ray_resources pin roles to nodes):"]
    layout = build_layout(run.config, roles, on_gpus=True)
    for role, described in zip(layout.roles, layout.describe()):
        lines.append(f"  {described}")
        pin = dict(layout.roles[role].ray_resources)
        for slot in layout.roles[role].ranks:
            if isinstance(slot.devices[0], str):  # no device_mapping: a slot of the rank's own
                where = "a slot of its own"
            else:
                where = f"{'device' if len(slot.devices) == 1 else 'devices'} {', '.join(map(str, slot.devices))}"
            lines.append(f"    rank {slot.rank}: {where} (bundle {slot.bundle}"
                         f"{f', ray_resources {pin}' if pin else ''})")
    return lines
