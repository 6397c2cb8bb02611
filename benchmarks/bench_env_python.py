"""An env's own Python environment: roll's cached layered venv vs Ray's ``pip`` runtime environment.

What an env registered with ``requirements=[...]`` costs at start-up. Each run uses a fresh cache
and two Ray sessions, as a first ``roll run`` and a later one would. In each session one actor (an
env manager's stand-in) is started in an environment holding a requirement that clashes with the
trainer's (``idna==3.6``; the trainer has another idna) and returns the idna it imports:

* roll: :func:`roll_core.distributed.env_python.prepare` (build or reuse) and the actor started with
  ``runtime_env={"py_executable": <roll's launcher>}``;
* ray pip: ``runtime_env={"pip": ["idna==3.6"]}``, Ray's own (inside a venv Ray copies the whole
  trainer venv for it, per Ray session).

Figures: seconds from "start this env's workers" to the actor's first answer, first and later
session, and the disk each environment takes. Ray's per-session copies are deleted after each
measurement (Ray itself leaves them in its session directory).

Usage: python benchmarks/bench_env_python.py [--repeats 3] [--quick] [--json FILE] [--plot PNG]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import measure

REQUIREMENT = "idna==3.6"


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def session(runtime_env_for) -> tuple[float, str, int]:
    """One Ray session: seconds until the actor answers, the idna it imports, bytes of its environment."""
    import ray

    ray.init(address="local", include_dashboard=False, num_cpus=2, log_to_driver=False)
    try:
        @ray.remote(num_cpus=0)
        class Probe:
            def idna(self) -> str:
                import idna

                return idna.__version__

        started = time.perf_counter()
        runtime_env, disk = runtime_env_for()
        version = ray.get(Probe.options(runtime_env=runtime_env).remote().idna.remote())
        seconds = time.perf_counter() - started
        resources = Path(ray._private.worker.global_worker.node.get_runtime_env_dir_path())
        size = disk() if disk else _du(resources / "pip")
    finally:
        ray.shutdown()
    shutil.rmtree(resources / "pip", ignore_errors=True)  # Ray's per-session copy of the trainer venv
    return seconds, version, size


def one_run(_: int) -> dict[str, float]:
    from roll_core.distributed.env_python import EnvPython, prepare

    out: dict[str, float] = {}
    cache = Path(tempfile.mkdtemp(prefix="roll-bench-env-python-"))
    try:
        spec = EnvPython((REQUIREMENT,), env="bench")

        def roll_env():
            env = prepare(spec, cache_dir=cache)
            return env.runtime_env(cache), lambda: _du(env.root)

        for name, make in (("roll", roll_env), ("ray_pip", lambda: ({"pip": [REQUIREMENT]}, None))):
            for when in ("first", "later"):
                seconds, version, size = session(make)
                if version != REQUIREMENT.split("==")[1]:
                    raise SystemExit(f"{name}: the actor imported idna {version}, not the pinned one")
                out[f"{name}_{when}_s"] = seconds
                out[f"{name}_{when}_mb"] = size / 2**20
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def main() -> None:
    from importlib.metadata import version

    p = measure.parser(__doc__.splitlines()[0])
    args = p.parse_args()
    if args.quick:
        args.repeats = 1
    if version("idna") == REQUIREMENT.split("==")[1]:
        raise SystemExit(f"the trainer already has {REQUIREMENT}: nothing clashes")
    measure.setup_env()
    results = measure.print_header("an env's own Python environment: roll's cached venv vs Ray's pip field", args)
    runs = measure.repeat(one_run, args.repeats, "roll + ray pip")
    results["runs"] = runs
    for when in ("first", "later"):
        for name in ("roll", "ray_pip"):
            measure.report(results, f"{name} {when} start", measure.column(runs, f"{name}_{when}_s"), "s")
        measure.report(results, f"{when} start roll / ray pip", measure.ratios(
            measure.column(runs, f"roll_{when}_s"), measure.column(runs, f"ray_pip_{when}_s")), ratio=True)
    for name in ("roll", "ray_pip"):
        measure.report(results, f"{name} environment on disk", measure.column(runs, f"{name}_first_mb"), "MB")
    if args.plot:
        whens = ["first start", "later start"]
        measure.plot_series(
            args.plot, f"Starting an env's workers in its own Python environment ({REQUIREMENT})", "",
            "seconds until the worker answers",
            {label: (whens, [measure.column(runs, f"{name}_{when}_s") for when in ("first", "later")])
             for name, label in (("roll", "roll: cached layered venv"), ("ray_pip", "Ray runtime_env pip"))},
            kind="bar", note="median of runs, min-max bars; benchmarks/bench_env_python.py")
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
