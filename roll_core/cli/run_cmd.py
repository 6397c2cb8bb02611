"""``roll run CONFIG [KEY=VALUE ...] [--address ADDR]``: validate, resolve, then train.

Everything that can be wrong with a config is reported before any worker starts: the config is
loaded, validated and resolved against the installed plugins here, and only then handed to
``roll_core.pipeline.launch``.
"""

from __future__ import annotations

import importlib

from roll_core.cli.config_cmd import add_config_arguments, load_from_args
from roll_core.errors import RollError

PIPELINE_MODULE = "roll_core.pipeline"


def register(subparsers) -> None:
    parser = subparsers.add_parser("run", help="train with a config (agentic or RLVR)")
    add_config_arguments(parser)
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="Ray cluster to join (default: RAY_ADDRESS, else a local cluster)")
    parser.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from dataclasses import replace

    # the run's own command line: a run that stops for a lost rank says how to continue with it
    resolved = replace(load_from_args(args, resolve_plugins=True), argv=tuple(getattr(args, "argv", ())))
    launch = pipeline_launch()
    result = launch(resolved, address=args.address)
    return result if isinstance(result, int) else 0


def pipeline_launch():
    """``roll_core.pipeline.launch``, or a clear error when this build has no pipeline yet."""
    try:
        module = importlib.import_module(PIPELINE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != PIPELINE_MODULE:
            raise RollError(f"The training pipeline cannot be imported: {exc}. Is roll fully installed?") from exc
        module = None
    launch = getattr(module, "launch", None)
    if launch is None:
        raise RollError(
            "The config is valid, but this build of roll has no training pipeline yet "
            f"({PIPELINE_MODULE}.launch does not exist), so nothing was started. "
            "`roll config show CONFIG` prints the resolved config."
        )
    return launch
