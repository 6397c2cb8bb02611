"""Terminal tasks: what an episode asks, the files it starts with, and how it is checked.

A task is data (README.md documents the format for third parties):

``id``           a unique name
``instruction``  what the agent is asked to do (shown in the first observation)
``files``        relative path -> content: the work directory the episode starts in
``check``        how a submission is judged; every key given must pass:
                 ``answer``    the text after ``submit`` equals this (surrounding whitespace ignored)
                 ``file`` with ``equals`` / ``contains``: a work-directory file's content (stripped for ``equals``)
                 ``command``   exits 0 when run in the work directory, after ``check_files`` (hidden from the
                               agent; they overwrite what the agent left there) are written
``tier``         1 (one command), 2 (a few commands that change files), 3 (find and fix a bug)
``solution``     the commands a scripted solver plays, ending with ``submit`` (or ``submit ANSWER``)

Tasks load from a JSONL file (one task per line), from a directory of JSONL files, or from a
directory of task directories (``task.yaml`` with the keys above except ``files``; the work
directory's files under ``files/``, the check's hidden files under ``check_files/``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roll_core.errors import ConfigError
from roll_core.sandbox import Limits, Sandbox

CHECK_KEYS = ("answer", "file", "equals", "contains", "command", "check_files")
TASK_KEYS = ("id", "instruction", "files", "check", "tier", "solution")


@dataclass(frozen=True)
class Check:
    answer: str | None = None
    file: str | None = None
    equals: str | None = None
    contains: str | None = None
    command: str | None = None
    check_files: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.file is None and (self.equals is not None or self.contains is not None):
            raise ValueError("check: 'equals' and 'contains' need 'file' (the work-directory file they test)")
        if self.file is not None and self.equals is None and self.contains is None:
            raise ValueError(f"check: file {self.file!r} needs 'equals' or 'contains'")
        if self.answer is None and self.file is None and self.command is None:
            raise ValueError("check: give at least one of 'answer', 'file' (with 'equals'/'contains'), 'command'")

    def run(self, box: Sandbox, submitted: str | None, limits: Limits) -> tuple[bool, str]:
        """Judge the work directory (and the submitted text): ``(passed, why)``."""
        if self.answer is not None and (submitted or "").strip() != self.answer.strip():
            return False, "the submitted answer is not the expected one" if submitted else "no answer was submitted"
        if self.file is not None:
            text = box.read_text(self.file)
            if text is None:
                return False, f"{self.file} does not exist"
            if self.equals is not None and text.strip() != self.equals.strip():
                return False, f"{self.file} does not hold the expected content"
            if self.contains is not None and self.contains not in text:
                return False, f"{self.file} does not contain the expected text"
        if self.command is not None:
            box.write_files(dict(self.check_files))
            result = box.run(self.command, limits=limits)
            if not result.ok:
                return False, f"the check command failed ({result.summary()})"
        return True, "passed"


@dataclass(frozen=True)
class Task:
    id: str
    instruction: str
    files: Mapping[str, str]
    check: Check
    tier: int = 1
    solution: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "task") -> Task:
        """A task from its documented keys; errors name the task and the key."""
        unknown = sorted(set(data) - set(TASK_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; a task has {', '.join(TASK_KEYS)}")
        for key in ("id", "instruction", "check"):
            if key not in data:
                raise ConfigError(f"{where}: missing {key!r} (a task needs id, instruction and check)")
        check = data["check"]
        if not isinstance(check, Mapping) or set(check) - set(CHECK_KEYS):
            raise ConfigError(f"{where}: 'check' must be a mapping of {', '.join(CHECK_KEYS)}, got {check!r}")
        try:
            built = Check(**{k: v for k, v in check.items() if k != "check_files"},
                          check_files={str(k): str(v) for k, v in (check.get("check_files") or {}).items()})
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        solution = data.get("solution") or ()
        if isinstance(solution, str) or not all(isinstance(c, str) for c in solution):
            raise ConfigError(f"{where}: 'solution' must be a list of commands")
        tier = data.get("tier", 1)
        if tier not in (1, 2, 3):
            raise ConfigError(f"{where}: 'tier' must be 1, 2 or 3, got {tier!r}")
        return cls(str(data["id"]), str(data["instruction"]), {str(k): str(v) for k, v in (data.get("files") or
                   {}).items()}, built, tier, tuple(solution))


def load_tasks(path: str | Path) -> list[Task]:
    """Tasks from a JSONL file, a directory of JSONL files, or a directory of task directories."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ConfigError(f"tasks_path {str(path)!r} does not exist; give a .jsonl file or a directory of tasks")
    if path.is_file():
        tasks = _from_jsonl(path)
    else:
        tasks = [t for f in sorted(path.glob("*.jsonl")) for t in _from_jsonl(f)]
        tasks += [_from_directory(d) for d in sorted(p.parent for p in path.glob("*/task.yaml"))]
    if not tasks:
        raise ConfigError(f"{str(path)!r} holds no task (no *.jsonl lines, no */task.yaml)")
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ConfigError(f"{str(path)!r}: task id {task.id!r} appears twice")
        seen.add(task.id)
    return tasks


def _from_jsonl(path: Path) -> list[Task]:
    tasks = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            where = f"{path}:{number}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON ({exc})") from None
            tasks.append(Task.from_dict(data, where))
    return tasks


def _read_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()} \
        if root.is_dir() else {}


def _from_directory(task_dir: Path) -> Task:
    import yaml

    where = str(task_dir / "task.yaml")
    data = yaml.safe_load((task_dir / "task.yaml").read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(TASK_KEYS)}")
    data = {"id": task_dir.name, **data, "files": {**_read_tree(task_dir / "files"), **(data.get("files") or {})}}
    hidden = _read_tree(task_dir / "check_files")
    if hidden and isinstance(data.get("check"), dict):
        data["check"] = {**data["check"], "check_files": {**hidden, **(data["check"].get("check_files") or {})}}
    return Task.from_dict(data, where)
