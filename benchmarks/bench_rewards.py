"""Reward scoring: rows/s in the driver vs N reward workers, and how much of scoring hides behind generation.

Two figures, each measured side by side in one run:

1. **Throughput** (rows/s) of ``math_verify`` (a cheap rule) and ``code_sandbox`` (each test a
   fresh sandboxed process) on the multi-domain example's rows with correct answers: the driver
   (``RewardScoring``'s threads) against reward worker groups of N ranks (``world_size: N``).
2. **Overlap**: one RLVR batch (roll-tiny generating, code_sandbox scoring) with the responses
   scored as they are generated (roll's rollout) against generating the whole batch first and
   scoring after (roll before reward workers). ``score_wait`` is what the batch still waits for
   scores after its last response.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import measure

DATA = measure.ROOT / "examples" / "rlvr" / "data" / "multi_domain_train.jsonl"
SOLUTIONS = {"add": "def add(a, b):\n    return a + b", "double": "def double(x):\n    return 2 * x",
             "is_even": "def is_even(n):\n    return n % 2 == 0", "last": "def last(xs):\n    return xs[-1]",
             "count_a": "def count_a(s):\n    return s.count('a')", "maximum": "def maximum(xs):\n    return max(xs)",
             "reverse": "def reverse(s):\n    return s[::-1]", "square": "def square(x):\n    return x * x"}


def samples(domain: str, n: int) -> list[tuple]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    if domain == "math":
        pool = [(r["prompt"], f"The answer is {r['solution']}", r["solution"], {}) for r in rows if r["tag"] == "math"]
    else:
        pool = [(r["prompt"], f"```python\n{SOLUTIONS[r['test_case_function']]}\n```", None,
                 {"case_type": r["case_type"], "test_cases": r["test_cases"]}) for r in rows if r["tag"] == "code"]
    return [pool[i % len(pool)] for i in range(n)]


def scoring(reward: str, world_size: int):
    from roll_core.config.rlvr import RewardConfig
    from roll_core.plugins import get_registry
    from roll_core.rollout.rlvr.reward_scoring import RewardScoring

    section = RewardConfig(world_size=world_size or None, infer_batch_size=4)
    run = SimpleNamespace(config=SimpleNamespace(rewards={"d": section}, seed=0),
                          rewards={"d": get_registry().get("reward", reward)}, reward_strategies={}, plugins={})
    return RewardScoring.start(run, worker_options={"num_cpus": 0})


def throughput(reward: str, world_size: int, items: list[tuple]) -> float:
    scorer = scoring(reward, world_size)
    try:
        scorer.score("d", *items[0][:3], 0, items[0][3])  # warm (imports, first sandbox)
        started = time.perf_counter()
        pending = [scorer.submit("d", p, r, ref, 0, row) for p, r, ref, row in items]
        results = [scorer.result(x) for x in pending]
        elapsed = time.perf_counter() - started
    finally:
        scorer.shutdown()
    assert all(c for _, c, _ in results), "every answer here is correct"
    return len(items) / elapsed


def overlap_batch(prompts: int, group: int, new_tokens: int) -> dict[str, float]:
    """One batch streamed (roll) and one generated-then-scored, same requests, back to back."""
    import ray

    from roll_core.config import load_config, resolve
    from roll_core.data import PromptRow
    from roll_core.models.policy_tokenizer import tiny_tokenizer
    from roll_core.rollout.rlvr.rlvr_rollout import RLVRRollout
    from roll_core.strategies.base import SamplingParams
    from roll_core.workers.infer_group import start_generation

    run = resolve(load_config(str(measure.ROOT / "examples" / "rlvr" / "multi_domain.yaml")))
    tokenizer = tiny_tokenizer()
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    code = [r for r in rows if r["tag"] == "code"]
    batch = [PromptRow(index=i, prompt_ids=tuple(tokenizer(r["prompt"])["input_ids"][:64]), text=r["prompt"],
                       reference=None, domain="d", fields={"case_type": r["case_type"], "test_cases": r["test_cases"]})
             for i, r in enumerate((code * prompts)[:prompts])]
    group_gen = start_generation(run, num_workers=1, options={"num_cpus": 0})
    scorer = scoring("code_sandbox", 0)
    try:
        sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)
        rollout = RLVRRollout(scheduler=group_gen.scheduler, tokenizer=tokenizer, rewards=scorer, sampling=sampling,
                              group_size=group, seed=0)
        rollout.generate(batch[:1], "warm")
        started = time.perf_counter()
        streamed = rollout.generate(batch, "streamed")
        t_streamed = time.perf_counter() - started
        # the order before reward workers: the whole batch generated, then every response scored
        started = time.perf_counter()
        from roll_core.strategies.base import GenerationRequest

        requests = [GenerationRequest(f"serial-{i}-{j}", list(r.prompt_ids), sampling) for i, r in enumerate(batch)
                    for j in range(group)]
        outs = ray.get([group_gen.scheduler.generate.remote(q) for q in requests])
        t_gen = time.perf_counter() - started
        flat = [r for r in batch for _ in range(group)]
        for row, out in zip(flat, outs):
            scorer.score("d", row.text, tokenizer.decode(out.token_ids, skip_special_tokens=True), None,
                         len(out.token_ids), row.fields)
        t_serial = time.perf_counter() - started
    finally:
        scorer.shutdown()
        group_gen.shutdown()
    return {"streamed_s": t_streamed, "serial_s": t_serial, "serial_generate_s": t_gen,
            "serial_score_s": t_serial - t_gen, "streamed_score_wait_s": streamed.score_wait_s}


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="reward worker counts (default 1 2 4)")
    args = p.parse_args()
    measure.setup_env()
    measure.start_ray()
    results = measure.print_header("reward scoring: driver vs reward workers; scoring during generation", args)
    sizes = {"math_verify": 40 if args.quick else 400, "code_sandbox": 8 if args.quick else 48}
    for reward, n in sizes.items():
        items = samples("math" if reward == "math_verify" else "code", n)
        counts = [0, *args.workers]

        def one(_: int, reward: str = reward, items: list = items, counts: list = counts) -> dict[str, float]:
            return {f"w{w}": throughput(reward, w, items) for w in counts}

        runs = measure.repeat(one, args.repeats, reward)
        measure.report(results, f"{reward}: driver rows/s", measure.column(runs, "w0"), "rows/s")
        for w in args.workers:
            measure.report(results, f"{reward}: {w} reward workers rows/s", measure.column(runs, f"w{w}"), "rows/s")
            measure.report(results, f"{reward}: {w} reward workers / driver",
                           measure.ratios(measure.column(runs, f"w{w}"), measure.column(runs, "w0")), ratio=True)
    prompts, group, tokens = (4, 2, 8) if args.quick else (16, 4, 24)
    runs = measure.repeat(lambda _: overlap_batch(prompts, group, tokens), args.repeats, "overlap")
    measure.report(results, "batch: scored while generating / generated then scored",
                   measure.ratios(measure.column(runs, "streamed_s"), measure.column(runs, "serial_s")), ratio=True)
    measure.report(results, "batch: score wait after generation, streamed / serial scoring time",
                   measure.ratios(measure.column(runs, "streamed_score_wait_s"), measure.column(runs, "serial_score_s")),
                   ratio=True)
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
