"""hf_infer's decode cache: generated tokens/s with the static cache against the growing one, on CPU.

One process, one engine per side built from the same weights, the same batch for both: a
scheduler-sized batch of bench_generate's mix (64 requests, prompts of 32-512 random tokens,
16-48 new tokens, temperature 1, a seed per request), so the two sides generate the same tokens.
Each repeat runs the dynamic side then the static side back to back (interleaved, the same load).
On CUDA the static side also replays captured decode steps; benchmarks/gpu_check.py measures that.

Usage: python benchmarks/bench_decode_cache.py [--repeats 5] [--quick] [--model roll-tiny] [--threads 1]
"""

from __future__ import annotations

import time

import measure


def batch(args) -> list:
    import numpy as np

    from roll_core.strategies.base import GenerationRequest, SamplingParams

    rng = np.random.default_rng(0)
    out = []
    for i in range(args.requests):
        length = int(rng.integers(args.prompt_min, args.prompt_max + 1))
        sampling = SamplingParams(max_new_tokens=int(rng.integers(args.new_min, args.new_max + 1)), temperature=1.0,
                                  seed=i)
        out.append(GenerationRequest(f"r{i}", rng.integers(3, 2000, length).tolist(), sampling))
    return out


def main() -> None:
    p = measure.parser(__doc__.split("\n\n")[0], repeats=5)
    p.add_argument("--model", default="roll-tiny")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt-min", type=int, default=32)
    p.add_argument("--prompt-max", type=int, default=512)
    p.add_argument("--new-min", type=int, default=16)
    p.add_argument("--new-max", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    if args.quick:
        args.requests, args.prompt_max, args.new_max, args.repeats = 8, 64, 16, 1
    measure.setup_env()
    import torch

    from roll_core.strategies.hf_infer import HFInferStrategy

    torch.set_num_threads(args.threads)
    results = measure.print_header("hf_infer decode cache: static / dynamic", args)
    engines = {name: HFInferStrategy(args.model, seed=0, device=args.device, max_batch_size=args.requests,
                                     decode_cache=name) for name in ("dynamic", "static")}
    requests = batch(args)
    for engine in engines.values():  # warm-up (and, on CUDA, the captures)
        engine.generate(requests[: min(4, len(requests))])
    outputs = {}

    def run(_i: int) -> dict[str, float]:
        out = {}
        for name, engine in engines.items():
            started = time.perf_counter()
            outputs[name] = engine.generate(requests)
            seconds = time.perf_counter() - started
            out[f"{name}_tokens_per_s"] = sum(len(o.token_ids) for o in outputs[name]) / seconds
        out["load_1m"] = __import__("os").getloadavg()[0]
        return out

    runs = measure.repeat(run, args.repeats, "dynamic then static")
    same = sum(a.token_ids == b.token_ids for a, b in zip(outputs["dynamic"], outputs["static"]))
    print(f"   same tokens in {same} of {len(requests)} responses", flush=True)
    results["same_responses"] = same
    for name in engines:
        measure.report(results, f"{name} tokens/s", measure.column(runs, f"{name}_tokens_per_s"))
    measure.report(results, "load average (1 min)", measure.column(runs, "load_1m"))
    measure.report(results, "static / dynamic", measure.ratios(measure.column(runs, "static_tokens_per_s"),
                                                               measure.column(runs, "dynamic_tokens_per_s")),
                   ratio=True)
    measure.finish(results, args)


if __name__ == "__main__":
    main()
