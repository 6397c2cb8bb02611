"""The ``roll`` command reference, generated from roll's own argparse parser at every docs build.

Replaces the ``<!-- roll-cli-help -->`` marker in ``reference/cli.md`` with the help text of every
command and subcommand, as ``roll ... --help`` prints it, so the page always matches the CLI.
"""

from __future__ import annotations

import argparse
import functools

MARKER = "<!-- roll-cli-help -->"


def commands(parser: argparse.ArgumentParser, prefix: str = "roll") -> list[tuple[str, argparse.ArgumentParser]]:
    """(``roll config show``, its parser) for the parser and every subcommand under it, depth first."""
    found = [(prefix, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += commands(sub, f"{prefix} {name}")
    return found


def cli_markdown() -> str:
    from roll_core.cli import build_parser

    lines = []
    for name, parser in commands(build_parser()):
        parser.formatter_class = functools.partial(argparse.HelpFormatter, width=100)
        depth = name.count(" ")
        lines += [f"{'#' * min(depth + 2, 4)} `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def on_page_markdown(markdown, page, config, files):
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_markdown())
    return markdown
