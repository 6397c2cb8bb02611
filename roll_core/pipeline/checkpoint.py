"""Checkpoint layout, atomic saving and finding the checkpoint to resume from.

``output_dir/checkpoint-{step}/`` holds the actor in Hugging Face format at its top level (so
``AutoModelForCausalLM.from_pretrained(that_dir)`` loads it) together with what its train
strategy needs to continue exactly (optimizer, scheduler, RNG), a ``critic/`` folder when there is
a critic, and ``pipeline_state.pt`` (step, KL controller, rollout counters, metric history). Every
state file is read with ``torch.load(weights_only=True)``: a checkpoint directory cannot run code.

A checkpoint is written into ``checkpoint-{step}.tmp`` and renamed when complete, and
``pipeline_state.pt`` is its last file: an interrupted save never leaves a directory that looks
like a checkpoint, so ``resume_from_checkpoint: true`` always finds a complete one.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

PIPELINE_STATE = "pipeline_state.pt"
_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_dir(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"checkpoint-{step}")


def is_complete(path: str) -> bool:
    return os.path.isfile(os.path.join(path, PIPELINE_STATE))


def list_checkpoints(output_dir: str) -> list[tuple[int, str]]:
    """Complete checkpoints under ``output_dir`` as (step, path), oldest first."""
    if not output_dir or not os.path.isdir(output_dir):
        return []
    found = []
    for name in os.listdir(output_dir):
        match = _CKPT_RE.match(name)
        path = os.path.join(output_dir, name)
        if match and is_complete(path):
            found.append((int(match.group(1)), path))
    return sorted(found)


def resolve_resume_path(resume: Any, output_dir: str) -> str | None:
    """The checkpoint directory ``resume_from_checkpoint`` points at, or None to start fresh.

    ``true`` (or ``"latest"``) means the newest complete checkpoint under ``output_dir`` and starts
    fresh when there is none (so one command both starts and continues a run); a path must exist.
    """
    if resume is None or resume is False or (isinstance(resume, str) and resume.strip().lower() in
                                             ("", "false", "none", "no")):
        return None
    if resume is True or (isinstance(resume, str) and resume.strip().lower() in ("true", "latest")):
        found = list_checkpoints(output_dir)
        return found[-1][1] if found else None
    path = os.path.expanduser(str(resume))
    if os.path.isdir(path) and not is_complete(path):
        # a run directory rather than one checkpoint: take its newest complete checkpoint
        found = list_checkpoints(path)
        if found:
            return found[-1][1]
    if not is_complete(path):
        from roll_core.errors import RollError

        raise RollError(
            f"resume_from_checkpoint: {resume!r} is not a complete checkpoint (no {PIPELINE_STATE} in it). "
            f"Complete checkpoints under output_dir: "
            f"{[p for _, p in list_checkpoints(output_dir)] or 'none'}."
        )
    return path


def begin(output_dir: str, step: int) -> str:
    """A fresh temporary directory to write the checkpoint of ``step`` into."""
    tmp = checkpoint_dir(output_dir, step) + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def commit(tmp: str, state: dict[str, Any], *, keep_last: int | None = None) -> str:
    """Write the pipeline state last, move ``tmp`` into place, prune old checkpoints.

    ``state`` is stored as tensors and plain values only (:func:`plain`), so that :func:`load_state`
    reads it with ``weights_only=True``.
    """
    from roll_core.strategies.rng import save_state

    save_state(plain(state), os.path.join(tmp, PIPELINE_STATE + ".part"))
    os.replace(os.path.join(tmp, PIPELINE_STATE + ".part"), os.path.join(tmp, PIPELINE_STATE))
    final = tmp[: -len(".tmp")]
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    if keep_last:
        output_dir = os.path.dirname(final)
        for _, old in list_checkpoints(output_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_state(path: str) -> dict[str, Any]:
    """The pipeline state of checkpoint ``path``, read with ``torch.load(weights_only=True)``."""
    from roll_core.strategies.rng import load_state as load_plain

    return load_plain(os.path.join(path, PIPELINE_STATE))


def plain(value: Any, where: str = PIPELINE_STATE) -> Any:
    """``value`` with numpy scalars and arrays as Python numbers and lists (exact), tensors kept:
    what ``weights_only`` loading accepts. Anything else is a TypeError naming where it sits."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, dict):
        return {plain(k, where): plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(plain(v, f"{where}[{i}]") for i, v in enumerate(value))
    module = type(value).__module__.split(".")[0]
    if module == "torch":
        return value
    if module == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, bool | int | float | str):  # subclasses: keep the value, drop the class
        return type(value).__mro__[-2](value)
    raise TypeError(f"{where} is a {type(value).__module__}.{type(value).__name__}; checkpoint state must be "
                    "tensors and plain Python values")
