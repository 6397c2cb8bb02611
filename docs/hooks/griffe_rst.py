"""A griffe extension: roll's docstrings are written in reStructuredText idioms, the site renders Markdown.

It rewrites, in each docstring mkdocstrings shows: roles (``:func:`x```, ``:class:`x```) to code,
``text::`` before a literal block to ``text:``, reST definition lists (a line holding only a
````term```` with an indented definition under it, as in ``roll_core.hookspecs``) to Markdown
definition lists (mkdocs.yml enables ``def_list``), and reST simple tables (``====  ====`` borders,
as in ``roll_core.envs.base``) to Markdown tables. The source stays as it is.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
TERM = re.compile(r"^``([^`]+)``\s*$")
BORDER = re.compile(r"^=+( +=+)+\s*$")


def simple_tables(lines: list[str]) -> list[str]:
    """reST simple tables (border, header, border, rows, border) as Markdown tables."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not BORDER.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        starts = [m.start() for m in re.finditer(r"=+", lines[i])]
        rows: list[list[str]] = []
        borders = 1
        i += 1
        while i < len(lines) and borders < 3:
            line = lines[i]
            i += 1
            if BORDER.match(line):
                borders += 1
                continue
            cuts = [0]
            for start in starts[1:]:  # a cell that starts a column early still belongs to that column
                while start > cuts[-1] + 1 and start < len(line) and line[start - 1] != " ":
                    start -= 1
                cuts.append(start)
            cells = [line[a:b].strip() for a, b in zip(cuts, [*cuts[1:], None])]
            if rows and not cells[0] and borders == 2:  # a continuation line: blank first column
                rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells)]
            else:
                rows.append(cells)
        header, body = rows[0], rows[1:]
        out += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in body]
        out.append("")
    return out


def to_markdown(text: str) -> str:
    text = ROLE.sub(r"`\1`", text)
    lines = simple_tables(text.split("\n"))
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        term = TERM.match(line)
        body = lines[i + 1] if i + 1 < len(lines) else ""
        if term and body.startswith("    ") and body.strip():
            out += ["", f"`{term.group(1)}`", f":   {body.strip()}"]
            i += 2
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()) and not (
                    not lines[i].strip() and (i + 1 >= len(lines) or not lines[i + 1].startswith("    "))):
                out.append("    " + lines[i].strip() if lines[i].strip() else "")
                i += 1
            out.append("")
            continue
        if line.rstrip().endswith("::") and not line.strip() == "::":
            line = line.rstrip()[:-1]
        out.append(line)
        i += 1
    return "\n".join(out)


class RstToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
