"""``trained_episodes.jsonl``: which episodes each step trained on, and how old their tokens were.

One line per trained step, written when the step is done (after the update and the weight sync)::

    {"step": 3, "version": 2, "episodes": [{"group": 0, "episode": 2, "seed": 81, "rows": 4,
                                           "oldest_token": 2}, ...]}

``version`` is the policy version the step trained (``step - 1``); an episode's ``oldest_token`` is
the version that sampled its oldest response token, so ``version - oldest_token`` is its staleness
(at most ``async_generation_ratio``). Agentic episodes are named by (env group, episode index, env
seed); RLVR samples by their prompt group. It is what shows that a resumed asynchronous run trains
every episode once (docs/architecture.md, "Resume"): a resumed run first drops the lines of steps
after its checkpoint (trained by the interrupted run, whose weights were lost with it), so the
file holds each step once, as it was trained by the run whose weights continue.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from typing import Any

TRAINED_FILE = "trained_episodes.jsonl"

#: the per-row lists that name what a row came from, by pipeline (first match): record field -> key
ID_KEYS: tuple[dict[str, str], ...] = (
    {"group": "group_id", "episode": "episode_id", "seed": "seed"},  # agentic
    {"group": "group_ids"},  # RLVR: one key per prompt group of the batch
)


def episodes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The episodes of a batch of training rows, in row order: ids, row count, oldest token version."""
    fields = next((keys for keys in ID_KEYS if all(k in data for k in keys.values())), None)
    if fields is None:
        return []
    versions = data.get("token_versions")
    oldest_per_row: list[int | None] = []
    if versions is not None:
        masked = versions.clone()
        masked[masked < 0] = 2**62  # prompt and padding positions
        oldest = masked.min(dim=-1).values.tolist()
        oldest_per_row = [None if v == 2**62 else int(v) for v in oldest]
    found: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
    for row in range(len(data[next(iter(fields.values()))])):
        ids = {name: _plain(data[key][row]) for name, key in fields.items()}
        entry = found.setdefault(tuple(ids.values()), {**ids, "rows": 0, "oldest_token": None})
        entry["rows"] += 1
        oldest = oldest_per_row[row] if oldest_per_row else None
        if oldest is not None and (entry["oldest_token"] is None or oldest < entry["oldest_token"]):
            entry["oldest_token"] = oldest
    return list(found.values())


def append(logging_dir: str, step: int, version: int, trained: list[dict[str, Any]]) -> None:
    os.makedirs(logging_dir, exist_ok=True)
    with open(os.path.join(logging_dir, TRAINED_FILE), "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "version": version, "episodes": trained}) + "\n")


def truncate(logging_dir: str, step: int) -> None:
    """Keep the lines of steps up to ``step`` (a run starting at ``step``: 0 when fresh, a checkpoint's)."""
    path = os.path.join(logging_dir, TRAINED_FILE)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(path + ".part", path)


def read(logging_dir: str) -> list[dict[str, Any]]:
    """The lines of ``logging_dir``'s record, in file order."""
    with open(os.path.join(logging_dir, TRAINED_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
