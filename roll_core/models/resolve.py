"""``pretrain`` -> a local Hugging Face directory, whatever form ``pretrain`` takes.

Every strategy loads models with ``from_pretrained(local_dir)``; this module is the one place
that turns the config's ``pretrain`` into such a directory:

* a local HF directory: used as is;
* a built-in tiny spec name (``roll-tiny``, ``roll-tiny-3m``, ``roll-tiny-10m``): built once per (spec, seed,
  versions) into the cache, no download;
* a ``.gguf`` file, or a packaged GGUF alias (``smollm2-135m-instruct``): dequantised once into
  the cache;
* a Hugging Face hub id: taken from the local HF cache only. This machine class has no hub
  access, so a missing model is a clear error rather than a hang; set ``ROLL_ALLOW_DOWNLOADS=1``
  on machines that can download.

Built directories appear atomically (built in a temporary sibling, then renamed), so Ray workers
resolving the same name at once never see a half-written model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable

from roll_core.errors import RollError, did_you_mean
from roll_core.models.gguf import GGUF_ALIASES, convert_gguf, packaged_gguf
from roll_core.models.tiny import TINY_REWARD_MODELS, TINY_SPECS, build_tiny_model, build_tiny_reward_model

#: Bump when the GGUF conversion changes (part of the cache key).
GGUF_CONVERT_VERSION = 1


def default_cache_dir() -> str:
    """``$ROLL_CACHE_DIR``, else ``$XDG_CACHE_HOME/roll``, else ``~/.cache/roll``."""
    if os.environ.get("ROLL_CACHE_DIR"):
        return os.environ["ROLL_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "roll")


def resolve_pretrain(pretrain: str, cache_dir: str | None = None, *, seed: int = 0) -> str:
    """Return a local HF directory for ``pretrain`` (see the module docstring for the forms).

    ``seed`` only matters for tiny specs: it seeds their random init, so every worker of a run
    that resolves the same spec with the run's seed gets the same weights.
    """
    if not isinstance(pretrain, str) or not pretrain.strip():
        raise RollError(f"pretrain must be a model name or path, got {pretrain!r}.")
    models_dir = os.path.join(cache_dir or default_cache_dir(), "models")
    if pretrain in TINY_SPECS:
        spec = TINY_SPECS[pretrain]
        return _cached(os.path.join(models_dir, f"{spec.cache_key}-seed{seed}"),
                       lambda out: build_tiny_model(spec, seed, out))
    if pretrain in TINY_REWARD_MODELS:
        spec = TINY_SPECS[TINY_REWARD_MODELS[pretrain]]
        return _cached(os.path.join(models_dir, f"{pretrain}-{spec.cache_key}-seed{seed}"),
                       lambda out: build_tiny_reward_model(spec, seed, out))
    if pretrain in GGUF_ALIASES:
        return _resolve_gguf(packaged_gguf(pretrain), models_dir)
    path = os.path.expanduser(pretrain)
    if os.path.isfile(path) and path.endswith(".gguf"):
        return _resolve_gguf(path, models_dir)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise RollError(f"pretrain {pretrain!r} is a directory without config.json; it is not a "
                            "Hugging Face model directory.")
        return os.path.abspath(path)
    if os.path.exists(path) or pretrain.startswith((".", "/", "~")) or pretrain.count("/") > 1:
        raise RollError(
            f"pretrain {pretrain!r} is neither a model directory, a .gguf file, a hub id "
            f"('org/name'), nor a built-in name ({_builtin_names()})."
        )
    return _from_hub_cache(pretrain)


def _builtin_names() -> str:
    return ", ".join(sorted([*TINY_SPECS, *TINY_REWARD_MODELS, *GGUF_ALIASES]))


def _resolve_gguf(gguf_path: str, models_dir: str) -> str:
    stat = os.stat(gguf_path)
    ident = f"{os.path.realpath(gguf_path)}|{stat.st_size}|{stat.st_mtime_ns}|{GGUF_CONVERT_VERSION}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:12]
    stem = os.path.basename(gguf_path)[: -len(".gguf")]
    return _cached(os.path.join(models_dir, f"gguf-{stem}-{digest}"), lambda out: convert_gguf(gguf_path, out))


def _from_hub_cache(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    allow = os.environ.get("ROLL_ALLOW_DOWNLOADS") == "1"
    try:
        return snapshot_download(repo_id, local_files_only=not allow)
    except Exception as exc:  # the hub client raises several types for "not there"
        raise RollError(
            f"pretrain {repo_id!r} is not in the local Hugging Face cache, and there are no downloads "
            "on this machine; pass a local path (a model directory or a .gguf file), or a built-in "
            f"name ({_builtin_names()}).{did_you_mean(repo_id, [*TINY_SPECS, *GGUF_ALIASES])} "
            f"On a machine that can download, set ROLL_ALLOW_DOWNLOADS=1. ({type(exc).__name__})"
        ) from exc


def _cached(target: str, build: Callable[[str], object]) -> str:
    """Build ``target`` once: into a temporary sibling, then an atomic rename."""
    if os.path.isfile(os.path.join(target, "config.json")):
        return target
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(target) + ".building-", dir=parent)
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not os.path.isfile(os.path.join(target, "config.json")):
                raise  # not a lost race: a real error
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return target
