"""Scaling: rollout throughput and memory per env from 64 to 4096 FrozenLake envs (random policy).

At each size the engine starts with groups of 8 and ``--envs-per-worker`` envs per env-manager
actor (so the number of processes grows with the envs, as a real deployment's would), serves one
warm-up batch of every env, then ``--repeats`` timed batches. Memory is the resident size of the
env-manager processes after the warm-up; "per env" divides it by the envs, "marginal" is the slope
between consecutive sizes (what one more env costs once the processes exist). The proportional set
size (PSS) is reported next to it: resident memory counts the pages the processes share (Python's
and Ray's libraries) once per process, PSS splits them among the processes that share them. Each repeat also
times the raw gymnasium loop on the same steps, so throughput is reported as a ratio too.

Usage: python benchmarks/bench_scaling.py [--sizes 64,256,1024,4096] [--quick] [--plot docs/images/bench_scaling.png]
"""

from __future__ import annotations

import measure
import rollouts


def measure_size(envs: int, args) -> dict:
    setup = rollouts.LakeSetup(groups=envs // args.group_size, group_size=args.group_size,
                               envs_per_worker=min(args.envs_per_worker, envs), max_steps=args.max_steps)
    engine = rollouts.EngineRollout(setup)
    try:
        engine.window(1)
        rss, pss = engine.rss_bytes(), engine.pss_bytes()

        def one(run: int) -> dict[str, float]:
            roll = engine.window(1)
            raw = rollouts.raw_gym_loop(int(roll["steps"]), setup.max_steps, seed=run)
            return {"steps_per_s": roll["steps_per_s"], "raw_steps_per_s": raw["steps_per_s"],
                    "traj_per_s": roll["traj_per_s"]}

        runs = measure.repeat(one, args.repeats, f"{envs} envs")
    finally:
        engine.close()
    return {"envs": envs, "workers": len(engine.pids), "start_s": engine.start_s, "rss_bytes": rss, "pss_bytes": pss,
            "runs": runs}


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64,128,256,512,1024,2048,4096", help="comma-separated env counts")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--envs-per-worker", type=int, default=256, help="envs per env-manager actor (process)")
    p.add_argument("--max-steps", type=int, default=10)
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.repeats = [16, 64], min(args.repeats, 2)
    measure.setup_env()
    results = measure.print_header("rollout scaling: throughput and memory vs number of envs", args)
    results["config"] = {"sizes": sizes, "group_size": args.group_size, "envs_per_worker": args.envs_per_worker,
                         "max_steps": args.max_steps}
    measure.start_ray()
    points = []
    for envs in sizes:
        point = measure_size(envs, args)
        points.append(point)
        print(f"   {envs} envs: {point['workers']} env managers, started in {point['start_s']:.1f} s, "
              f"{point['rss_bytes'] / 2**20:.0f} MiB resident ({point['rss_bytes'] / envs / 2**10:.0f} KiB per env), "
              f"{point['pss_bytes'] / 2**20:.0f} MiB proportional ({point['pss_bytes'] / envs / 2**10:.0f} KiB per env)",
              flush=True)
    results["points"] = points
    col = measure.column
    for previous, point in zip([None, *points], points):
        n = point["envs"]
        measure.report(results, f"{n} envs: env steps/s", col(point["runs"], "steps_per_s"), "steps/s")
        measure.report(results, f"{n} envs: engine / raw gymnasium",
                       measure.ratios(col(point["runs"], "steps_per_s"), col(point["runs"], "raw_steps_per_s")),
                       ratio=True)
        per_env = point["rss_bytes"] / n / 2**10
        line = f"VALUE {n} envs: memory {point['rss_bytes'] / 2**20:.0f} MiB, {per_env:.0f} KiB per env"
        if previous is not None:
            marginal = (point["rss_bytes"] - previous["rss_bytes"]) / (n - previous["envs"]) / 2**10
            point["marginal_kib_per_env"] = marginal
            line += f", marginal {marginal:.0f} KiB per env (from {previous['envs']})"
        print(line + f"; proportional (PSS) {point['pss_bytes'] / n / 2**10:.0f} KiB per env")
    if args.plot:
        plot(args, points)
    measure.finish(results, args)


def plot(args, points) -> None:
    """Two panels: env steps/s (median, min-max) and resident MiB per env, against the env count."""
    import statistics

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [p["envs"] for p in points]
    runs = [[r["steps_per_s"] for r in p["runs"]] for p in points]
    med = [statistics.median(r) for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.errorbar(xs, med, yerr=[[m - min(r) for m, r in zip(med, runs)], [max(r) - m for m, r in zip(med, runs)]],
                  marker="o", capsize=4, label="roll engine, random policy")
    for x, y, point in zip(xs, med, points):
        left.annotate(f"{point['workers']} proc", (x, y), textcoords="offset points", xytext=(0, 8), fontsize=7,
                      ha="center")
    left.set(xlabel="envs", ylabel="env steps per second", title="Rollout throughput (env-manager processes)")
    left.set_xscale("log", base=2)
    left.set_ylim(bottom=0)
    right.plot(xs, [p["rss_bytes"] / p["envs"] / 2**10 for p in points], marker="o", label="resident / envs")
    marginal = [p.get("marginal_kib_per_env") for p in points]
    right.plot(xs[1:], marginal[1:], marker="s", label="marginal (slope)")
    if all(p.get("pss_bytes") for p in points):
        right.plot(xs, [p["pss_bytes"] / p["envs"] / 2**10 for p in points], marker="^",
                   label="proportional (PSS) / envs")
    right.set(xlabel="envs", ylabel="KiB per env", title="Env-manager memory per env")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.text(0.01, 0.01, f"{measure.machine().get('cores')} shared CPU cores; {args.envs_per_worker} envs per "
             "env manager; benchmarks/bench_scaling.py", fontsize=7, alpha=0.7)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    plt.close(fig)
    print(f"plot written to {args.plot}")


if __name__ == "__main__":
    measure.run_main(main)
