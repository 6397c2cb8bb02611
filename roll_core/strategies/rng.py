"""Trainer state files that ``torch.load(weights_only=True)`` reads: RNG states as tensors and lists.

Resuming exactly needs the torch, CUDA, numpy and Python RNG states next to the optimizer. numpy's
state is a tuple with an ndarray and Python's a tuple of ints; pickled as they are, loading them
needs ``weights_only=False``, which would run whatever code a checkpoint directory's file holds.
Here they are stored as plain ints, lists and tensors (what the safe loader accepts) and turned
back into exactly the same states, so a resumed run still continues bit for bit.

Used by ``hf_train`` and the critic, and by the DeepSpeed and Megatron strategy plugins.
"""

from __future__ import annotations

import pickle
import random
from collections.abc import Mapping
from typing import Any

from roll_core.errors import RollError


def rng_state() -> dict[str, Any]:
    """torch / CUDA / numpy / Python RNG states, in a form ``weights_only=True`` loads."""
    import numpy as np
    import torch

    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": {"name": str(name), "keys": [int(k) for k in keys], "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": int(version), "internal": [int(i) for i in internal], "gauss_next": gauss_next},
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore :func:`rng_state`'s result exactly."""
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


def save_state(state: Mapping[str, Any], path: str) -> None:
    """``torch.save`` of a trainer state made of tensors, numbers, strings, lists and dicts."""
    import torch

    torch.save(dict(state), path)


def load_state(path: str) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)``: tensors and plain values only, never code.

    A file that needs more (one written by roll before it stored states this way, or one that
    is not roll's) is refused with a message instead of being unpickled.
    """
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise RollError(
            f"{path} holds objects other than tensors and plain values, and roll loads checkpoints with "
            "torch.load(weights_only=True) so that a checkpoint cannot run code. It was written by an older "
            f"roll, or is not a roll checkpoint ({str(exc).strip().splitlines()[0]})."
        ) from None
