"""Write the addition task of examples/rlvr/smollm2_lora.yaml: ``What is 23 plus 17?`` with a
verifiable answer, for a real pretrained chat model (SmolLM2-135M-Instruct).

Operands are 2..49, so answers have one or two digits. The held-out validation prompts are pairs
that never occur in training (neither order). Each validation prompt appears twice: tagged
``addition`` (scored by ``math_verify``: is the final number the sum?) and tagged ``answer_format``
(scored by ``regex``: is the response only the number?), so the validation reward is the mean of
correctness and format and each part is reported on its own (``val/accuracy/addition``,
``val/accuracy/answer_format``). Training has each pair under both tags too, so a run pays for
the format by drawing ``answer_format`` rows (``domain_interleave_probs`` in the config says how
often); a run that draws ``addition`` only is paid for correct sums alone.

Only the standard library; a fixed seed, so the shipped files are reproducible::

    python examples/rlvr/make_addition.py            # rewrites examples/rlvr/data/addition_*.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROMPT = "What is {a} plus {b}? Reply with just the number."


def row(a: int, b: int, tag: str, prompt: str = PROMPT) -> dict[str, str]:
    return {"id": f"{tag}-{a}+{b}", "tag": tag, "prompt": prompt.format(a=a, b=b), "solution": str(a + b)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "data")
    parser.add_argument("--low", type=int, default=2)
    parser.add_argument("--high", type=int, default=49)
    parser.add_argument("--val", type=int, default=32, help="held-out pairs (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt", default=PROMPT, help="the question, with {a} and {b} (default: %(default)r)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    pairs = [(a, b) for a in range(args.low, args.high + 1) for b in range(a, args.high + 1)]
    rng.shuffle(pairs)
    held_out, train = pairs[: args.val], pairs[args.val :]
    train_rows = []
    for a, b in train:
        if rng.random() < 0.5:  # both orders appear in training
            a, b = b, a
        train_rows.extend(row(a, b, tag, args.prompt) for tag in ("addition", "answer_format"))
    val_rows = [row(a, b, tag, args.prompt) for a, b in held_out for tag in ("addition", "answer_format")]
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("addition_train.jsonl", train_rows), ("addition_val.jsonl", val_rows)):
        with open(args.out / name, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"wrote {len(rows)} rows to {args.out / name}")


if __name__ == "__main__":
    main()
