"""The ``roll`` command line.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed arguments and returning an exit code. Command
modules import heavy libraries (torch, ray) only inside ``func``, so ``roll --help`` stays fast.
A :class:`roll_core.errors.RollError` is printed as a one-paragraph message without traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from roll_core.distributed.cluster import worker_error
from roll_core.errors import RollError

#: subcommand modules, in ``roll --help`` order
COMMAND_MODULES = (
    "roll_core.cli.run_cmd",
    "roll_core.cli.rollout_cmd",
    "roll_core.cli.config_cmd",
    "roll_core.cli.plugins_cmd",
    "roll_core.cli.env_cmd",
    "roll_core.cli.examples_cmd",
    "roll_core.cli.sandbox_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    from roll_core import __version__

    parser = argparse.ArgumentParser(
        prog="roll", description="Train LLM agents with reinforcement learning."
    )
    parser.add_argument("--version", action="version", version=f"roll {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # subcommand not part of this build
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # overrides after options (`roll rollout CFG --batches 2 key=value`) land here
        if not hasattr(args, "overrides") or any(item.startswith("-") for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    args.argv = list(sys.argv[1:] if argv is None else argv)  # to re-run the command elsewhere (env play)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except RollError as exc:
        if args.debug:
            raise
        error = worker_error(exc) or exc  # a RollError raised in a Ray worker comes wrapped in its traceback
        print(f"roll: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("roll: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        error = worker_error(exc)
        if error is None or args.debug:
            raise
        print(f"roll: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
