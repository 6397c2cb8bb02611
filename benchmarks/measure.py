"""What every benchmark program shares: arguments, repeats, min/median/max ratio lines, the machine, plots.

A benchmark measures roll and its peer side by side in one process run (same load on the machine),
repeats the pair ``--repeats`` times, and prints one line per figure::

    RATIO engine / raw gymnasium: median 0.0165 (min 0.0156, max 0.0219; 3 runs)

``--json FILE`` also writes every raw number, so docs/benchmarks.md can be regenerated from files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent

#: quiet, offline, reproducible child processes (the same as the test suite's)
QUIET_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONHASHSEED": "0",
}


def parser(description: str, *, repeats: int = 3) -> argparse.ArgumentParser:
    """The options every program takes; programs add their own sizes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--repeats", type=int, default=repeats, help=f"measured runs of each side (default {repeats})")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the program, not a figure")
    p.add_argument("--json", default=None, metavar="FILE", help="also write every raw number to FILE")
    p.add_argument("--plot", default=None, metavar="PNG", help="write the figure's plot to PNG")
    return p


def setup_env() -> None:
    """Quiet, offline child processes; one torch thread each; the benchmarks dir importable in Ray workers."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(BENCH_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH_DIR), *paths])
    if str(BENCH_DIR) not in sys.path:
        sys.path.insert(0, str(BENCH_DIR))


def start_ray(num_cpus: int | None = None) -> None:
    """A fresh local Ray cluster started by this process (workers inherit PYTHONPATH and the env)."""
    import ray

    from roll_core.rollout import init_ray

    if not ray.is_initialized():
        init_ray(**({"num_cpus": num_cpus} if num_cpus else {}))


def stats(values: Sequence[float]) -> dict[str, float]:
    """min / median / max / n of the runs."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no measurements to summarise")
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def fmt(value: float) -> str:
    """Three significant digits; whole numbers from 100 to 10,000."""
    return f"{value:.0f}" if 100 <= abs(value) < 10_000 else f"{value:.3g}"


def line(kind: str, name: str, values: Sequence[float], unit: str = "") -> str:
    """``KIND name: median M (min a, max b; n runs)`` -- the one format every program prints."""
    s = stats(values)
    unit = f" {unit}" if unit else ""
    return (f"{kind} {name}: median {fmt(s['median'])}{unit} (min {fmt(s['min'])}, max {fmt(s['max'])}; "
            f"{s['n']} runs)")


def report(results: dict[str, Any], name: str, values: Sequence[float], unit: str = "", *,
           ratio: bool = False) -> None:
    """Print a figure line and keep its numbers in ``results``."""
    print(line("RATIO" if ratio else "VALUE", name, values, unit), flush=True)
    results.setdefault("figures", {})[name] = {"values": [float(v) for v in values], "unit": unit,
                                               "ratio": ratio, **stats(values)}


def repeat(fn: Callable[[int], dict[str, float]], repeats: int, label: str) -> list[dict[str, float]]:
    """``fn(run_index)`` ``repeats`` times; prints each run's numbers as it finishes."""
    runs = []
    for i in range(repeats):
        started = time.perf_counter()
        out = fn(i)
        runs.append(out)
        shown = ", ".join(f"{k} {fmt(v)}" for k, v in out.items() if isinstance(v, int | float))
        print(f"  {label} run {i + 1}/{repeats} ({time.perf_counter() - started:.1f} s): {shown}", flush=True)
    return runs


def column(runs: Sequence[dict[str, float]], key: str) -> list[float]:
    return [float(r[key]) for r in runs]


def ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Run-by-run ratios ``a[i] / b[i]`` (the pairs were measured back to back under the same load)."""
    return [x / y for x, y in zip(a, b, strict=True)]


def machine() -> dict[str, Any]:
    """The machine the numbers were measured on (CPU model, cores, load when the run started)."""
    model = platform.processor() or ""
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                model = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(),
                            "platform": platform.platform()}
    try:
        info["load_average_1m"] = os.getloadavg()[0]
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (OSError, ValueError, AttributeError):
        pass
    return info


def print_header(title: str, args: argparse.Namespace) -> dict[str, Any]:
    info = machine()
    print(f"== {title}", flush=True)
    print(f"   machine: {info.get('cpu')}, {info.get('cores')} cores, load {info.get('load_average_1m', 0):.1f} "
          f"at start; repeats {args.repeats}{' (quick)' if args.quick else ''}", flush=True)
    return {"title": title, "machine": info, "argv": sys.argv, "quick": bool(args.quick),
            "repeats": args.repeats}


def finish(results: dict[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
        print(f"raw numbers written to {args.json}")


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (Linux /proc), 0 where it cannot be read."""
    return _proc_bytes(pid, "status", "VmRSS:")


