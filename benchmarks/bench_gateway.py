"""Agent gateway overhead: time per model call of an OpenAI-API agent vs the in-process env path.

The same FrozenLake episodes (4x4, not slippery, the same seeds and moves) are played through
roll's rollout engine twice per repeat, back to back: by the built-in env (the env loop calls the
policy in-process) and by examples/agents' FrozenLake agent, whose every move is an HTTP request
from the ``openai`` client to the gateway (validation, chat-template render, parent matching,
token bookkeeping, the JSON response and its parsing in the client). Two policies:

* ``scripted`` (the solver, no model): the engine's own cost per call, where the gateway's overhead
  is fully visible;
* ``model`` (roll-tiny through hf_infer and the generation scheduler): what the overhead is next to
  generation, even of a 1.2M-parameter model (``--no-model`` skips it).

The figure is the ratio of time per call (gateway / env path) and the difference in milliseconds;
``--profile S`` samples the env-manager process with py-spy during gateway windows.

Usage: python benchmarks/bench_gateway.py [--repeats 3] [--quick] [--profile 10] [--no-model]
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import measure

TAGS = {"env": "Lake", "gateway": "LakeAgent"}


def rollout_spec(path: str, policy: str, groups: int, group_size: int, max_steps: int, seed: int = 7):
    """The rollout of one path: the built-in env, or the agent (same settings, same seeds)."""
    from roll_core.config import bind_env
    from roll_core.envs.binding import bind_agent_registration
    from roll_core.plugins import PluginManager
    from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec
    from roll_core.strategies.base import SamplingParams

    config = {"size": 4, "p": 0.8, "is_slippery": False, "max_steps": max_steps}
    if path == "env":
        binding = bind_env("frozen_lake", config)
    else:
        registry = PluginManager(extra_modules=["gateway_agent"]).registry
        binding = bind_agent_registration(registry.get("agent", "bench_lake_agent"), config)
    tag = TAGS[path]
    env = EnvSpec(tag=tag, env=binding, max_steps=max_steps, max_tokens_per_step=8)
    return RolloutSpec(mode="train", seed=seed, num_env_groups=groups, group_size=group_size,
                       max_env_num_per_worker=groups * group_size, group_tags=(tag,) * groups, envs={tag: env},
                       sequence_length=2048, sampling=SamplingParams(max_new_tokens=8), policy=policy)


class Engine:
    """One path's rollout; :meth:`window` plays ``batches`` batches and counts the model calls."""

    def __init__(self, path: str, policy: str, args: Any, generation: Any = None):
        from roll_core.models.policy_tokenizer import tiny_tokenizer
        from roll_core.rollout import RolloutScheduler

        groups = args.groups if policy == "scripted" else args.model_groups
        self.size = groups * args.group_size
        self.scheduler = RolloutScheduler(rollout_spec(path, policy, groups, args.group_size, args.max_steps),
                                          tiny_tokenizer(), batch_size=self.size,
                                          generate_scheduler=generation.scheduler if generation else None)
        self.pids = [info["pid"] for info in self.scheduler.worker_info]

    def window(self, batches: int) -> dict[str, float]:
        calls, started = 0, time.perf_counter()
        for _ in range(batches):
            calls += int(self.scheduler.get_batch(self.size).metrics["rollout/env_steps"])
        elapsed = time.perf_counter() - started
        return {"calls": calls, "ms_per_call": 1000 * elapsed / calls}

    def close(self) -> None:
        self.scheduler.shutdown()


def measure_pair(policy: str, args: Any, generation: Any = None, profile: float = 0) -> tuple[list, dict]:
    env, gateway = Engine("env", policy, args, generation), Engine("gateway", policy, args, generation)
    summary: dict[str, Any] = {}
    try:
        env.window(1)  # warm-up: imports, tokenizer caches, the gateway's start
        gateway.window(1)

        def one(run: int) -> dict[str, float]:
            e, g = env.window(args.batches), gateway.window(args.batches)
            if e["calls"] != g["calls"]:
                raise RuntimeError(f"the two paths made {e['calls']} and {g['calls']} calls: not the same episodes")
            return {"env_ms_per_call": e["ms_per_call"], "gateway_ms_per_call": g["ms_per_call"],
                    "calls": g["calls"]}

        runs = measure.repeat(one, args.repeats, f"{policy}: env path, gateway")
        if profile > 0:
            out_dir = Path(f"/tmp/roll-bench-profile-gateway-{os.getpid()}")
            summary = measure.profile_during(gateway.pids, profile, lambda: gateway.window(1), out_dir=out_dir)
            if summary:
                summary["layers"] = layers(sorted(out_dir.glob("pyspy-*.txt")))
    finally:
        env.close()
        gateway.close()
    return runs, summary


