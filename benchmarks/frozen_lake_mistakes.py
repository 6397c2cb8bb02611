"""What a FrozenLake policy gets wrong: every decision of a ``roll rollout --dump`` file, classified.

    roll rollout examples/frozen_lake/grpo.yaml --policy model --val --dump val.jsonl \\
        pretrain=<run>/checkpoints/warmup_sft actor_infer.generating_args.temperature=0
    python benchmarks/frozen_lake_mistakes.py val.jsonl

Each turn's grid is read back from its prompt and compared with the env's own solver
(``optimal_first_moves``): a move is *optimal* when it starts a shortest hole-free walk; a mistake walks
into a hole (and whether that hole lay towards the goal), off the grid, or off every shortest walk.
A *detour* map is one whose shortest walk is longer than the straight (Manhattan) distance: the
decisions where planning, not a look at the next cell, is needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from roll_env_frozenlake.env import FrozenLakeEnv
from roll_env_frozenlake.maps import MOVES, find, optimal_first_moves, shortest_path

from roll_core.envs.parser import ActionParser

#: the env's own parser (``<answer>...</answer>``, any case) and action words
PARSER = ActionParser(FrozenLakeEnv.action_lookup)
#: rendered symbol -> gymnasium letter (anything else is ice)
LETTERS = {"P": "S", "O": "H", "G": "G"}


def grid_of(prompt: str) -> list[list[str]]:
    """The last user message of a turn's prompt, as rows of cell symbols."""
    text = prompt.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]
    return [row.split() for row in text.strip("\n").split("\n")]


def distance(a: tuple[int, int], b: tuple[int, int]) -> int:
    """Moves between two cells with no hole in the way (Manhattan)."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def classify(rows: list[list[str]], word: str) -> list[str]:
    """The labels of one decision (``optimal`` or the mistakes it makes, plus ``detour``)."""
    desc = ["".join(LETTERS.get(cell, "F") for cell in row) for row in rows]
    pos, goal = find(desc, "S"), find(desc, "G")
    path = shortest_path(desc, pos)
    labels = ["detour"] if path is not None and len(path) > distance(pos, goal) else []
    action = FrozenLakeEnv.action_lookup.get(word)
    if action is None:
        return [*labels, "invalid"]
    dr, dc = MOVES[action]
    nxt = (pos[0] + dr, pos[1] + dc)
    if not (0 <= nxt[0] < len(desc) and 0 <= nxt[1] < len(desc[0])):
        return [*labels, "off the grid"]
    if desc[nxt[0]][nxt[1]] == "H":
        closer = distance(nxt, goal) < distance(pos, goal)
        return [*labels, "into a hole towards the goal" if closer else "into a hole away from the goal"]
    return [*labels, "optimal" if action in optimal_first_moves(desc, pos) else "off every shortest walk"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", help="a `roll rollout --dump` JSON-lines file of FrozenLake episodes")
    args = parser.parse_args(argv)
    counts: Counter[str] = Counter()
    by_word: Counter[str] = Counter()
    first_turn_failures = failures = 0
    with open(args.dump, encoding="utf-8") as f:
        for line in f:
            episode = json.loads(line)
            for turn in episode["turns"]:
                parsed = PARSER.parse(turn["response"])
                word = FrozenLakeEnv.action_words.get(parsed.action, "")  # the canonical word, or "" if invalid
                labels = classify(grid_of(turn["prompt"]), word)
                counts.update(["decisions", *labels])
                if any(label.startswith("into a hole") for label in labels):
                    by_word[word] += 1
            if not episode["metrics"].get("success"):
                failures += 1
                first_turn_failures += episode["num_steps"] == 1
    decisions = counts.pop("decisions", 0)
    print(f"{decisions} decisions; {failures} failed episodes, {first_turn_failures} of them on their first move")
    for label, n in counts.most_common():
        print(f"  {label}: {n} ({n / max(decisions, 1):.1%})")
    print("  into a hole by move: " + ", ".join(f"{w} {n}" for w, n in by_word.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
