"""Partial rollout: generated tokens thrown away at weight syncs, keep-and-continue vs regenerate.

One ``hf_infer`` worker (roll-tiny, CPU) behind roll's :class:`GenerateScheduler` (threads stand in
for the Ray actor, as in tests/strategies/test_partial_rollout.py) serves one batch of requests
whose ``max_new_tokens`` are long-tailed (Pareto, alpha 1.5, over 16-512 tokens), temperature 1.
While it generates, a weight sync (the same weights, the next version: the cost of a sync is not
what is measured) comes every ``--sync-every`` seconds, up to ``--max-syncs`` times, as async
training's syncs do. For each ``partial_rollout`` setting: tokens generated in all, tokens thrown
away at the syncs, the share thrown away, and the wall time until every request is answered.

Usage: python benchmarks/bench_partial_rollout.py [--repeats 1] [--quick] [--json FILE]
"""

from __future__ import annotations

import asyncio
import time

import measure

from roll_core.testing.infer_threads import ThreadWorker


def lengths(args, seed: int) -> list[int]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [int(min(args.max_len, args.min_len * (1 + rng.pareto(1.5)))) for _ in range(args.requests)]


def run(strategy, args, partial: bool, seed: int) -> dict[str, float]:
    import numpy as np

    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.workers.generate_scheduler import GenerateScheduler

    weights = {k: v.clone() for k, v in strategy.model.state_dict().items()}
    rng = np.random.default_rng(seed)
    requests = [GenerationRequest(f"s{seed}-r{i}", rng.integers(10, 200, 16).tolist(),
                                  SamplingParams(max_new_tokens=n, temperature=1.0, seed=seed * 1000 + i))
                for i, n in enumerate(lengths(args, seed))]

    async def main():
        gen = GenerateScheduler([ThreadWorker(strategy)], max_batch_size=args.requests, max_wait_s=0.0,
                                partial_rollout=partial)
        started = time.perf_counter()
        pending = asyncio.gather(*(gen.generate(r) for r in requests))
        syncs = 0
        while syncs < args.max_syncs:
            try:
                await asyncio.wait_for(asyncio.shield(pending), args.sync_every)
                break
            except TimeoutError:
                syncs += 1
                await gen.update_weights(weights, strategy.policy_version + 1)
        outputs = await pending
        stats = gen.stats()
        return {"wall_s": time.perf_counter() - started, "syncs": float(syncs),
                "generated": float(stats["generated_tokens"]), "discarded": float(stats["discarded_tokens"]),
                "kept": float(stats["kept_tokens"]), "answered": float(sum(len(o.token_ids) for o in outputs)),
                "mixed": float(sum(len(set(o.versions())) > 1 for o in outputs))}
    return asyncio.run(main())


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0], repeats=1)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--min-len", type=int, default=16)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--sync-every", type=float, default=1.0, help="seconds between weight syncs")
    p.add_argument("--max-syncs", type=int, default=8)
    args = p.parse_args()
    if args.quick:
        args.requests, args.max_len, args.sync_every, args.max_syncs = 6, 96, 0.3, 3
    measure.setup_env()
    import torch

    from roll_core.strategies.hf_infer import HFInferStrategy

    torch.set_num_threads(1)
    results = measure.print_header("Partial rollout: tokens thrown away at weight syncs", args)
    strategy = HFInferStrategy("roll-tiny", seed=0, max_batch_size=args.requests)
    print(f"   max_new_tokens per request (seed 0): {sorted(lengths(args, 0))}", flush=True)
    runs = {}
    for partial in (False, True):
        label = "keep-and-continue" if partial else "regenerate"
        runs[label] = measure.repeat(lambda i, partial=partial: run(strategy, args, partial, seed=i),
                                     args.repeats, label)
    for label, rs in runs.items():
        for key, unit in (("generated", "tokens"), ("discarded", "tokens"), ("wall_s", "s"), ("syncs", "")):
            measure.report(results, f"{label} {key}", measure.column(rs, key), unit)
        measure.report(results, f"{label} discarded share",
                       measure.ratios(measure.column(rs, "discarded"), measure.column(rs, "generated")), ratio=True)
    if args.plot:
        keys = ("generated", "discarded")
        measure.plot_series(args.plot, "Tokens generated and thrown away at weight syncs", "", "tokens", {
            label: (list(keys), [measure.column(rs, k) for k in keys]) for label, rs in runs.items()}, kind="bar")
    measure.finish(results, args)


if __name__ == "__main__":
    main()
