"""Straggler tolerance: trajectories/s of roll's env-level async rollout vs a lockstep rollout vs the ideal.

Every env step sleeps a seeded heavy-tailed latency (straggler_env.py: Pareto, alpha 1.5), as tool
and web calls do. Three rollouts of the same envs (same seeds, same random policy, hence the same
latency draws) with the same concurrency (one thread per env):

* lockstep: what verl-agent and RAGEN do: every turn, all still-running envs step in parallel and
  the turn ends when the slowest returns; a batch is every env playing one episode.
* roll k=0 (``async_generation_ratio: 0``, sync): each env plays its episode without waiting for
  the others; the batch waits for the slowest *episode*.
* roll k=1, k=2 (async): env loops run up to k batches ahead, so a slow episode delays only its
  own group.
* roll k=1 +r (``group_size_redundancy: r``, ROLL's): r extra envs per group, the first
  ``group_size`` members to finish make the group; its ideal is that of its larger env count, so
  the episodes it throws away count as lost work.
* ideal: total sleep / concurrency (every thread busy all the time), from the lockstep's draws.

Two latency scales: at 20 ms the engine's own CPU time on 2 cores is part of the picture, at 100 ms
the scheduling is.

Usage: python benchmarks/bench_stragglers.py [--repeats 3] [--quick] [--plot docs/images/bench_stragglers.png]
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import measure

TAG = "Straggler"


def rollout_spec(args, ratio: float, redundancy: int = 0):
    from roll_core.config import bind_env
    from roll_core.plugins import PluginManager
    from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec
    from roll_core.strategies.base import SamplingParams

    registry = PluginManager(extra_modules=["straggler_env"]).registry
    env = EnvSpec(tag=TAG, env=bind_env("straggler", env_config(args), registry=registry), max_steps=args.turns)
    return RolloutSpec(
        mode="train", seed=7, num_env_groups=args.groups, group_size=args.group_size,
        max_env_num_per_worker=args.envs_per_worker, group_tags=(TAG,) * args.groups, envs={TAG: env},
        sequence_length=4096, sampling=SamplingParams(max_new_tokens=16), policy="random",
        async_generation_ratio=ratio, group_size_redundancy=redundancy,
    )


def env_config(args) -> dict:
    return {"turns": args.turns, "max_steps": args.turns, "latency_scale_s": args.scale,
            "tail_alpha": args.alpha, "latency_cap_s": args.cap}


class RollRollout:
    """roll's rollout of the straggler envs; :meth:`window` times ``batches`` back-to-back batches."""

    def __init__(self, args, ratio: float, redundancy: int = 0):
        from roll_core.models.policy_tokenizer import tiny_tokenizer
        from roll_core.rollout import RolloutScheduler

        self.args, self.n = args, args.groups * args.group_size
        self.scheduler = RolloutScheduler(rollout_spec(args, ratio, redundancy), tiny_tokenizer(), batch_size=self.n)

    def window(self) -> dict[str, float]:
        # one untimed batch first: with lookahead, the batch generated ahead while the other rollouts
        # were measured is taken here, and the window starts as in steady state (one batch in flight)
        self.scheduler.get_batch(self.n)
        started = time.perf_counter()
        trajectories = sum(len(self.scheduler.get_batch(self.n).trajectories) for _ in range(self.args.batches))
        return {"traj_per_s": trajectories / (time.perf_counter() - started)}

    def close(self) -> None:
        self.scheduler.shutdown()


class Lockstep:
    """The lockstep rollout of the same episodes (group g plays episode b in batch b, as roll's sync mode)."""

    def __init__(self, args):
        from straggler_env import StragglerEnv

        self.args = args
        self.spec = rollout_spec(args, 0.0)
        self.members = [(g, m) for g in range(args.groups) for m in range(args.group_size)]
        self.envs = [StragglerEnv(env_config(args)) for _ in self.members]
        self.pool = ThreadPoolExecutor(max_workers=len(self.envs))  # one thread per env, as roll
        self.episode = 0

    def window(self) -> dict[str, float]:
        self.episode += 1  # the episode roll's rollouts play untimed before each window
        started, trajectories, slept = time.perf_counter(), 0, 0.0
        for _ in range(self.args.batches):
            slept += self.batch(self.episode)
            trajectories += len(self.envs)
            self.episode += 1
        elapsed = time.perf_counter() - started
        ideal_s = slept / len(self.envs)  # total work / concurrency
        return {"traj_per_s": trajectories / elapsed, "ideal_traj_per_s": trajectories / ideal_s}

    def batch(self, episode: int) -> float:
        """Every env plays ``episode``; each turn ends with its slowest step. Returns the total sleep."""
        from roll_core.envs.policies import POLICIES
        from roll_core.rollout.engine.spec import derive_seed, episode_seed

        envs, pool = self.envs, self.pool
        seeds = [episode_seed(self.spec, g, episode) for g, _ in self.members]
        policies = [POLICIES["random"](derive_seed(self.spec.seed, "train/policy", g, episode, m, 0))
                    for g, m in self.members]
        observations = list(pool.map(lambda env, seed: env.reset(seed=seed)[0], envs, seeds))
        active = list(range(len(envs)))
        while active:
            actions = [policies[i](envs[i], observations[i]) for i in active]
            outcomes = list(pool.map(lambda i, action: envs[i].step(action), active, actions))
            for i, outcome in zip(active, outcomes):
                observations[i] = outcome[0]
            active = [i for i, out in zip(active, outcomes) if not (out[2] or out[3])]
        return sum(env.slept_s for env in envs)

    def close(self) -> None:
        self.pool.shutdown()