def pss_bytes(pid: int) -> int:
    """Proportional set size of one process (Linux /proc): its resident pages, each page shared with
    other processes (libraries, Ray's core worker) counted as its share; 0 where it cannot be read."""
    return _proc_bytes(pid, "smaps_rollup", "Pss:")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process so far (Linux /proc), 0 where it cannot be read.
    On a shared machine CPU time per unit of work holds where wall-clock rates do not."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _proc_bytes(pid: int, name: str, key: str) -> int:
    """The ``key`` line (in kB) of ``/proc/<pid>/<name>``, in bytes; 0 where it cannot be read."""
    try:
        for text in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if text.startswith(key):
                return int(text.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def plot_series(path: str | Path, title: str, xlabel: str, ylabel: str,
                series: dict[str, tuple[Sequence[float], Sequence[Sequence[float]]]], *,
                logx: bool = False, logy: bool = False, note: str = "", kind: str = "line",
                hline: tuple[float, str] | None = None) -> None:
    """One panel: each series is ``(x, runs per x)``, drawn at the median with a min-max bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.8 / max(len(series), 1)
    for index, (label, (xs, runs)) in enumerate(series.items()):
        med = [statistics.median(r) for r in runs]
        low = [m - min(r) for m, r in zip(med, runs)]
        high = [max(r) - m for m, r in zip(med, runs)]
        if kind == "bar":
            pos = [i + (index - (len(series) - 1) / 2) * width for i in range(len(xs))]
            ax.bar(pos, med, width, yerr=[low, high], capsize=4, label=label)
            ax.set_xticks(range(len(xs)), [str(x) for x in xs])
        else:
            ax.errorbar(xs, med, yerr=[low, high], marker="o", capsize=4, label=label)
    if hline is not None:
        ax.axhline(hline[0], color="grey", linestyle="--", label=hline[1])
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, alpha=0.7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot written to {path}")


def profile_during(pids: Sequence[int], seconds: float, work: Callable[[], Any], *, out_dir: str | Path,
                   top: int = 14, focus: str = "roll") -> dict[str, Any]:
    """Sample ``pids`` with py-spy for ``seconds`` while ``work()`` runs (again and again); print the
    frames holding the most CPU samples: by self time (native code counts for the Python frame that
    called it), and by inclusive time among frames whose file path contains ``focus``. Idle threads
    are not sampled."""
    import shutil
    import subprocess

    exe = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if not exe:
        print("profile skipped: py-spy not found (pip install py-spy, or set PY_SPY)")
        return {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for pid in pids:
        out = out_dir / f"pyspy-{pid}.txt"
        cmd = [exe, "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-r", "50", "-f", "raw",
               "-o", str(out), "--nonblocking"]
        procs.append((out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    while any(proc.poll() is None for _, proc in procs):
        work()
    files = [out for out, proc in procs if proc.wait() == 0 and out.exists()]
    if not files:
        errors = "; ".join((proc.stderr.read() or b"").decode().strip()[:200] for _, proc in procs)
        print(f"profile failed: {errors}")
        return {}
    summary = summarise_stacks(files, top=top, focus=focus)
    print(f"py-spy profile of {len(files)} processes, {summary['samples']} CPU samples (raw stacks in {out_dir}):")
    for kind in ("self", "inclusive"):
        print(f"  top frames by {kind} time{f' ({focus} code)' if kind == 'inclusive' else ''}:")
        for name, share in summary[kind]:
            print(f"    {share:6.1%}  {name}")
    return summary


def summarise_stacks(files: Sequence[Path], *, top: int = 14, focus: str = "") -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed ("raw") stack files;
    the inclusive list keeps frames whose path contains ``focus``."""
    import re
    from collections import Counter

    frame = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for file in files:
        for text in Path(file).read_text().splitlines():
            stack, _, count = text.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            names, focused = [], set()
            for part in stack.split(";")[1:]:  # the first entry names the process / thread
                match = frame.match(part.strip())
                if match:
                    path = match.group(2)
                    names.append(f"{match.group(1)} ({'/'.join(path.split('/')[-2:])})")
                    if focus in path:
                        focused.add(names[-1])
            if not names:
                continue
            n = int(count)
            total += n
            self_counts[names[-1]] += n
            for name in focused:
                inclusive[name] += n
    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, c / max(total, 1)) for name, c in counter.most_common(top)]

    return {"samples": total, "self": shares(self_counts), "inclusive": shares(inclusive)}


def cprofile_top(fn: Callable[[], Any], label: str, *, top: int = 14, sort: str = "tottime") -> list[str]:
    """Run ``fn()`` under cProfile and print the ``top`` functions by ``sort`` (native torch ops count
    for the Python function that called them); returns the printed lines."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.runcall(fn)
    out = io.StringIO()
    pstats.Stats(profile, stream=out).strip_dirs().sort_stats(sort).print_stats(top)
    lines = [text for text in out.getvalue().splitlines() if text.strip()]
    body = lines[next((i for i, text in enumerate(lines) if text.lstrip().startswith("ncalls")), 0):]
    print(f"cProfile of {label} (by {sort}):")
    for text in body:
        print(f"  {text}")
    return body


def run_main(main: Callable[[], None]) -> None:
    """Run a benchmark's ``main`` and always stop the Ray cluster it may have started."""
    try:
        main()
    finally:
        import ray

        ray.shutdown()
