"""The config reference, generated from roll's pydantic schema at every docs build, so it cannot drift.

Two outputs, both from the same walk of the schema (``AgenticConfig`` and ``RLVRConfig`` and every
section reachable from them, plus the sections they inherit from):

- :func:`config_reference_markdown`: one table per config section (field, type, default, what it
  does, and whether roll uses it, accepts it only so ROLL configs load (``compat(...)``), or
  supports one value only (``fixed(...)``)): the page ``reference/config.md``.
- :func:`roll_compat_markdown`: the ROLL fields roll accepts but does not use, and what roll does
  instead, for ``coming-from/roll.md`` (where it replaces the ``<!-- roll-compat-table -->`` marker).

mkdocs calls :func:`on_files` and :func:`on_page_markdown` (``hooks:`` in mkdocs.yml);
tests/docs/test_config_reference.py checks, without mkdocs, that every field has its row.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from roll_core.config.base import COMPAT, RollModel, is_compat, is_fixed
from roll_core.config.pipeline import AgenticConfig, PipelineConfig, RLVRConfig

ROOTS: tuple[type[BaseModel], ...] = (AgenticConfig, RLVRConfig)
PAGE = "reference/config.md"
COMPAT_MARKER = "<!-- roll-compat-table -->"
#: the label of each kind of field, as the tables show it
STATUS = {"real": "used", "compat": "ROLL compat", "fixed": "one value"}


@dataclass(frozen=True)
class Row:
    """One field of one section, as the reference prints it."""

    section: str
    name: str
    type: str
    default: str
    status: str  # a key of STATUS
    description: str


def sections() -> list[type[BaseModel]]:
    """Every config class a user can write: reachable from the roots through fields that are not
    compatibility-only, plus their config base classes; the roots first, then in walk order."""
    order: list[type[BaseModel]] = []

    def add(cls: type[BaseModel], *, again: bool = False) -> None:
        if (cls in order and not again) or cls is RollModel or not issubclass(cls, RollModel):
            return
        if not again:
            order.append(cls)
        for base in cls.__bases__:
            if isinstance(base, type) and issubclass(base, RollModel):
                add(base)
        for field in cls.model_fields.values():
            if is_compat(field):
                continue
            for arg in _types(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    add(arg)

    order += ROOTS
    for root in ROOTS:
        add(root, again=True)
    return order


def where_used() -> dict[type[BaseModel], list[str]]:
    """The YAML paths at which each section class appears (``custom_envs.<tag>`` for map values)."""
    paths: dict[type[BaseModel], list[str]] = {}

    def walk(cls: type[BaseModel], path: str) -> None:
        if path in paths.setdefault(cls, []):
            return
        paths[cls].append(path)
        for name, field in cls.model_fields.items():
            if is_compat(field):
                continue
            suffix = "." + _map_key(name) if typing.get_origin(_strip_none(field.annotation)) is dict else ""
            for arg in _types(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    walk(arg, f"{path}.{name}{suffix}" if path else f"{name}{suffix}")

    for root in ROOTS:
        walk(root, "")
    return paths


def rows() -> list[Row]:
    """Every field each section declares itself (inherited fields are in the base's table)."""
    out = []
    for cls in sections():
        own = set(vars(cls).get("__annotations__", {}))
        for name, field in cls.model_fields.items():
            if name not in own:
                continue
            status = "compat" if is_compat(field) else "fixed" if is_fixed(field) else "real"
            description = (field.description or "").strip()
            if status == "compat":
                description = description.removeprefix(COMPAT).strip()
            choices = literal_choices(field.annotation) if status != "compat" else ""
            if choices:  # the type column stays narrow; the values go with the description
                description = f"{description} One of {choices}.".strip()
            out.append(Row(cls.__name__, name, type_name(field.annotation), default_text(field), status, description))
    return out


def config_reference_markdown() -> str:
    """The page: an index of the sections, then one table per section."""
    all_rows = rows()
    used = where_used()
    counts = {s: sum(r.status == s for r in all_rows) for s in STATUS}
    lines = [
        "# Config fields",
        "",
        "Every field of roll's config schema, generated from the pydantic models in `roll_core/config/` "
        "when the site is built. Field names and defaults are ROLL's; a description starting with \"roll:\" marks "
        "roll's own additions.",
        "",
        f"**{len(all_rows)} fields**: {counts['real']} used by roll, {counts['compat']} accepted only so ROLL "
        f"configs load (**ROLL compat**: setting one to anything but its default prints a warning naming "
        f"what roll does instead), {counts['fixed']} with **one value** supported (another value is an error).",
        "",
        "Unknown keys are errors (with the YAML path and a suggestion). `roll config show CONFIG` prints a "
        "config resolved with every default filled in; `roll plugins show NAME` the fields of a plugin's own "
        "config (an env's `env_config`, a backend's `strategy_config`). Where the fields meet the numerics, "
        "[Algorithms](../algorithms.md#7-config-reference) has the formulas.",
        "",
        "| Where in a config | Section |",
        "|---|---|",
    ]
    for cls in sections():
        lines.append(f"| {_where(cls, used)} | [{cls.__name__}](#{cls.__name__.lower()}) |")
    for cls in sections():
        lines += ["", f"## {cls.__name__}", ""]
        doc = _first_paragraph(cls.__doc__)
        if doc:
            lines += [doc, ""]
        lines.append(f"Where: {_where(cls, used)}.")
        bases = [b.__name__ for b in cls.__bases__ if issubclass(b, RollModel) and b is not RollModel]
        if bases:
            linked = ", ".join(f"[{b}](#{b.lower()})" for b in bases)
            lines.append(f"Also has every field of {linked}.")
        mine = [r for r in all_rows if r.section == cls.__name__]
        if not mine:
            continue
        lines += ["", "| Field | Type | Default | Description |", "|---|---|---|---|"]
        for r in mine:
            label = "" if r.status == "real" else f"**{STATUS[r.status]}**" + (": " if r.description else ".")
            lines.append(f"| `{r.name}` | {r.type} | {r.default} | {label}{_cell(r.description)} |")
    return "\n".join(lines) + "\n"


def roll_compat_markdown() -> str:
    """The ROLL fields that do nothing in roll (or take one value), with what roll does instead, by section."""
    all_rows = rows()
    used = where_used()
    odd = [r for r in all_rows if r.status != "real"]
    lines = [
        f"Of the {len(all_rows)} fields of roll's schema, {len(all_rows) - len(odd)} are used; the {len(odd)} below "
        "are accepted so that ROLL configs load unchanged. A compat field set to a value other than its default "
        "prints one warning line at start-up; a **one value** field set to another value is an error. "
        "([Config fields](../reference/config.md) has every field.)",
    ]
    for cls in sections():
        mine = [r for r in odd if r.section == cls.__name__]
        if not mine:
            continue
        lines += ["", f"### {cls.__name__}", "",
                  f"Where: {_where(cls, used)}; [all its fields](../reference/config.md#{cls.__name__.lower()}).", "",
                  "| Field | What roll does instead |", "|---|---|"]
        for r in mine:
            label = "**one value**: " if r.status == "fixed" else ""
            lines.append(f"| `{r.name}` | {label}{_cell(r.description) or 'Ignored: setting it changes nothing.'} |")
    return "\n".join(lines) + "\n"


# -- mkdocs hooks -----------------------------------------------------------------------------------------

def on_files(files, config):
    """Add the generated page to the site (it exists only in the build, never in the repository)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=config_reference_markdown()))
    return files


def on_page_markdown(markdown, page, config, files):
    if COMPAT_MARKER in markdown:
        return markdown.replace(COMPAT_MARKER, roll_compat_markdown())
    return markdown


# -- rendering -------------------------------------------------------------------------------------------

def type_name(annotation: Any) -> str:
    """A type as a reader writes YAML: ``int or null``, ``"a", "b"`` for literals, section links."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return "choice"
    if origin is dict:
        return f"map of {type_name(args[1])}" if args else "map"
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        name = annotation.__name__  # compat-only sections (ROLL's filters) have no table to link to
        return f"[{name}](#{name.lower()})" if annotation in sections() else name
    if annotation is Any:
        return "any"
    return f"`{getattr(annotation, '__name__', str(annotation))}`"


def literal_choices(annotation: Any) -> str:
    """The values of the ``Literal`` inside an annotation, as the description lists them ("" if none)."""
    for arg in _types(annotation):
        if typing.get_origin(arg) is typing.Literal:
            return ", ".join(f"`{a}`" for a in typing.get_args(arg))
    return ""


def default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "its defaults"
    text = json.dumps(value) if isinstance(value, (bool, int, float, str, list, dict, type(None))) else repr(value)
    return f"`{text}`" if len(text) <= 40 else f"`{text[:37]}...`"


def _where(cls: type[BaseModel], used: dict[type[BaseModel], list[str]]) -> str:
    paths = [p for p in used.get(cls, [])]
    if cls in ROOTS or (isinstance(cls, type) and issubclass(PipelineConfig, cls)):
        pipelines = [r for r in ROOTS if issubclass(r, cls)]
        only = {"agentic": "agentic", "rlvr": "RLVR"}[pipelines[0].model_fields["pipeline_type"].default]
        return "top level" + ("" if len(pipelines) == len(ROOTS) else f", {only} configs only")
    if not paths:
        subclasses = [c.__name__ for c in sections() if c is not cls and issubclass(c, cls)]
        return "through " + ", ".join(f"[{s}](#{s.lower()})" for s in subclasses)
    return ", ".join(f"`{p}`" for p in paths)


def _map_key(name: str) -> str:
    return {"custom_envs": "<tag>", "rewards": "<domain>"}.get(name, "<key>")


def _strip_none(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _types(annotation: Any):
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _types(arg)


def _first_paragraph(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split()).replace("``", "`")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
