"""Worker priority: the demo's time per step next to two busy processes, Ray's niceness against roll's.

Ray lowers its workers to nice 15 by default; roll's local cluster runs them at the driver's
priority (``worker_niceness: 0``). This program runs a short FrozenLake demo (no warm start, no
validation or checkpoints: only RL steps are timed) four ways, back to back:

* ``worker_niceness=15`` (Ray's default, roll before) and ``worker_niceness=0`` (roll now),
* each on the machine as it is and next to two CPU-bound processes at the driver's priority
  (``python -c 'while True: pass'``, standing for a browser or a build),

and prints, per setting, time per step loaded / idle: how much the other processes slow training
down. A run that has not finished its steps within ``--timeout`` seconds is reported with the steps
it did. Time per step is measured between the first and the last progress line (start-up excluded).

    python benchmarks/bench_priority.py                 # 8 steps a run, 1 repeat
    python benchmarks/bench_priority.py --quick         # 2 steps: a smoke test
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import measure

DEMO = measure.ROOT / "examples" / "frozen_lake" / "grpo.yaml"
STEP_LINE = re.compile(r"^step\s+(\d+)/(\d+)")
BUSY = "while True: pass"
#: setting name -> Ray's worker niceness increment
SETTINGS = {"ray default (nice +15)": 15, "roll (driver's priority)": 0}


def timed_run(niceness: int, steps: int, timeout: float, workdir: str) -> dict[str, float]:
    """One `roll run` of ``steps`` RL steps; seconds per step between the first and last step line."""
    command = [sys.executable, "-m", "roll_core", "run", str(DEMO), f"max_steps={steps}", "warmup_sft.steps=0",
               "eval_steps=0", "save_steps=0", f"worker_niceness={niceness}",
               f"logging_dir={workdir}/logs", f"output_dir={workdir}/out", "render_save_dir=null"]
    seen: list[tuple[int, float]] = []
    # the same session as the busy processes: with the kernel's autogroup scheduling
    # (/proc/sys/kernel/sched_autogroup_enabled) niceness only ranks processes within one session,
    # which is the case of a user starting roll and other work from one terminal
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, **measure.QUIET_ENV})
    timer = threading.Timer(timeout, child.kill)  # a starved run may print nothing for minutes
    timer.start()
    try:
        assert child.stdout is not None
        for text in child.stdout:
            match = STEP_LINE.match(text.strip())
            if match:
                seen.append((int(match[1]), time.perf_counter()))
    finally:
        timer.cancel()
        if child.poll() is None:
            child.kill()  # roll's reaper takes down its Ray cluster
        child.wait()
    if len(seen) < 2:
        return {"steps": float(len(seen)), "s_per_step": float("nan")}
    (first, t0), (last, t1) = seen[0], seen[-1]
    return {"steps": float(last), "s_per_step": (t1 - t0) / (last - first)}


def busy_processes(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0], repeats=1)
    p.add_argument("--steps", type=int, default=8, help="RL steps a run (default 8)")
    p.add_argument("--busy", type=int, default=2, help="competing CPU-bound processes (default 2)")
    p.add_argument("--timeout", type=float, default=600, help="seconds a run may take (default 600)")
    args = p.parse_args()
    measure.setup_env()
    steps = 2 if args.quick else args.steps
    results = measure.print_header("worker priority: time per step next to busy processes", args)
    import tempfile

    for name, niceness in SETTINGS.items():
        idle, loaded = [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as work:
                idle.append(timed_run(niceness, steps, args.timeout, work))
            others = busy_processes(args.busy)
            try:
                with tempfile.TemporaryDirectory() as work:
                    loaded.append(timed_run(niceness, steps, args.timeout, work))
            finally:
                for proc in others:
                    proc.kill()
                    proc.wait()
            print(f"  {name}: idle {idle[-1]['s_per_step']:.2f} s/step, with {args.busy} busy processes "
                  f"{loaded[-1]['s_per_step']:.2f} s/step ({loaded[-1]['steps']:.0f} steps done)", flush=True)
        measure.report(results, f"{name}: s per step, idle", measure.column(idle, "s_per_step"), "s")
        measure.report(results, f"{name}: s per step, {args.busy} busy processes",
                       measure.column(loaded, "s_per_step"), "s")
        measure.report(results, f"{name}: loaded / idle", measure.ratios(measure.column(loaded, "s_per_step"),
                                                                         measure.column(idle, "s_per_step")),
                       ratio=True)
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
