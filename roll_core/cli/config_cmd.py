"""``roll config show CONFIG [KEY=VALUE ...]``: the config a run would use, as YAML.

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
    return 0
