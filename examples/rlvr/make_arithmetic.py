"""Write the synthetic arithmetic task of examples/rlvr: single-digit sums with verifiable answers.

The 55 facts ``a + b`` with a sum below 10 are repeated so that every sum has ``--per-sum`` rows
(12 by default: sum 0 has one fact, repeated 12 times; sum 9 has ten, cycled through), so a
policy that ignores the prompt cannot do better than 1/10 on the training rows. Each row appears
in two domains: ``arithmetic`` (scored by ``math_verify``: is the number the sum?) and
``number_format`` (scored by ``regex``: is the answer a single digit?). The validation file holds
the 55 arithmetic facts once each (there, answering 9 to everything scores 10/55 = 0.18).

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


def row(a: int, b: int, tag: str, copy: int = 0) -> dict[str, str]:
    suffix = f"#{copy}" if copy else ""
    return {"id": f"{tag}-{a}+{b}{suffix}", "tag": tag, "prompt": f"{a}+{b}=", "solution": str(a + b)}


def balanced(pairs: list[tuple[int, int]], per_sum: int) -> list[tuple[int, int, int]]:
    """``per_sum`` rows for every sum, cycling through its facts: ``(a, b, copy number)``.

    Sums are not equally common among the facts (9 has ten, 0 has one), and a policy that ignores
    the prompt would be paid for answering the most common one; with every sum equally frequent,
    no single answer beats 1/10, and the only way up is to read the two digits.
    """
    by_sum: dict[int, list[tuple[int, int]]] = {}
    for a, b in pairs:
        by_sum.setdefault(a + b, []).append((a, b))
    out = []
    for facts_of_sum in by_sum.values():
        for k in range(per_sum):
            a, b = facts_of_sum[k % len(facts_of_sum)]
            out.append((a, b, k // len(facts_of_sum)))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "data")
    parser.add_argument("--max-sum", type=int, default=9, help="largest sum (default 9: one-digit answers)")
    parser.add_argument("--per-sum", type=int, default=12,
                        help="training rows per sum and domain (default 12: every sum equally frequent)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pairs = facts(args.max_sum)
    train = [row(a, b, tag, copy) for a, b, copy in balanced(pairs, args.per_sum)
             for tag in ("arithmetic", "number_format")]
    random.Random(args.seed).shuffle(train)
    val = [row(a, b, "arithmetic") for a, b in pairs]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("arithmetic_train.jsonl", train), ("arithmetic_val.jsonl", val)):
        with open(args.out / name, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        print(f"wrote {len(rows)} rows to {args.out / name}")


if __name__ == "__main__":
    main()
