"""What reproducible generation costs: a synchronous batch's time with lock-step rounds vs arrival batching.

``reproducible_generation`` (docs/architecture.md, "Reproducible runs") makes every env loop of a
synchronous batch wait, each turn, until all loops still playing have their request ready, so that
a request's batch does not depend on timing. Two rollouts of the same envs share one inference
worker (``hf_infer``, the demo's ``actor_infer``), one with rounds and one batching by arrival (the
scheduler's 20 ms window); their batches alternate, so both see the same load:

* ``lake``: the README demo's training rollout (64 FrozenLake envs, 8 groups x 8, up to 6 turns
  of up to 8 tokens), with the model the demo starts RL from when ``--model`` names it (default:
  the untrained roll-tiny, whose answers are mostly invalid, so episodes run to max_steps).
* ``straggler``: the same model on benchmarks/straggler_env.py (4 turns, every env step sleeps a
  seeded Pareto latency, scale ``--scale`` s, alpha 1.5): rounds wait for the slowest env of each
  turn, which arrival batching does not.

Usage: python benchmarks/bench_reproducible.py [--repeats 3] [--quick] [--batches 2]
"""

from __future__ import annotations

import dataclasses
import time

import measure

ROOT = measure.ROOT
TAG = "Straggler"


def demo_run(model: str | None):
    from roll_core.config import load_config, resolve

    overrides = [f"pretrain={model}"] if model else []
    return resolve(load_config(str(ROOT / "examples" / "frozen_lake" / "grpo.yaml"), overrides))


def straggler_spec(spec, args):
    from roll_core.config import bind_env
    from roll_core.plugins import PluginManager
    from roll_core.rollout.engine.spec import EnvSpec

    registry = PluginManager(extra_modules=["straggler_env"]).registry
    config = {"turns": 4, "max_steps": 4, "latency_scale_s": args.scale, "tail_alpha": 1.5, "latency_cap_s": 2.0}
    env = EnvSpec(tag=TAG, env=bind_env("straggler", config, registry=registry), max_steps=4,
                  max_tokens_per_step=8)
    return dataclasses.replace(spec, envs={TAG: env}, group_tags=(TAG,) * spec.num_env_groups)


class Pair:
    """The same rollout twice, with and without lock-step rounds, in front of one generation."""

    def __init__(self, run, generation, args, kind: str):
        from roll_core.models.policy_tokenizer import rollout_tokenizer
        from roll_core.rollout import RolloutScheduler
        from roll_core.rollout.engine.spec_from_run import batch_size_from_config, rollout_spec

        self.n = batch_size_from_config(run.config, "train")
        tokenizer = rollout_tokenizer(run.model_path("actor_infer", required=False), seed=run.config.seed,
                                      model_free=False)
        self.rollouts = {}
        for lockstep in (True, False):
            spec = rollout_spec(run, "train", lockstep=lockstep)
            if kind == "straggler":
                spec = straggler_spec(spec, args)
            self.rollouts[lockstep] = RolloutScheduler(spec, tokenizer, generate_scheduler=generation.scheduler,
                                                       batch_size=self.n)
        for rollout in self.rollouts.values():  # warm-up: first prompts, caches, actor imports
            rollout.get_batch(self.n)

    def window(self, batches: int) -> dict[str, float]:
        out = {}
        for lockstep, name in ((True, "rounds"), (False, "arrival")):
            started, turns = time.perf_counter(), 0
            for _ in range(batches):
                turns += int(self.rollouts[lockstep].get_batch(self.n).metrics["rollout/env_steps"])
            out[f"{name}_s"] = time.perf_counter() - started
            out[f"{name}_turns"] = turns
        return out

    def close(self) -> None:
        for rollout in self.rollouts.values():
            rollout.shutdown()


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=2, help="batches of each rollout per measured window")
    p.add_argument("--scale", type=float, default=0.02, help="straggler env: shortest step latency (s)")
    p.add_argument("--model", default=None, help="pretrain of actor_infer (default: the demo's, untrained)")
    p.add_argument("--kinds", default="lake,straggler")
    args = p.parse_args()
    if args.quick:
        args.batches, args.repeats = 1, min(args.repeats, 1)
    measure.setup_env()
    results = measure.print_header("reproducible generation: lock-step rounds vs arrival batching", args)
    measure.start_ray()
    from roll_core.workers.infer_group import start_generation

    run = demo_run(args.model)
    generation = start_generation(run)
    try:
        for kind in args.kinds.split(","):
            pair = Pair(run, generation, args, kind)
            try:
                runs = measure.repeat(lambda _i, pair=pair: pair.window(args.batches), args.repeats, kind)
            finally:
                pair.close()
            results.setdefault("runs", {})[kind] = runs
            measure.report(results, f"{kind}: batch time, rounds / arrival",
                           measure.ratios(measure.column(runs, "rounds_s"), measure.column(runs, "arrival_s")),
                           ratio=True)
    finally:
        generation.shutdown()
    measure.finish(results, args)


if __name__ == "__main__":
    main()
