"""Async training speedup: wall time per step of the CPU FrozenLake demo at async_generation_ratio 0, 1, 2.

The demo config (examples/frozen_lake/grpo.yaml) is driven only through command-line overrides
(steps, warm start, checkpoints, k, one torch thread per worker), so its tuning can change without
breaking this program. Each repeat runs k = 0, 1, 2 back to back in one Ray cluster. Steps 2 to
``max_steps - 1`` are timed: step 1 has nothing to overlap with and the last one saves a checkpoint.

From the sync run (k = 0), gen = ``time/rollout`` and train = the rest of the step (log-probs,
advantages, actor update, weight sync). Overlapping them perfectly would make a step last
``max(gen, train)``: the ideal speedup is ``(gen + train) / max(gen, train)``.

Usage: python benchmarks/bench_async.py [--repeats 3] [--quick] [--ratios 0,1,2]
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time

import measure

CONFIG = measure.ROOT / "examples" / "frozen_lake" / "grpo.yaml"


def overrides(k: float, args, logdir: str) -> list[str]:
    values = {
        "max_steps": args.steps, "eval_steps": 0, "save_steps": 0, "warmup_sft.steps": args.warmup,
        "async_generation_ratio": k, "logging_dir": logdir, "output_dir": f"{logdir}/ckpt",
        "render_save_dir": "null", "seed": 42,
        "+actor_train.strategy_args.strategy_config.num_threads": 1,
        "+actor_infer.strategy_args.strategy_config.num_threads": 1,
    }
    if args.quick:  # 2 groups x 4 envs, 4 turns: seconds per step
        values.update({"rollout_batch_size": 8, "train_env_manager.num_env_groups": 2,
                       "train_env_manager.group_size": 4, "warmup_sft.batch_size": 8,
                       "custom_envs.FrozenLake4x4.max_steps": 4, "custom_envs.FrozenLake4x4.env_config.max_steps": 4,
                       "actor_train.training_args.per_device_train_batch_size": 8})
    return [f"{key}={value}" for key, value in values.items()]


def run_pipeline(k: float, args) -> dict[str, float]:
    """One training run at ratio ``k``; means over the timed steps."""
    from roll_core.config import load_config, resolve
    from roll_core.pipeline.agentic_pipeline import AgenticPipeline

    with tempfile.TemporaryDirectory(prefix="roll-bench-async-") as logdir:
        pipeline = AgenticPipeline(resolve(load_config(str(CONFIG), overrides(k, args, logdir))),
                                   stream=io.StringIO())
        try:
            started = time.perf_counter()
            pipeline.start_rollouts()
            pipeline.prepare()
            setup_s = time.perf_counter() - started
            steps = [pipeline.train_step() for _ in range(args.steps)]
        finally:
            pipeline.shutdown()
    timed = steps[1:-1] if len(steps) > 2 else steps[-1:]

    def mean(key: str) -> float:
        return statistics.fmean(float(s.get(key, 0.0)) for s in timed)

    step, rollout = mean("time/step"), mean("time/rollout")
    return {"step_s": step, "rollout_s": rollout, "train_s": step - rollout, "actor_s": mean("time/actor"),
            "overlap_s": mean("time/generation_overlap"), "stale_dropped": mean("rollout/dropped_trajectories/stale"),
            "staleness_mean": mean("rollout/staleness/mean"), "setup_s": setup_s}


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--ratios", default="0,1,2", help="async_generation_ratio values (the first is the baseline)")
    p.add_argument("--steps", type=int, default=7, help="max_steps of each run")
    p.add_argument("--warmup", type=int, default=2, help="warmup_sft.steps (a few: valid answers, varied rewards)")
    args = p.parse_args()
    ratios = [float(k) for k in args.ratios.split(",")]
    if args.quick:
        ratios, args.steps, args.warmup, args.repeats = ratios[:2], 3, 1, 1
    measure.setup_env()
    results = measure.print_header("async training: wall time per step vs async_generation_ratio", args)
    results["config"] = {"ratios": ratios, "steps": args.steps, "warmup": args.warmup,
                         "overrides": overrides(ratios[0], args, "LOGDIR")}
    print(f"   {CONFIG.relative_to(measure.ROOT)} with: {' '.join(overrides(ratios[0], args, 'LOGDIR'))}", flush=True)
    measure.start_ray()

    def one(_run: int) -> dict[str, float]:
        out = {}
        for k in ratios:
            out.update({f"k{k:g}_{key}": value for key, value in run_pipeline(k, args).items()})
        return out

    runs = measure.repeat(one, args.repeats, f"k = {', '.join(f'{k:g}' for k in ratios)}")
    results["runs"] = runs
    col, base = measure.column, f"k{ratios[0]:g}"
    gen, train = col(runs, f"{base}_rollout_s"), col(runs, f"{base}_train_s")
    ideal = [(g + t) / max(g, t) for g, t in zip(gen, train)]
    measure.report(results, f"{base}: generation (time/rollout) s per step", gen, "s")
    measure.report(results, f"{base}: training (rest of the step) s per step", train, "s")
    for k in ratios:
        name = f"k{k:g}"
        measure.report(results, f"{name}: wall time per step", col(runs, f"{name}_step_s"), "s")
        measure.report(results, f"{name}: generation overlapping training per step", col(runs, f"{name}_overlap_s"),
                       "s")
    measure.report(results, "ideal speedup (gen + train) / max(gen, train)", ideal, ratio=True)
    for k in ratios[1:]:
        speedup = measure.ratios(col(runs, f"{base}_step_s"), col(runs, f"k{k:g}_step_s"))
        measure.report(results, f"speedup k={k:g} (step time k=0 / k={k:g})", speedup, ratio=True)
        measure.report(results, f"speedup k={k:g} / ideal", measure.ratios(speedup, ideal), ratio=True)
        measure.report(results, f"k={k:g}: actor update time / k=0's (training slowed by overlapping generation)",
                       measure.ratios(col(runs, f"k{k:g}_actor_s"), col(runs, f"{base}_actor_s")), ratio=True)
    if args.plot:
        plot(args.plot, runs, ratios)
    measure.finish(results, args)


def plot(path: str, runs: list[dict], ratios: list[float]) -> None:
    """Wall time per step for each k, generation and training of the sync run, and the ideal step."""
    col, base = measure.column, f"k{ratios[0]:g}"
    ideal = [max(g, t) for g, t in zip(col(runs, f"{base}_rollout_s"), col(runs, f"{base}_train_s"))]
    names = [f"k={k:g}" for k in ratios]
    measure.plot_series(
        path, "Async training on the FrozenLake demo: wall time per step", "async_generation_ratio",
        "seconds per step", {
            "wall time per step": (names, [col(runs, f"k{k:g}_step_s") for k in ratios]),
            "of which actor update": (names, [col(runs, f"k{k:g}_actor_s") for k in ratios]),
        }, kind="bar", hline=(statistics.median(ideal), "ideal: max(gen, train) of k=0"),
        note=f"{measure.machine().get('cores')} shared CPU cores; median of runs, min-max bars; "
        "benchmarks/bench_async.py")


if __name__ == "__main__":
    measure.run_main(main)
