"""Write examples/rlvr/data/multi_domain_{train,val}.jsonl: math, code and judged rows for
multi_domain.yaml (small tasks written for roll; rerun to regenerate, the files are shipped).

* ``math`` rows (tag ``math``): two-number sums and products, the answer checked by math_verify;
* ``code`` rows (tag ``code``): a function to write, with ROLL's code-sandbox columns
  (``case_type: assert``, ``test_cases``) run by the code_sandbox reward;
* ``judge`` rows (tag ``judge``): short factual questions with a reference answer, judged by llm_judge.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).parent / "data"

CODE_TASKS = [
    ("add", "a, b", "the sum of a and b", [("2, 3", "5"), ("-1, 1", "0"), ("10, 32", "42")]),
    ("double", "x", "twice x", [("0", "0"), ("4", "8"), ("-3", "-6")]),
    ("is_even", "n", "True when n is even, else False", [("2", "True"), ("7", "False"), ("0", "True")]),
    ("last", "xs", "the last element of the list xs", [("[1, 2, 3]", "3"), ("['a']", "'a'")]),
    ("count_a", "s", "how many times the letter 'a' occurs in s", [("'banana'", "3"), ("''", "0")]),
    ("maximum", "xs", "the largest number of the non-empty list xs", [("[3, 9, 2]", "9"), ("[-5]", "-5")]),
    ("reverse", "s", "the string s reversed", [("'abc'", "'cba'"), ("''", "''")]),
    ("square", "x", "x squared", [("3", "9"), ("-2", "4"), ("0", "0")]),
]

JUDGE_QA = [
    ("What is the capital of France?", "Paris"), ("How many legs does a spider have?", "8"),
    ("What colour is the sky on a clear day?", "blue"), ("What is the chemical symbol of water?", "H2O"),
    ("How many days are in a week?", "7"), ("Which planet do we live on?", "Earth"),
    ("What is the opposite of hot?", "cold"), ("How many minutes are in an hour?", "60"),
]


def code_row(name: str, args: str, what: str, cases: list[tuple[str, str]], i: int) -> dict:
    prompt = f"Write a Python function {name}({args}) that returns {what}. Reply with the code only."
    tests = [{"assert_code": f"assert {name}({call}) == {want}"} for call, want in cases]
    return {"id": f"code-{name}-{i}", "tag": "code", "prompt": prompt, "case_type": "assert",
            "test_cases": tests, "test_case_function": name}


def main() -> None:
    rng = random.Random(0)
    rows: list[dict] = []
    for i in range(24):
        a, b = rng.randint(2, 19), rng.randint(2, 9)
        op, value = ("plus", a + b) if i % 2 else ("times", a * b)
        rows.append({"id": f"math-{i}", "tag": "math", "prompt": f"What is {a} {op} {b}? Answer with the number.",
                     "solution": str(value)})
    rows += [code_row(*task, i=0) for task in CODE_TASKS]
    rows += [{"id": f"judge-{i}", "tag": "judge", "prompt": q + " Answer in one word.", "solution": a}
             for i, (q, a) in enumerate(JUDGE_QA)]
    rng.shuffle(rows)
    val = [r for r in rows if r["tag"] == "math"][:4] + [r for r in rows if r["tag"] != "math"][:4]
    OUT.mkdir(exist_ok=True)
    for name, part in (("multi_domain_train", rows), ("multi_domain_val", val)):
        with open(OUT / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for row in part:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
