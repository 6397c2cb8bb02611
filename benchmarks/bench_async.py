"""Async training speedup: wall time per step at async_generation_ratio 0, 1, 2 (CPU demo, long-tailed responses).

The demo config (examples/frozen_lake/grpo.yaml) is driven only through command-line overrides
(steps, warm start, checkpoints, k, one torch thread per worker), so its tuning can change without
breaking this program. Each repeat runs k = 0, 1, 2 back to back in one Ray cluster, repeat i
starting with the i-th setting (a load that drifts on a shared machine then favours none). Steps 2
to ``max_steps - 1`` are timed: step 1 has nothing to overlap with and the last one saves a checkpoint.

From the sync run (k = 0), gen = ``time/rollout`` and train = the rest of the step (log-probs,
advantages, actor update, weight sync). Overlapping them perfectly would make a step last
``max(gen, train)``: the ideal speedup is ``(gen + train) / max(gen, train)``.

``--workload longtail`` (issue 34, partial rollout): responses that are really generated and
long-tailed, so that async training's weight syncs land in the middle of long responses. The same
config, but one turn per episode, the untrained tiny model (no warm start: it rarely samples its
end token, so a response runs to its cap), no stop string, and ``--groups`` env groups, each with
its own tag whose ``max_tokens_per_step`` is drawn from a Pareto (alpha 1.5) over
``--min-len``-``--max-len`` tokens (seed 0: the request mix of bench_partial_rollout.py). Each k > 0
runs once per ``--partial`` value (``partial_rollout: false`` regenerates a response a sync
interrupts, ``true`` keeps its tokens and continues); per step the generate scheduler's counts give
the tokens generated and thrown away.

Usage: python benchmarks/bench_async.py [--repeats 3] [--quick] [--ratios 0,1,2]
       python benchmarks/bench_async.py --workload longtail [--repeats 2] [--ratios 0,1] [--partial false,true]
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time

import measure

CONFIG = measure.ROOT / "examples" / "frozen_lake" / "grpo.yaml"


def overrides(k: float, args, logdir: str, partial: bool | None = None) -> list[str]:
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
    if partial is not None:
        values["partial_rollout"] = str(partial).lower()
    if args.workload == "longtail":
        values.update(longtail_overrides(args))
    return [f"{key}={value}" for key, value in values.items()]


def longtail_lengths(args) -> list[int]:
    """Each group's response length cap: Pareto(alpha 1.5) from ``min_len``, capped at ``max_len``
    (seed 0; the same draw as bench_partial_rollout.py's requests for the same count)."""
    import numpy as np

    rng = np.random.default_rng(0)
    return [int(min(args.max_len, args.min_len * (1 + rng.pareto(1.5)))) for _ in range(args.groups)]


def longtail_overrides(args) -> dict[str, object]:
    """One tag per group (FrozenLake, one turn), each capping its response at its drawn length."""
    tags = [f"LongTail{i}" for i in range(args.groups)]
    values: dict[str, object] = {
        "warmup_sft.steps": 0, "rollout_batch_size": args.groups * args.group_size,
        "sequence_length": args.max_len + 256, "actor_infer.generating_args.max_new_tokens": args.max_len,
        "actor_infer.generating_args.stop_strings": "[]",
        "actor_train.training_args.per_device_train_batch_size": args.groups * args.group_size,
        "train_env_manager.num_env_groups": args.groups, "train_env_manager.group_size": args.group_size,
        "train_env_manager.tags": "[" + ",".join(tags) + "]",
    }
    for tag, length in zip(tags, longtail_lengths(args)):
        values.update({f"+custom_envs.{tag}.{key}": value for key, value in {
            "env_type": "frozen_lake", "max_steps": 1, "max_tokens_per_step": length, "agent_template": "'{state}'",
            "env_config": "${custom_envs.FrozenLake4x4.env_config}", "env_config.max_steps": 1}.items()})
    return values


def run_pipeline(k: float, args, partial: bool | None = None) -> dict[str, float]:
    """One training run at ratio ``k``; means over the timed steps."""
    from roll_core.config import load_config, resolve
    from roll_core.pipeline.agentic_pipeline import AgenticPipeline

    with tempfile.TemporaryDirectory(prefix="roll-bench-async-") as logdir:
        pipeline = AgenticPipeline(resolve(load_config(str(CONFIG), overrides(k, args, logdir, partial))),
                                   stream=io.StringIO())
        try:
            started = time.perf_counter()
            pipeline.start_rollouts()
            pipeline.prepare()
            setup_s = time.perf_counter() - started
            steps, counts = [], [generated_tokens(pipeline)]
            for _ in range(args.steps):
                steps.append(pipeline.train_step())
                counts.append(generated_tokens(pipeline))
        finally:
            pipeline.shutdown()
    timed = steps[1:-1] if len(steps) > 2 else steps[-1:]
    # the scheduler's counts over the timed steps (from the end of step 1 to the end of the last timed one)
    first, last = (1, len(steps) - 1) if len(steps) > 2 else (len(steps) - 1, len(steps))
    tokens = {key: (counts[last][key] - counts[first][key]) / (last - first) for key in counts[0]}

    def mean(key: str) -> float:
        return statistics.fmean(float(s.get(key, 0.0)) for s in timed)

    step, rollout = mean("time/step"), mean("time/rollout")
    return {"step_s": step, "rollout_s": rollout, "train_s": step - rollout, "actor_s": mean("time/actor"),
            "overlap_s": mean("time/generation_overlap"), "stale_dropped": mean("rollout/dropped_trajectories/stale"),
            "staleness_mean": mean("rollout/staleness/mean"), "setup_s": setup_s, "sync_s": mean("time/sync"),
            **{f"{key}_per_step": value for key, value in tokens.items()}}


def generated_tokens(pipeline) -> dict[str, float]:
    """The generate scheduler's running counts: tokens generated, thrown away (regenerate) and kept
    (keep-and-continue) at weight syncs, batches run, and the time with the inference worker busy."""
    import ray

    stats = ray.get(pipeline.generation.scheduler.stats.remote())
    return {"generated_tokens": float(stats["generated_tokens"]), "discarded_tokens": float(stats["discarded_tokens"]),
            "kept_tokens": float(stats["kept_tokens"]), "batches": float(stats["batches"]),
            "gen_busy_s": pipeline.generation.activity()["busy_s"]}


def settings(args) -> list[tuple[str, float, bool | None]]:
    """``(name, k, partial_rollout)`` of every run of a repeat, the synchronous baseline first; with
    one ``--partial`` value the names are ``k0``, ``k1``, ...; with several, ``k1_regen``, ``k1_keep``."""
    partials = [PARTIAL[p.strip()] for p in args.partial.split(",") if p.strip()] or [None]
    out = [(f"k{args.ratios[0]:g}", args.ratios[0], partials[-1])]
    for k in args.ratios[1:]:
        for partial in partials:
            suffix = "" if len(partials) == 1 else ("_keep" if partial else "_regen")
            out.append((f"k{k:g}{suffix}", k, partial))
    return out


PARTIAL = {"true": True, "false": False, "default": None}


def label(name: str) -> str:
    """``k1_keep`` -> ``k=1 keep``: how figures name a setting."""
    return name.replace("k", "k=", 1).replace("_", " ")


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--workload", choices=("demo", "longtail"), default="demo",
                   help="demo: the FrozenLake demo; longtail: one-turn episodes with long-tailed generated "
                   "responses (2 repeats by default)")
    p.add_argument("--ratios", default=None, help="async_generation_ratio values, the first is the baseline "
                   "(default 0,1,2; longtail 0,1)")
    p.add_argument("--partial", default=None, help="partial_rollout values run at each k > 0: true, false, default "
                   "(the config's), comma-separated (default: default; longtail: false,true)")
    p.add_argument("--steps", type=int, default=None, help="max_steps of each run (default 7; longtail 6)")
    p.add_argument("--warmup", type=int, default=2, help="warmup_sft.steps (a few: valid answers, varied rewards)")
    p.add_argument("--groups", type=int, default=16, help="longtail: env groups, each with its own length cap")
    p.add_argument("--group-size", type=int, default=4, help="longtail: envs per group")
    p.add_argument("--min-len", type=int, default=16, help="longtail: the shortest response cap (Pareto scale)")
    p.add_argument("--max-len", type=int, default=512, help="longtail: the longest response cap")
    p.set_defaults(repeats=None)
    args = p.parse_args()
    longtail = args.workload == "longtail"
    args.repeats = args.repeats or (2 if longtail else 3)  # longtail: 2 repeats of 3 runs, about 5 minutes
    args.ratios = [float(k) for k in (args.ratios or ("0,1" if longtail else "0,1,2")).split(",")]
    args.partial = args.partial or ("false,true" if longtail else "default")
    args.steps = args.steps or (6 if longtail else 7)
    if args.quick:
        args.ratios, args.steps, args.warmup, args.repeats = args.ratios[:2], 3, 1, 1
        if longtail:
            args.groups, args.group_size, args.max_len = 6, 2, 96
    runs_of = settings(args)
    names = [name for name, _, _ in runs_of]
    measure.setup_env()
    title = "async training: wall time per step vs async_generation_ratio"
    results = measure.print_header(title + (", long-tailed responses" if longtail else ""), args)
    results["config"] = {"workload": args.workload, "ratios": args.ratios, "partial": args.partial,
                         "steps": args.steps, "warmup": args.warmup, "settings": names,
                         "overrides": overrides(args.ratios[0], args, "LOGDIR")}
    if longtail:
        results["config"].update({"groups": args.groups, "group_size": args.group_size,
                                  "lengths": longtail_lengths(args)})
        print(f"   response caps per group: {sorted(longtail_lengths(args))} x {args.group_size} envs", flush=True)
    print(f"   {CONFIG.relative_to(measure.ROOT)} with: {' '.join(overrides(args.ratios[0], args, 'LOGDIR'))}",
          flush=True)
    measure.start_ray()

    def one(run: int) -> dict[str, float]:
        # repeat i starts with setting i (mod n): a load that drifts during a repeat favours no setting
        shift = run % len(runs_of)
        out = {}
        for name, k, partial in runs_of[shift:] + runs_of[:shift]:
            out.update({f"{name}_{key}": value for key, value in run_pipeline(k, args, partial).items()})
        return out

    runs = measure.repeat(one, args.repeats, ", ".join(names))
    results["runs"] = runs
    col, base = measure.column, names[0]
    show = {name: label(name) for name in names}
    gen, train = col(runs, f"{base}_rollout_s"), col(runs, f"{base}_train_s")
    ideal = [(g + t) / max(g, t) for g, t in zip(gen, train)]
    measure.report(results, f"{show[base]}: generation (time/rollout) s per step", gen, "s")
    measure.report(results, f"{show[base]}: training (rest of the step) s per step", train, "s")
    for name in names:
        measure.report(results, f"{show[name]}: wall time per step", col(runs, f"{name}_step_s"), "s")
        measure.report(results, f"{show[name]}: generation overlapping training per step",
                       col(runs, f"{name}_overlap_s"), "s")
        measure.report(results, f"{show[name]}: trainer waiting for its batch (time/rollout) per step",
                       col(runs, f"{name}_rollout_s"), "s")
        measure.report(results, f"{show[name]}: inference worker generating (busy) per step",
                       col(runs, f"{name}_gen_busy_s_per_step"), "s")
        if longtail:
            for key in ("generated", "discarded", "kept"):
                measure.report(results, f"{show[name]}: tokens {key} per step",
                               col(runs, f"{name}_{key}_tokens_per_step"), "tokens")
    measure.report(results, "ideal speedup (gen + train) / max(gen, train)", ideal, ratio=True)
    for name in names[1:]:
        speedup = measure.ratios(col(runs, f"{base}_step_s"), col(runs, f"{name}_step_s"))
        measure.report(results, f"speedup {show[name]} (step time {show[base]} / {show[name]})", speedup,
                       ratio=True)
        measure.report(results, f"speedup {show[name]} / ideal", measure.ratios(speedup, ideal), ratio=True)
        measure.report(results, f"{show[name]}: actor update time / {show[base]}'s (training slowed by "
                       "overlapping generation)",
                       measure.ratios(col(runs, f"{name}_actor_s"), col(runs, f"{base}_actor_s")), ratio=True)
        measure.report(results, f"{show[name]}: generation busy time per step / {show[base]}'s (generation "
                       "slowed by overlapping training)",
                       measure.ratios(col(runs, f"{name}_gen_busy_s_per_step"), col(runs, f"{base}_gen_busy_s_per_step")),
                       ratio=True)
    if args.plot:
        plot(args.plot, runs, names, longtail)
    measure.finish(results, args)


def plot(path: str, runs: list[dict], names: list[str], longtail: bool = False) -> None:
    """Wall time per step of each setting, generation and training of the sync run, and the ideal step."""
    col, base = measure.column, names[0]
    ideal = [max(g, t) for g, t in zip(col(runs, f"{base}_rollout_s"), col(runs, f"{base}_train_s"))]
    labels = [label(name) for name in names]
    what = "long-tailed responses (16-512 tokens)" if longtail else "the FrozenLake demo"
    measure.plot_series(
        path, f"Async training on {what}: wall time per step", "async_generation_ratio",
        "seconds per step", {
            "wall time per step": (labels, [col(runs, f"{n}_step_s") for n in names]),
            "of which actor update": (labels, [col(runs, f"{n}_actor_s") for n in names]),
        }, kind="bar", hline=(statistics.median(ideal), f"ideal: max(gen, train) of {label(base)}"),
        note=f"{measure.machine().get('cores')} shared CPU cores; median of runs, min-max bars; "
        "benchmarks/bench_async.py")


if __name__ == "__main__":
    measure.run_main(main)
