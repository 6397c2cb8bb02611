"""Learning over seeds: run a config at several settings x seeds and compare validation success.

Each (setting, seed) is one ordinary ``roll run`` with ``seed=S`` and the setting's overrides, its
logs under ``--out/<setting>_s<seed>`` (a finished run is not run again, so an interrupted
comparison continues). The comparison reads every run's ``val/success`` from its TensorBoard
events, prints final and best (mean and spread over seeds) per setting, and draws one plot with the
seeds as thin lines and their mean bold. docs/learning.md holds the measured tables.

Usage::

    # the demo at async_generation_ratio 0, 1, 2 over 3 seeds (docs/learning.md, "Async and learning")
    python benchmarks/learning_seeds.py examples/frozen_lake/grpo.yaml --out runs/learning/async \\
        --setting async0 async_generation_ratio=0 --setting async1 async_generation_ratio=1 \\
        --setting async2 async_generation_ratio=2 --seeds 42 43 44 --plot docs/images/learning_async.png
    # two config files compared (a setting's first item config=PATH replaces the command's config)
    python benchmarks/learning_seeds.py examples/sokoban/starpo.yaml --out runs/learning/sokoban \\
        --setting starpo --setting gigpo config=examples/sokoban/gigpo.yaml --seeds 42 43 44
    # --no-run: only read and compare the runs already under --out; --add-json FILE:SETTING adds a
    # setting recorded by an earlier comparison's --json (a baseline that is not run again)
    # --metric: another validation scalar, e.g. an RLVR domain's val/accuracy/addition
    python benchmarks/learning_seeds.py examples/rlvr/smollm2_lora.yaml --out runs/learning/smollm2 \
        --setting format --seeds 42 43 44 --metric val/accuracy/addition
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from measure import QUIET_ENV, ROOT

from roll_core.pipeline.tracking import best_point

KEY = "val/success"
DONE = "run_done.json"


def setting_config(default: str, overrides: list[str]) -> tuple[str, list[str]]:
    """A setting's config file (``config=PATH`` as its first item, else the command's) and its overrides."""
    if overrides and overrides[0].startswith("config="):
        return overrides[0].removeprefix("config="), overrides[1:]
    return default, overrides


def run_one(config: str, out: Path, overrides: list[str], seed: int) -> dict:
    """One ``roll run`` (skipped when ``out`` holds a finished one); returns its exit code and wall time."""
    done = out / DONE
    if done.is_file():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "roll_core", "run", config, f"seed={seed}", *overrides,
           f"logging_dir={out}", f"output_dir={out / 'checkpoints'}", f"render_save_dir={out / 'render'}"]
    started = time.perf_counter()
    with open(out / "run.log", "w", encoding="utf-8") as log:
        code = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **QUIET_ENV}, stdout=log, stderr=subprocess.STDOUT).returncode
    record = {"returncode": code, "wall_s": round(time.perf_counter() - started, 1), "command": cmd}
    if code == 0:
        done.write_text(json.dumps(record))
    return record


def curve(run_dir: Path, key: str = KEY) -> list[tuple[int, float]]:
    """(step, value of ``key``: val/success unless told) of a run, from its TensorBoard event files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: dict[int, float] = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        if key in acc.Tags().get("scalars", []):
            points.update({int(e.step): float(e.value) for e in acc.Scalars(key)})
    return sorted(points.items())


def recorded_runs(spec: str, seeds: list[int]) -> list[tuple[str, int, list[tuple[int, float]]]]:
    """``(setting, seed, curve)`` of ``SETTING`` in the ``--json`` file of ``FILE:SETTING``."""
    path, _, name = spec.rpartition(":")
    records = json.loads(Path(path).read_text())
    found = [(name, seed, [tuple(p) for p in records[f"{name}_s{seed}"]["curve"]])
             for seed in seeds if f"{name}_s{seed}" in records]
    if not found:
        raise SystemExit(f"--add-json {spec}: no runs of {name!r} for seeds {seeds} in {path}")
    return found


def summarise(points: list[tuple[int, float]]) -> dict:
    best_step, best = best_point(points)
    return {"start": points[0][1], "final": points[-1][1], "best": best, "best_step": best_step,
            "last3": statistics.fmean(v for _, v in points[-3:])}


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {statistics.stdev(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def plot(curves: dict[str, dict[int, list[tuple[int, float]]]], path: str, title: str,
         ylabel: str = "validation success") -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for i, (setting, by_seed) in enumerate(curves.items()):
        color = f"C{i}"
        for points in by_seed.values():
            ax.plot(*zip(*points), color=color, linewidth=0.8, alpha=0.45)
        steps = sorted(set.intersection(*(set(s for s, _ in p) for p in by_seed.values())))
        mean = [statistics.fmean(dict(p)[s] for p in by_seed.values()) for s in steps]
        ax.plot(steps, mean, color=color, linewidth=2.4, label=f"{setting} (mean of {len(by_seed)} seeds)")
    ax.set_xlabel("step (0: after the warm start)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--out", required=True, help="one folder per (setting, seed) goes here")
    parser.add_argument("--setting", nargs="+", action="append", required=True, metavar=("NAME", "KEY=VALUE"),
                        help="a named setting and its overrides (repeat for each setting); a first item "
                        "config=PATH runs that setting from another config file")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--no-run", action="store_true", help="only compare the runs already there")
    parser.add_argument("--add-json", action="append", default=[], metavar="FILE:SETTING",
                        help="also compare SETTING's runs as recorded in FILE (an earlier --json): a baseline "
                        "measured in another comparison is not run again")
    parser.add_argument("--plot", help="PNG of the curves (seeds thin, mean bold)")
    parser.add_argument("--json", help="write every run's curve and summary here")
    parser.add_argument("--metric", default=KEY, help=f"the validation scalar compared (default {KEY}; RLVR: "
                        "val/accuracy/<domain> or val/reward_mean)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    curves: dict[str, dict[int, list[tuple[int, float]]]] = {}
    records = {}
    settings = [(name, *setting_config(args.config, overrides)) for name, *overrides in args.setting]
    for seed in args.seeds:  # seed-major: an interrupted comparison has every setting for the seeds done
        for name, config, overrides in settings:
            run_dir = out / f"{name}_s{seed}"
            if not args.no_run:
                record = run_one(config, run_dir, overrides, seed)
                if record["returncode"] != 0:
                    print(f"{name} seed {seed}: exit {record['returncode']}; see {run_dir / 'run.log'}")
                    continue
                print(f"{name} seed {seed}: done in {record['wall_s']:.0f}s", flush=True)
            points = curve(run_dir, args.metric)
            if points:
                curves.setdefault(name, {})[seed] = points
                records[f"{name}_s{seed}"] = {"curve": points, **summarise(points)}
    for spec in args.add_json:
        for name, seed, points in recorded_runs(spec, args.seeds):
            curves.setdefault(name, {})[seed] = points
    print("\n| setting | seeds | after warm start | final | best | mean of last 3 |\n|---|---|---|---|---|---|")
    for name, by_seed in curves.items():
        sums = [summarise(p) for p in by_seed.values()]
        print(f"| {name} | {len(sums)} | {spread([s['start'] for s in sums])} | {spread([s['final'] for s in sums])} "
              f"| {spread([s['best'] for s in sums])} | {spread([s['last3'] for s in sums])} |")
    if args.plot and curves:
        configs = " / ".join(dict.fromkeys(Path(c).name for _, c, _ in settings))
        what = "validation success" if args.metric == KEY else args.metric
        plot(curves, args.plot, f"{configs}: {what} over {len(args.seeds)} seeds", what)
        print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
