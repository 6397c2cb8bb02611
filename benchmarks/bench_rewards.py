"""Reward scoring: rows/s in the driver vs N reward workers, and how much of scoring hides behind generation.

Two figures, each measured side by side in one run:

1. **Throughput** (rows/s) of ``math_verify`` (a cheap rule) and ``code_sandbox`` (each test a
   fresh sandboxed process) on the multi-domain example's rows with correct answers: the driver
   (``RewardScoring``'s threads) against reward worker groups of N ranks (``world_size: N``).
2. **Overlap**: one RLVR batch (roll-tiny generating in chunks of 8, code_sandbox scoring) with
   each chunk of the round scored as it is done (roll's rollout) against the same round generated
   whole and scored after (roll between issues 33 and 36's streaming). The overlap is measured by
   timestamps: from the first response handed to the scorer to the last response's arrival, as a
   share of the batch's generation time. ``score_wait`` is what the batch still waits for scores
   after its last response.
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


class _Stamped:
    """The rollout's scorer, noting when the first response was handed to it (scoring began)."""

    def __init__(self, scorer):
        self.scorer, self.first = scorer, None

    def submit(self, *args):
        self.first = self.first or time.perf_counter()
        return self.scorer.submit(*args)

    def result(self, pending):
        return self.scorer.result(pending)


def overlap_batch(prompts: int, group: int, new_tokens: int, chunk: int) -> dict[str, float]:
    """One batch streamed (roll: each chunk of the round scored as it is done) and the same requests
    as one round generated whole, then scored (several at once), back to back."""
    import ray

    from roll_core.config import load_config, resolve
    from roll_core.data import PromptRow
    from roll_core.models.policy_tokenizer import tiny_tokenizer
    from roll_core.rollout.rlvr.rlvr_rollout import RLVRRollout
    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.workers.infer_group import start_generation

    run = resolve(load_config(str(measure.ROOT / "examples" / "rlvr" / "multi_domain.yaml")))
    tokenizer = tiny_tokenizer()
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    code = [r for r in rows if r["tag"] == "code"]
    batch = [PromptRow(index=i, prompt_ids=tuple(tokenizer(r["prompt"])["input_ids"][:64]), text=r["prompt"],
                       reference=None, domain="d", fields={"case_type": r["case_type"], "test_cases": r["test_cases"]})
             for i, r in enumerate((code * prompts)[:prompts])]
    group_gen = start_generation(run, num_workers=1, options={"num_cpus": 0}, max_batch_size=chunk)
    scorer = scoring("code_sandbox", 0)
    try:
        sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)
        stamped = _Stamped(scorer)
        rollout = RLVRRollout(scheduler=group_gen.scheduler, tokenizer=tokenizer, rewards=stamped, sampling=sampling,
                              group_size=group, seed=0)
        rollout.generate(batch[:1], "warm")
        stamped.first = None
        started = time.perf_counter()
        streamed = rollout.generate(batch, "streamed")
        t_streamed = time.perf_counter() - started
        generating = streamed.generated_at - started
        overlap = max(0.0, streamed.generated_at - stamped.first)
        # the order before this change: the round generated whole, then every response scored (several at once)
        requests = [GenerationRequest(f"round-{i}-{j}", list(r.prompt_ids), sampling) for i, r in enumerate(batch)
                    for j in range(group)]
        started = time.perf_counter()
        outs = ray.get(group_gen.scheduler.generate_all.remote(requests))
        t_gen = time.perf_counter() - started
        flat = [r for r in batch for _ in range(group)]
        pending = [scorer.submit("d", row.text, tokenizer.decode(out.token_ids, skip_special_tokens=True), None,
                                 len(out.token_ids), row.fields) for row, out in zip(flat, outs)]
        for x in pending:
            scorer.result(x)
        t_round = time.perf_counter() - started
    finally:
        scorer.shutdown()
        group_gen.shutdown()
    return {"streamed_s": t_streamed, "round_s": t_round, "round_generate_s": t_gen,
            "round_score_s": t_round - t_gen, "streamed_generate_s": generating, "streamed_overlap_s": overlap,
            "streamed_score_wait_s": streamed.score_wait_s}


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="reward worker counts (default 1 2 4)")
    p.add_argument("--overlap-only", action="store_true", help="only figure 2 (scoring during generation)")
    args = p.parse_args()
    measure.setup_env()
    measure.start_ray()
    results = measure.print_header("reward scoring: driver vs reward workers; scoring during generation", args)
    sizes = {"math_verify": 40 if args.quick else 400, "code_sandbox": 8 if args.quick else 48}
    for reward, n in ({} if args.overlap_only else sizes).items():
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
    prompts, group, tokens, chunk = (4, 2, 8, 2) if args.quick else (16, 4, 24, 8)
    runs = measure.repeat(lambda _: overlap_batch(prompts, group, tokens, chunk), args.repeats, "overlap")
    measure.report(results, "batch: scored while generating / round generated then scored",
                   measure.ratios(measure.column(runs, "streamed_s"), measure.column(runs, "round_s")), ratio=True)
    measure.report(results, "batch: share of generation time with scoring running (timestamps)",
                   measure.ratios(measure.column(runs, "streamed_overlap_s"),
                                  measure.column(runs, "streamed_generate_s")), ratio=True)
    measure.report(results, "batch: score wait after generation, streamed / round's scoring time",
                   measure.ratios(measure.column(runs, "streamed_score_wait_s"), measure.column(runs, "round_score_s")),
                   ratio=True)
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
