"""An env's own Python environment: the env-manager workers of an env that declares ``requirements``.

An env registration may say ``requirements=["somelib==1.2"]`` (and ``python=">=3.10"``, see
:mod:`roll_core.hookspecs`). Its env managers then run in a virtual environment built for it, while
the trainer, the inference workers and other envs keep the trainer's:

* **What it is.** A venv of the trainer's interpreter with the requirements pip-installed into it,
  layered over the trainer's packages: a ``.pth`` file adds the trainer's site directories *after*
  the venv's own, so roll-core, Ray and the tokenizer come from the trainer and the env's pins win
  where they clash (pip leaves the trainer's copy alone: "outside environment"). This is the
  layering Ray's own ``pip`` runtime environment gives, without its per-session copy of the whole
  trainer venv (benchmarks/bench_env_python.py: a later start 1.1 s against Ray's 41 s, 0.5 MB
  against 1.2 GB; docs/benchmarks.md section 7).
* **Where.** ``$ROLL_ENV_PYTHON_CACHE`` or ``~/.cache/roll/env-python``, one directory per
  (requirements, interpreter, trainer environment), built under a file lock and marked complete
  only at the end, so concurrent runs share one build and a failed build leaves nothing behind.
* **How Ray uses it.** The env-manager actors get ``runtime_env={"py_executable": ...}``, a
  launcher (:func:`main`) that makes sure the environment exists on the worker's node, then execs
  the venv's interpreter with Ray's worker arguments. The driver builds it first
  (:func:`prepare`), so progress and a failed ``pip install`` are reported before any worker starts.

Ray runs every worker of a cluster on the driver's Python version, so ``python`` is a check, not a
second interpreter.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roll_core.errors import ConfigError, RollError

#: bump when the layout of a built environment changes (old ones are then rebuilt, not reused)
LAYOUT = 1
CACHE_ENV = "ROLL_ENV_PYTHON_CACHE"
MARKER = "roll-env-python.json"
PTH_FILE = "_roll_trainer_site.pth"
#: pip output kept in a failure message
TAIL_LINES = 15


class EnvPythonError(RollError):
    """An env's Python environment could not be built (the message names the requirements)."""


