"""Rollout overhead: env steps/s of roll's full rollout engine vs a raw single-process gymnasium loop.

1024 FrozenLake envs (128 groups x 8) play random-policy episodes through the whole engine (group
queue, env-manager actors on Ray, by default one per CPU core, per-env asyncio loops, chat prompts,
token assembly, padded batches). The same number of steps is then played by gymnasium's
FrozenLake-v1 in a plain loop, and by roll's FrozenLake text env alone in this process (no engine),
which splits the gap into "text env" and "engine". A second engine runs the env calls on its event loop instead of in worker
threads (``step_timeout_s: None``: no per-step timeout), which prices the thread hop of every env
call. Each repeat measures the four back to back.

Usage: python benchmarks/bench_rollout.py [--repeats 3] [--quick] [--profile 10]
"""

from __future__ import annotations

import dataclasses
import os

import measure
import rollouts


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=128)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--envs-per-worker", type=int, default=0,
                   help="envs per env-manager actor (process); 0: one env manager per CPU core")
    p.add_argument("--max-steps", type=int, default=10, help="turns per episode at most")
    p.add_argument("--batches", type=int, default=2, help="batches of every env per measured window")
    p.add_argument("--profile", type=float, default=0, metavar="S",
                   help="also sample the env-manager processes with py-spy for S seconds and print the top frames")
    args = p.parse_args()
    if args.quick:
        args.groups, args.envs_per_worker, args.batches, args.repeats = 8, 32, 1, min(args.repeats, 2)
    if args.envs_per_worker <= 0:  # whole groups, spread over the cores: the best split measured (section 1)
        groups_per_worker = -(-args.groups // max(1, os.cpu_count() or 1))
        args.envs_per_worker = groups_per_worker * args.group_size
    setup = rollouts.LakeSetup(args.groups, args.group_size, args.envs_per_worker, args.max_steps)
    measure.setup_env()
    results = measure.print_header("rollout overhead: roll's engine vs raw gymnasium", args)
    results["config"] = {**setup.__dict__, "batches": args.batches}
    print(f"   {setup.envs} FrozenLake 4x4 envs ({setup.groups} x {setup.group_size}), random policy, "
          f"{setup.envs_per_worker} envs per env manager, {args.batches} batches per window", flush=True)
    measure.start_ray()
    engine = rollouts.EngineRollout(setup)
    inline = None
    try:
        inline = rollouts.EngineRollout(dataclasses.replace(setup, inline=True))
        print(f"   engines started in {engine.start_s:.1f} s and {inline.start_s:.1f} s ({len(engine.pids)} env "
              "managers each)", flush=True)
        engine.window(1)  # warm-up: first prompts, tokenizer caches, actor imports
        inline.window(1)

        def one(run: int) -> dict[str, float]:
            roll = engine.window(args.batches)
            raw = rollouts.raw_gym_loop(int(roll["steps"]), setup.max_steps, seed=run)
            text = rollouts.text_env_loop(int(roll["steps"]), setup)
            fast = inline.window(args.batches)
            return {"engine_steps_per_s": roll["steps_per_s"], "raw_gym_steps_per_s": raw["steps_per_s"],
                    "text_env_steps_per_s": text["steps_per_s"], "inline_steps_per_s": fast["steps_per_s"],
                    "engine_cpu_us_per_step": roll["cpu_us_per_step"], "text_env_cpu_us_per_step": text["cpu_us_per_step"],
                    "steps": roll["steps"]}

        runs = measure.repeat(one, args.repeats, "engine, raw gym, text env, engine inline")
        if args.profile > 0:
            results["profile"] = measure.profile_during(engine.pids, args.profile, lambda: engine.window(1),
                                                        out_dir="/tmp/roll-bench-profile")
    finally:
        engine.close()
        if inline is not None:
            inline.close()
    col = measure.column
    results["runs"] = runs
    measure.report(results, "engine env steps/s", col(runs, "engine_steps_per_s"), "steps/s")
    measure.report(results, "raw gymnasium env steps/s", col(runs, "raw_gym_steps_per_s"), "steps/s")
    measure.report(results, "roll text env (no engine) env steps/s", col(runs, "text_env_steps_per_s"), "steps/s")
    measure.report(results, "engine, inline env calls, env steps/s", col(runs, "inline_steps_per_s"), "steps/s")
    measure.report(results, "engine / raw gymnasium",
                   measure.ratios(col(runs, "engine_steps_per_s"), col(runs, "raw_gym_steps_per_s")), ratio=True)
    measure.report(results, "text env / raw gymnasium",
                   measure.ratios(col(runs, "text_env_steps_per_s"), col(runs, "raw_gym_steps_per_s")), ratio=True)
    measure.report(results, "engine / text env",
                   measure.ratios(col(runs, "engine_steps_per_s"), col(runs, "text_env_steps_per_s")), ratio=True)
    measure.report(results, "engine with inline env calls / engine",
                   measure.ratios(col(runs, "inline_steps_per_s"), col(runs, "engine_steps_per_s")), ratio=True)
    # CPU time per step holds on a shared machine, where the wall-clock rates above do not
    measure.report(results, "env-manager CPU per env step", col(runs, "engine_cpu_us_per_step"), "us")
    measure.report(results, "text env CPU per env step", col(runs, "text_env_cpu_us_per_step"), "us")
    measure.report(results, "text env CPU / env-manager CPU, per step",
                   measure.ratios(col(runs, "text_env_cpu_us_per_step"), col(runs, "engine_cpu_us_per_step")), ratio=True)
    if args.plot:
        names = ["raw gymnasium", "roll text env", "roll engine", "engine, inline env calls"]
        keys = ["raw_gym_steps_per_s", "text_env_steps_per_s", "engine_steps_per_s", "inline_steps_per_s"]
        measure.plot_series(args.plot, f"Random-policy FrozenLake steps, {setup.envs} envs", "", "env steps per second",
                            {"median of runs, min-max bars": (names, [col(runs, k) for k in keys])}, kind="bar",
                            logy=True, note="single process: raw gymnasium, roll text env; Ray: roll engine; "
                            "benchmarks/bench_rollout.py")
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
