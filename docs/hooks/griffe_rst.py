"""A griffe extension: roll's docstrings are written in reStructuredText idioms, the site renders Markdown.

It rewrites, in each docstring mkdocstrings shows: roles (``:func:`x```, ``:class:`x```) to code,
``text::`` before a literal block to ``text:``, and reST definition lists (a line holding only a
````term```` with an indented definition under it, as in ``roll_core.hookspecs``) to Markdown
definition lists (mkdocs.yml enables ``def_list``). The source stays as it is.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
TERM = re.compile(r"^``([^`]+)``\s*$")


def to_markdown(text: str) -> str:
    text = ROLE.sub(r"`\1`", text)
    lines = text.split("\n")
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
