"""``roll plugins new KIND NAME``: a ready plugin package, written from the templates next to this file.

Every kind (``env``, ``strategy``, ``reward``, ``agent``) gets a pyproject with the ``roll`` entry point, the
component and its registration, tests that use roll's pytest plugin, a README and a starter config;
the package installs with ``pip install -e DIR`` and passes its own tests unchanged, so an author
starts from something that works and changes it one step at a time.

Templates are files under ``templates/<kind>/`` (and ``templates/common/``) whose paths and text
use ``{{placeholder}}`` names (:func:`names`); a ``.tmpl`` suffix is dropped on writing and a
``dot-`` prefix becomes ``.`` (wheels leave hidden files out of globs).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from roll_core.errors import RollError, did_you_mean

#: kind -> (distribution prefix, one line for --help)
KINDS: dict[str, tuple[str, str]] = {
    "env": ("roll-env", "a text environment (TextEnv subclass, config model, solver)"),
    "strategy": ("roll-strategy", "an inference backend (InferStrategy, starting as roll's hf_infer)"),
    "reward": ("roll-reward", "an RLVR reward function"),
    "agent": ("roll-agent", "an agent written against the OpenAI API (a tool, an expert, multi-turn)"),
}
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class Generated:
    """What :func:`new_package` wrote."""

    kind: str
    root: Path
    files: tuple[Path, ...]
    names: dict[str, str]


def names(kind: str, name: str) -> dict[str, str]:
    """The placeholders of ``kind``'s templates for component ``name`` (``demo_env``)."""
    if kind not in KINDS:
        raise RollError(f"Unknown plugin kind {kind!r}.{did_you_mean(kind, KINDS)} Kinds: {', '.join(KINDS)}.")
    name = name.replace("-", "_")
    if not NAME.match(name) or keyword.iskeyword(name):
        raise RollError(f"{name!r} is not usable as a component name: use lowercase letters, digits and "
                        "underscores, starting with a letter (e.g. demo_env).")
    prefix = KINDS[kind][0]
    camel = "".join(part.capitalize() for part in name.split("_"))
    distribution = f"{prefix}-{name.replace('_', '-')}"
    suffix = {"env": "Env", "strategy": "Strategy", "reward": "", "agent": "Agent"}[kind]
    return {
        "name": name,  # what a config selects: env_type / strategy_name / reward_type
        "distribution": distribution,
        "package": distribution.replace("-", "_"),
        "camel": camel,
        "tag": camel,  # the env's or agent's tag (train_env_manager.tags)
        "cls": camel if camel.endswith(suffix) else camel + suffix,
        "config_cls": (camel if camel.endswith(suffix) else camel + suffix) + "Config",
        "title": name.replace("_", " "),
    }


def new_package(kind: str, name: str, dest: str | Path | None = None, *, force: bool = False) -> Generated:
    """Write the package for component ``name`` of ``kind`` into ``dest`` (default ``./<distribution>``)."""
    values = names(kind, name)
    root = Path(dest) if dest is not None else Path(values["distribution"])
    if root.exists() and any(root.iterdir()) and not force:
        raise RollError(f"{root} already exists and is not empty; nothing was written. Choose another "
                        "directory with --dir, or pass --force to write into it.")
    written = []
    for template_root in (resources.files(__name__) / "templates" / "common",
                          resources.files(__name__) / "templates" / kind):
        for rel, text in _walk(template_root):
            path = Path(_fill(rel, values).removesuffix(".tmpl"))
            target = root / path.parent / re.sub(r"^dot-", ".", path.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_fill(text, values))
            written.append(target)
    return Generated(kind, root, tuple(sorted(written)), values)


def _walk(node, prefix: str = ""):
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        rel = f"{prefix}{child.name}"
        if child.is_dir():
            if child.name != "__pycache__":
                yield from _walk(child, rel + "/")
        else:
            yield rel, child.read_text()


def _fill(text: str, values: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template placeholder {{{{{key}}}}} has no value")
        return values[key]

    return PLACEHOLDER.sub(replace, text)
