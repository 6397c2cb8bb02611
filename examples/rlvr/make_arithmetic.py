"""Write the synthetic arithmetic task of examples/rlvr: single-digit sums with verifiable answers.

Every pair ``a + b`` with a sum below 10 (55 facts) appears twice in the training file: once in the
``arithmetic`` domain (scored by ``math_verify``: is the number the sum?) and once in the
``number_format`` domain (scored by ``regex``: is the answer a single number?). A randomly
initialised model writes a digit in a few percent of its responses, so the format domain gives
GRPO a reward to climb from step 1, and once the model writes numbers the arithmetic domain
rewards the right ones. The validation file holds the 55 arithmetic prompts once.

Only the standard library; a fixed seed, so the shipped files are reproducible::

    python examples/rlvr/make_arithmetic.py            # rewrites examples/rlvr/data/*.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def facts(max_sum: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(10) for b in range(10) if a + b <= max_sum]


def row(a: int, b: int, tag: str) -> dict[str, str]:
    return {"id": f"{tag}-{a}+{b}", "tag": tag, "prompt": f"{a}+{b}=", "solution": str(a + b)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "data")
    parser.add_argument("--max-sum", type=int, default=9, help="largest sum (default 9: one-digit answers)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pairs = facts(args.max_sum)
    train = [row(a, b, tag) for a, b in pairs for tag in ("arithmetic", "number_format")]
    random.Random(args.seed).shuffle(train)
    val = [row(a, b, "arithmetic") for a, b in pairs]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("arithmetic_train.jsonl", train), ("arithmetic_val.jsonl", val)):
        with open(args.out / name, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        print(f"wrote {len(rows)} rows to {args.out / name}")


if __name__ == "__main__":
    main()
