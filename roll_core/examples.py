"""The example configs shipped with roll-core, for users of the published wheels.

The repository's ``examples/`` directory is installed with the wheel as data files under
``<prefix>/share/roll/examples`` (``[tool.setuptools.data-files]`` in pyproject.toml); in a source
checkout (an editable install) it is read in place. ``roll examples copy`` writes them into a
directory, where ``roll run examples/frozen_lake/grpo.yaml`` works as the README says: the configs
name their data files relative to that directory.
"""

from __future__ import annotations

import shutil
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import yaml

from roll_core.errors import RollError, did_you_mean

#: where the wheel installs the examples, below an installation scheme's data directory
SHARE_PATH = Path("share") / "roll" / "examples"
#: never copied: build and test leftovers inside example packages
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".pytest_cache")


@dataclass(frozen=True)
class Example:
    """One top-level folder of ``examples/``: its configs and what they need installed."""

    name: str
    path: Path
    description: str
    #: (config path relative to the examples directory, plugin distributions its envs come from)
    configs: tuple[tuple[str, tuple[str, ...]], ...]


def examples_dir() -> Path:
    """The examples directory: the source checkout's, else the installed wheel's data files."""
    checkout = Path(__file__).resolve().parents[1]  # a source checkout has roll's pyproject.toml there
    source = [checkout / "examples"] if (checkout / "pyproject.toml").is_file() else []
    candidates = [*source, Path(sysconfig.get_path("data")) / SHARE_PATH, Path(sys.prefix) / SHARE_PATH,
                  Path(site.getuserbase()) / SHARE_PATH]
    for candidate in candidates:
        if candidate.is_dir() and any(candidate.iterdir()):
            return candidate
    raise RollError("roll's examples were not found (looked in "
                    f"{', '.join(str(c) for c in candidates)}); reinstall roll-core from its wheel.")


def list_examples(root: Path | None = None) -> list[Example]:
    root = root or examples_dir()
    return [_example(path, root) for path in sorted(root.iterdir()) if path.is_dir() and path.name[0] not in "._"]


def copy_examples(names: list[str] | None, dest: Path, *, force: bool = False) -> list[Path]:
    """Copy the named examples (all when ``names`` is empty) to ``dest/examples/<name>``."""
    root = examples_dir()
    available = {e.name: e for e in list_examples(root)}
    chosen = list(names or available)
    for name in chosen:
        if name not in available:
            raise RollError(f"No example called {name!r}.{did_you_mean(name, available)} "
                            f"Examples: {', '.join(available)} (`roll examples list`).")
    targets = [dest / "examples" / name for name in chosen]
    existing = [t for t in targets if t.exists()]
    if existing and not force:
        raise RollError(f"{', '.join(str(t) for t in existing)} already exist{'s' if len(existing) == 1 else ''}; "
                        "nothing was copied. Pass --force to overwrite, or --to another directory.")
    for name, target in zip(chosen, targets):
        try:
            shutil.copytree(available[name].path, target, ignore=IGNORED, dirs_exist_ok=True)
        except OSError as exc:
            raise RollError(f"Cannot copy the example {name!r} to {target}: {exc.strerror or exc}.") from None
    return targets


def _example(path: Path, root: Path) -> Example:
    configs = sorted(str(p.relative_to(root)) for p in path.glob("*.yaml"))
    readme = path / "README.md"
    description = ""
    if configs:
        description = _header(root / configs[0])
    elif readme.is_file():
        description = next((ln.lstrip("# ").strip() for ln in readme.read_text().splitlines() if ln.strip()), "")
    return Example(path.name, path, description,
                   tuple((c, tuple(sorted(set(_env_packages(root / c))))) for c in configs))


def _header(config: Path) -> str:
    """The first sentence of a YAML config's header comment: what it trains."""
    lines = []
    for line in config.read_text().splitlines():
        if not line.startswith("#") or not line.strip("# "):
            if lines:
                break
            continue
        lines.append(line.lstrip("# ").strip())
    text = " ".join(lines)
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _env_packages(config: Path) -> list[str]:
    """roll's env plugin distributions that a config's envs need (from the known providers)."""
    from roll_core.registry import KNOWN_PROVIDERS, KNOWN_TAG_PROVIDERS

    try:
        data = yaml.safe_load(config.read_text()) or {}
    except yaml.YAMLError:
        return []
    envs = data.get("custom_envs") or {}
    names = [str(e.get("env_type")) for e in envs.values() if isinstance(e, dict) and e.get("env_type")]
    for section in ("train_env_manager", "val_env_manager"):
        names += [str(t) for t in (data.get(section) or {}).get("tags") or [] if t not in envs]
    return [p for p in (KNOWN_PROVIDERS.get(("env", n)) or KNOWN_TAG_PROVIDERS.get(n) for n in names) if p]