def measure_all(args) -> list[dict[str, float]]:
    """Every rollout side by side: each repeat measures one window of each, in turn."""
    systems = {"lockstep": Lockstep(args)}
    try:
        for k in args.ratios:
            systems[f"roll_k{k:g}"] = RollRollout(args, k)
        for r in args.redundancy:
            systems[f"roll_k1_r{r}"] = RollRollout(args, 1.0, redundancy=r)

        def one(_run: int) -> dict[str, float]:
            out = {}
            for name, system in systems.items():
                out.update({f"{name}_{key}": v for key, v in system.window().items()})
            return out

        return measure.repeat(one, args.repeats, "side-by-side")
    finally:
        for system in systems.values():
            system.close()


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=16)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--envs-per-worker", type=int, default=32, help="<= 32: one env-call thread per env")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--batches", type=int, default=3, help="batches per measured window")
    p.add_argument("--ratios", default="0,1,2", help="async_generation_ratio values of roll's rollouts")
    p.add_argument("--scales", default="0.02,0.1", help="Pareto scales (shortest step latency, s), one run each")
    p.add_argument("--redundancy", default="1,2",
                   help="group_size_redundancy values of extra roll k=1 rollouts ('' for none)")
    p.add_argument("--alpha", type=float, default=1.5)
    p.add_argument("--cap-factor", type=float, default=100.0, help="no step sleeps longer than this x scale")
    args = p.parse_args()
    args.ratios = [float(k) for k in args.ratios.split(",")]
    args.redundancy = [int(r) for r in args.redundancy.split(",") if r.strip()]
    scales = [float(x) for x in args.scales.split(",")]
    if args.quick:
        args.groups, args.group_size, args.envs_per_worker, args.turns, args.batches = 2, 4, 8, 2, 2
        scales, args.cap_factor, args.repeats = [0.005], 40.0, min(args.repeats, 2)
    measure.setup_env()
    results = measure.print_header("straggler tolerance: env-level async rollout vs lockstep", args)
    results["config"] = {k: getattr(args, k) for k in ("groups", "group_size", "turns", "batches", "alpha",
                                                       "cap_factor", "envs_per_worker", "ratios", "redundancy")}
    measure.start_ray()
    # redundant envs are more concurrency: a rollout's ideal is that of its env count (the episodes it
    # plays and throws away count as lost work)
    extra_envs = {f"roll_k1_r{r}": r * args.groups for r in args.redundancy}
    names = ["lockstep", *(f"roll_k{k:g}" for k in args.ratios), *extra_envs]
    envs = args.groups * args.group_size
    fractions = {}
    for scale in scales:
        args.scale, args.cap = scale, scale * args.cap_factor
        print(f"   {args.groups * args.group_size} envs x {args.turns} turns, Pareto(scale {args.scale} s, "
              f"alpha {args.alpha}, cap {args.cap:g} s) per step, {args.batches} batches per window", flush=True)
        runs = measure_all(args)
        results.setdefault("runs", {})[str(scale)] = runs
        label = f"[{scale * 1000:g} ms]"
        ideal = measure.column(runs, "lockstep_ideal_traj_per_s")
        measure.report(results, f"{label} ideal traj/s", ideal, "traj/s")
        for name in names:
            measure.report(results, f"{label} {name} traj/s", measure.column(runs, f"{name}_traj_per_s"), "traj/s")
        lock = measure.column(runs, "lockstep_traj_per_s")
        for name in names[1:]:
            measure.report(results, f"{label} {name} / lockstep",
                           measure.ratios(measure.column(runs, f"{name}_traj_per_s"), lock), ratio=True)
        for name in names:
            extra = extra_envs.get(name, 0)
            scaled = [x * (envs + extra) / envs for x in ideal]
            fractions[(scale, name)] = measure.ratios(measure.column(runs, f"{name}_traj_per_s"), scaled)
            measure.report(results, f"{label} {name} / ideal{' (its env count)' if extra else ''}",
                           fractions[(scale, name)], ratio=True)
    if args.plot:
        labels = [name.replace("roll_k", "roll k=").replace("_r", " +") for name in names]
        measure.plot_series(
            args.plot, f"Straggler tolerance: {args.groups * args.group_size} envs x {args.turns} turns, "
            f"Pareto(alpha={args.alpha}) step latency", "rollout", "throughput / ideal (total work / concurrency)",
            {f"shortest step {scale * 1000:g} ms": (labels, [fractions[(scale, n)] for n in names]) for scale in scales},
            kind="bar", hline=(1.0, "ideal"), note=f"{measure.machine().get('cores')} shared CPU cores; median of runs, min-max bars; "
            "benchmarks/bench_stragglers.py")
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
