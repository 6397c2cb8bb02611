"""Throughput of hf_infer vs Hugging Face ``generate`` (a benchmark, not a test; not collected).

    .venv/bin/python tests/strategies/bench_generate.py [--model roll-tiny] [--batch 64] [--new 32]

Both sample at temperature 1 (no top-k / top-p unless asked) with a KV cache, on the same model
and the same mixed-length prompts; the figure is generated tokens per second of wall time,
median of ``--repeats`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.hf_infer import HFInferStrategy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="roll-tiny")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()

    strategy = HFInferStrategy(args.model, cache_dir=args.cache_dir, seed=0,
                               max_batch_size=args.batch)
    tok, model = strategy.tokenizer, strategy.model
    texts = [f"State:\n{'_P_O' * (1 + i % 7)}\nWhat is your next action? Turn {i}" for i in range(args.batch)]
    prompts = [tok(tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                           add_generation_prompt=True))["input_ids"] for t in texts]
    sp = SamplingParams(max_new_tokens=args.new, temperature=1.0, top_k=args.top_k, top_p=args.top_p)
    requests = [GenerationRequest(str(i), p, sp) for i, p in enumerate(prompts)]

    def ours() -> int:
        return sum(len(o.token_ids) for o in strategy.generate(requests))

    tok.padding_side = "left"
    enc = tok.pad({"input_ids": prompts}, return_tensors="pt")

    def hf() -> int:
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=args.new, do_sample=True, temperature=1.0,
                                 top_k=args.top_k or None, top_p=args.top_p, pad_token_id=tok.pad_token_id)
        gen = out[:, enc["input_ids"].shape[1]:]
        return int((gen != tok.pad_token_id).sum())

    for name, fn in (("hf_infer", ours), ("HF generate", hf)):
        fn()
        rates = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            n = fn()
            rates.append(n / (time.perf_counter() - t0))
        print(f"{name:12s} {statistics.median(rates):8.0f} tok/s  (runs: {', '.join(f'{r:.0f}' for r in rates)})")
    print(f"model={args.model} batch={args.batch} new={args.new} threads={torch.get_num_threads()}")


if __name__ == "__main__":
    main()