@dataclass(frozen=True)
class EnvPython:
    """What an env needs of its Python environment (from its registration's options)."""

    requirements: tuple[str, ...]
    python: str | None = None
    env: str = ""  # the env's registered name, for messages

    @classmethod
    def from_options(cls, options, env: str = "") -> EnvPython | None:
        """The spec of a registration's ``requirements``/``python`` options; None without requirements."""
        requirements = tuple(options.get("requirements") or ())
        python = options.get("python")
        if not requirements and python is None:
            return None
        return cls(requirements, python, env)

    @property
    def key(self) -> str:
        """The cache directory name: requirements, interpreter, and the trainer environment it layers on."""
        payload = json.dumps({"layout": LAYOUT, "requirements": sorted(self.requirements),
                              "python": platform.python_version(), "executable": os.path.realpath(sys.executable),
                              "prefix": os.path.realpath(sys.prefix)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def describe(self) -> str:
        return " ".join(self.requirements) or "no extra requirements"

    def check(self) -> None:
        """Raise :class:`ConfigError` for a malformed requirement or an unsupported Python version."""
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        where = f"The env {self.env!r}" if self.env else "An env"
        for requirement in self.requirements:
            try:
                Requirement(requirement)
            except InvalidRequirement as exc:
                raise ConfigError(f"{where} declares the requirement {requirement!r}, which pip cannot read "
                                  f"({exc}). This is a bug in that plugin's registration.") from None
        if self.python is None:
            return
        text = self.python.strip()
        try:
            spec = SpecifierSet(f"=={text}.*" if text[:1].isdigit() else text)
        except InvalidSpecifier:
            raise ConfigError(f"{where} declares python={self.python!r}, which is neither a version ('3.11') "
                              "nor a specifier ('>=3.10,<3.13'). This is a bug in that plugin's registration.") from None
        here = platform.python_version()
        if here not in spec:
            raise ConfigError(
                f"{where} needs Python {self.python}, but roll runs on Python {here}. Ray runs every worker of a "
                f"cluster on the driver's Python version, so the env's workers cannot use another one: start "
                f"roll from a Python {self.python} environment.")


@dataclass(frozen=True)
class Prepared:
    """A built environment: its interpreter, and whether this call built it (else it was reused)."""

    spec: EnvPython
    root: Path
    built: bool
    seconds: float

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def runtime_env(self, cache_dir: Path | None = None) -> dict[str, str]:
        """Ray's runtime environment for a worker of this env: the launcher as its Python executable."""
        payload = {"requirements": list(self.spec.requirements), "python": self.spec.python, "env": self.spec.env,
                   "cache": str(cache_dir or self.root.parent)}
        token = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
        return {"py_executable": f"{shlex.quote(sys.executable)} -m {__name__} {token}"}


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "roll" / "env-python"


def prepare(spec: EnvPython, *, cache_dir: Path | None = None,
            log: Callable[[str], None] | None = None) -> Prepared:
    """The environment for ``spec``: reused when it exists, else built now (under a file lock)."""
    spec.check()
    cache_dir = Path(cache_dir) if cache_dir is not None else cache_root()
    root = cache_dir / spec.key
    if _complete(root):
        return Prepared(spec, root, built=False, seconds=0.0)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f"{spec.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building the same environment: wait for it
        if _complete(root):
            return Prepared(spec, root, built=False, seconds=0.0)
        if log is not None:
            log(f"building the Python environment of env {spec.env!r} ({spec.describe()}) in {root} ...")
        started = time.perf_counter()
        _build(spec, root)
        return Prepared(spec, root, built=True, seconds=time.perf_counter() - started)


def trainer_site_dirs() -> list[str]:
    """The site directories of this (the trainer's) interpreter, in its own order."""
    dirs = list(site.getsitepackages())
    user = site.getusersitepackages()
    if site.ENABLE_USER_SITE and user in sys.path:
        dirs.append(user)
    return dirs


def _complete(root: Path) -> bool:
    return (root / MARKER).is_file() and (root / "bin" / "python").exists()


def _build(spec: EnvPython, root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)  # what a killed build left
    try:
        venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(root)
        purelib = Path(sysconfig.get_path("purelib", scheme="venv", vars={"base": str(root), "platbase": str(root)}))
        purelib.mkdir(parents=True, exist_ok=True)
        # the trainer's site directories after the venv's own: processed like site-packages (their .pth
        # files, editable installs included), and shadowed by whatever the env's requirements install
        dirs = [d for d in trainer_site_dirs() if os.path.isdir(d)]
        (purelib / PTH_FILE).write_text("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
        python = root / "bin" / "python"
        command = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
                   *spec.requirements]
        proc = subprocess.run(command, capture_output=True, text=True, cwd=root)
        if proc.returncode != 0:
            raise EnvPythonError(_failure(spec, proc))
        info = {"env": spec.env, "requirements": list(spec.requirements), "python": platform.python_version(),
                "layers_on": dirs, "built": time.strftime("%Y-%m-%d %H:%M:%S"),
                "installed": _installed(proc.stdout)}
        (root / MARKER).write_text(json.dumps(info, indent=2))
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _failure(spec: EnvPython, proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-TAIL_LINES:]
    culprit = next((r for r in spec.requirements if any(_dist(r) in ln.lower() for ln in errors)), None)
    named = f"the requirement {culprit!r}" if culprit else f"the requirements {' '.join(spec.requirements)}"
    return (f"The Python environment of env {spec.env!r} could not be built: pip could not install {named} "
            f"(exit {proc.returncode}):\n  " + "\n  ".join(errors[-TAIL_LINES:]) +
            "\nFix the env's `requirements` in its plugin registration (or the package index it needs); "
            "nothing was started.")


def _dist(requirement: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(requirement).name.lower()
    except InvalidRequirement:
        return requirement.lower()


def _installed(pip_stdout: str) -> list[str]:
    for line in pip_stdout.splitlines():
        if line.startswith("Successfully installed "):
            return line.removeprefix("Successfully installed ").split()
    return []


def prepare_all(specs: Sequence[EnvPython], *, log: Callable[[str], None] | None = None) -> dict[str, Prepared]:
    """:func:`prepare` for each distinct spec (by cache key), logging what was built or reused."""
    prepared: dict[str, Prepared] = {}
    for spec in specs:
        if spec.key in prepared:
            continue
        env = prepare(spec, log=log)
        prepared[spec.key] = env
        if log is not None:
            how = f"built in {env.seconds:.1f} s" if env.built else "reused"
            log(f"env {spec.env!r} runs in its own Python environment ({spec.describe()}; {how}: {env.root})")
    return prepared


def run_inside(spec: EnvPython, argv: Sequence[str] | None) -> None:
    """Re-run the ``roll`` command ``argv`` in ``spec``'s environment (built if need be); returns only
    when this process already runs there (or when there is no command line to re-run)."""
    inside = Path(sys.prefix) / MARKER  # this process runs in an env's environment already
    if inside.is_file():
        if sorted(json.loads(inside.read_text())["requirements"]) == sorted(spec.requirements):
            return
        raise RollError(f"This process runs in the Python environment {sys.prefix}, not in the one of env "
                        f"{spec.env!r} ({spec.describe()}); run roll from the trainer's environment.")
    env = prepare(spec, log=lambda message: print(f"roll: {message}", file=sys.stderr, flush=True))
    if argv is None:
        return
    print(f"roll: running in the Python environment of env {spec.env!r} ({spec.describe()})", file=sys.stderr,
          flush=True)
    os.execv(str(env.python), [str(env.python), "-m", "roll_core", *argv])


def main(argv: Sequence[str] | None = None) -> None:
    """Ray's ``py_executable`` for an env's workers: ``python -m roll_core.distributed.env_python TOKEN ARGS...``.

    Builds the environment on this node when it is missing (a multi-node cluster), then replaces
    itself with the environment's interpreter running Ray's worker command ``ARGS``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    payload = json.loads(base64.urlsafe_b64decode(argv[0]))
    spec = EnvPython(tuple(payload["requirements"]), payload.get("python"), payload.get("env", ""))
    env = prepare(spec, cache_dir=Path(payload["cache"]),
                  log=lambda message: print(f"roll: {message}", file=sys.stderr, flush=True))
    os.execv(str(env.python), [str(env.python), *argv[1:]])


if __name__ == "__main__":  # pragma: no cover - exercised through Ray workers
    main()
