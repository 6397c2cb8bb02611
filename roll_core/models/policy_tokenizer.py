"""Which tokenizer a rollout uses: the policy's, or the built-in tiny one for model-free runs.

Trajectories are token streams, so even a random policy needs a tokenizer. A model-free rollout
of a config whose ``pretrain`` is not available on this machine (a hub id on an offline laptop)
falls back to roll's tiny ChatML tokenizer, built locally without torch and cached, so a ROLL GPU
config can be rolled out anywhere; with the model as the policy a missing ``pretrain`` is an error.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
from typing import Any

from roll_core.errors import RollError

logger = logging.getLogger("roll.rollout")


def tiny_tokenizer(cache_dir: str | None = None) -> Any:
    """roll's tiny byte-level ChatML tokenizer, trained once (~6 s) and cached on disk."""
    from roll_core.models import build_tiny_tokenizer, default_cache_dir, load_tokenizer
    from roll_core.models.tiny import TOKENIZER_VERSION

    target = os.path.join(cache_dir or default_cache_dir(), "tokenizers", f"roll-tiny-tok{TOKENIZER_VERSION}")
    if not os.path.isfile(os.path.join(target, "tokenizer.json")):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="roll-tiny-tok.building-", dir=os.path.dirname(target))
        try:
            build_tiny_tokenizer().save_pretrained(tmp)
            try:
                os.rename(tmp, target)
            except OSError:  # another process won the race
                if not os.path.isfile(os.path.join(target, "tokenizer.json")):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return load_tokenizer(target)


def rollout_tokenizer(pretrain: str | None, *, seed: int = 0, model_free: bool) -> Any:
    """The tokenizer of the policy ``pretrain`` (``actor_infer.model_args.model_name_or_path``, which
    resolve fills in); for ``model_free`` rollouts, the tiny one as a fallback.

    Loaded once per process and model (the driver's preflight, rollouts and RLVR data share it).
    """
    try:
        if not pretrain:
            raise RollError("pretrain is not set")
        return _load(pretrain, seed)
    except RollError as exc:
        if not model_free:
            raise
        logger.warning("the tokenizer of pretrain %r is not available here (%s); the model-free rollout "
                       "uses roll's built-in tiny ChatML tokenizer instead", pretrain, str(exc).split(";")[0])
        return tiny_tokenizer()


@functools.lru_cache(maxsize=8)
def _load(pretrain: str, seed: int) -> Any:
    from roll_core.models import load_tokenizer, resolve_pretrain

    return load_tokenizer(resolve_pretrain(pretrain, seed=seed))
