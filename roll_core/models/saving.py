"""``save_pretrained`` without DeepSpeed: no import, no "Setting accelerator to CPU" warning.

transformers' ``save_pretrained`` unwraps the model with accelerate's ``extract_model_from_parallel``,
which imports DeepSpeed whenever it is installed (the ``deepspeed_train`` plugin installs it) only
to ask whether the model is a DeepSpeed engine. A model that roll's own strategies save never is,
and the import costs seconds and prints DeepSpeed's accelerator warning in every worker that saves.
While DeepSpeed is not loaded anyway, the probe is answered "not available" for the save.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any


@contextmanager
def deepspeed_probe_off():
    """accelerate's "is DeepSpeed installed?" answers no for the block, unless DeepSpeed is loaded."""
    if "deepspeed" in sys.modules:  # a DeepSpeed run: the engine check must see the truth
        yield
        return
    try:
        from accelerate.utils import other
    except ImportError:  # no accelerate: transformers unwraps by itself, without DeepSpeed
        yield
        return
    probe = getattr(other, "is_deepspeed_available", None)
    if probe is None:
        yield
        return
    other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        other.is_deepspeed_available = probe


def save_pretrained(model: Any, path: str, **kwargs: Any) -> None:
    """``model.save_pretrained(path)`` without importing DeepSpeed (see the module docstring)."""
    with deepspeed_probe_off():
        model.save_pretrained(path, **kwargs)