#: where the gateway path's CPU goes: the frame (path part) that marks each layer's code
LAYERS = {
    "openai client (request building, response parsing)": "openai/",
    "  of which its HTTP client (httpx)": "httpx",
    "HTTP server (uvicorn, starlette, fastapi)": "uvicorn/",
    "  of which roll's gateway (validation, template, tokens)": "roll_core/gateway/",
    "the agent's own code (the game)": "roll_env_frozenlake/",
}


def layers(files: list[Path]) -> dict[str, float]:
    """Inclusive share of the profiled CPU samples per layer (see LAYERS), printed as a table."""
    shares = {}
    for name, marker in LAYERS.items():
        top = measure.summarise_stacks(files, top=1, focus=marker)["inclusive"]
        shares[name] = top[0][1] if top else 0.0
    print("  CPU samples by layer (inclusive; the rest: Ray's worker loop, the env loop, the event loop):")
    for name, share in shares.items():
        print(f"    {share:6.1%}  {name}")
    return shares


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=16, help="groups of the scripted (model-free) windows")
    p.add_argument("--model-groups", type=int, default=4, help="groups of the model windows")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=6, help="moves (model calls) per episode at most")
    p.add_argument("--batches", type=int, default=3, help="batches per measured window")
    p.add_argument("--no-model", action="store_true", help="skip the windows with the tiny model as the policy")
    p.add_argument("--profile", type=float, default=0, metavar="S",
                   help="also sample the gateway's env-manager process with py-spy for S seconds")
    args = p.parse_args()
    if args.quick:
        args.groups, args.model_groups, args.batches, args.repeats = 4, 2, 1, min(args.repeats, 2)
    measure.setup_env()
    results = measure.print_header("agent gateway: time per model call, OpenAI client + gateway vs env path", args)
    results["config"] = {k: getattr(args, k) for k in ("groups", "model_groups", "group_size", "max_steps", "batches")}
    print(f"   FrozenLake 4x4 episodes of at most {args.max_steps} moves, {args.groups}x{args.group_size} (scripted) "
          f"and {args.model_groups}x{args.group_size} (model) per batch, {args.batches} batches per window", flush=True)
    measure.start_ray()
    runs, profile = measure_pair("scripted", args, profile=args.profile)
    results["runs"] = {"scripted": runs}
    if profile:
        results["profile"] = profile
    model_runs = []
    if not args.no_model:
        from roll_core.config import load_config, resolve
        from roll_core.workers.infer_group import start_generation

        config = load_config(str(measure.ROOT / "examples" / "frozen_lake" / "grpo.yaml"))
        generation = start_generation(resolve(config, roles=("actor_infer",)), num_workers=1,
                                      options={"num_cpus": 0}, max_batch_size=32)
        try:
            model_runs, _ = measure_pair("model", args, generation)
        finally:
            generation.shutdown()
        results["runs"]["model"] = model_runs
    col = measure.column
    for name, rows in (("scripted", runs), ("tiny model", model_runs)):
        if not rows:
            continue
        env_ms, gateway_ms = col(rows, "env_ms_per_call"), col(rows, "gateway_ms_per_call")
        measure.report(results, f"{name}: env path, ms per call", env_ms, "ms")
        measure.report(results, f"{name}: gateway, ms per call", gateway_ms, "ms")
        measure.report(results, f"{name}: gateway overhead per call", [g - e for g, e in zip(gateway_ms, env_ms)], "ms")
        measure.report(results, f"{name}: gateway / env path, time per call", measure.ratios(gateway_ms, env_ms),
                       ratio=True)
    if args.plot:
        series = {"env path (in-process)": (["scripted", "tiny model"][:1 + bool(model_runs)],
                                            [col(runs, "env_ms_per_call")] + ([col(model_runs, "env_ms_per_call")]
                                                                              if model_runs else [])),
                  "agent via gateway": (["scripted", "tiny model"][:1 + bool(model_runs)],
                                        [col(runs, "gateway_ms_per_call")] + ([col(model_runs, "gateway_ms_per_call")]
                                                                              if model_runs else []))}
        measure.plot_series(args.plot, "Time per model call: OpenAI-API agent via the gateway vs env path",
                            "policy", "ms per call (engine wall time / calls)", series, kind="bar",
                            note=f"{args.repeats} runs, median and min-max; FrozenLake 4x4, 2-core shared machine")
    measure.finish(results, args)


if __name__ == "__main__":
    main()
