"""What a FrozenLake policy gets wrong: every decision of a ``roll rollout --dump`` file, classified.

    roll rollout examples/frozen_lake/grpo.yaml --policy model --val --dump val.jsonl \\
        pretrain=<run>/checkpoints/warmup_sft actor_infer.generating_args.temperature=0
    python benchmarks/frozen_lake_mistakes.py val.jsonl [--model <run>/checkpoints/warmup_sft]

Each turn's grid is read back from its prompt and compared with the env's own solver
(``optimal_first_moves``): a move is *optimal* when it starts a shortest hole-free walk; a mistake walks
into a hole (and whether that hole lay towards the goal), off the grid, or off every shortest walk.
A *detour* map is one whose shortest walk is longer than the straight (Manhattan) distance: the
decisions where planning, not a look at the next cell, is needed.

With ``--model``, every decision is also scored by that checkpoint: the probability it gives the
optimal moves at temperature 1 (the move is one token after ``<answer>``). It says whether a
greedy mistake is a near tie, which the samples of one GRPO group see both ways (a success and
a failure: a gradient at that state), or a confident one: then a GRPO group
of ``--group-size`` samples from that state seldom holds an optimal move, every sample fails alike,
and group-normalised advantages are 0 (no gradient where the mistake is).
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
    """The last user message of a turn's prompt, as rows of cell symbols (without the env's
    ``show_neighbours`` line, which starts with an action word)."""
    text = prompt.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]
    rows = [row.split() for row in text.strip("\n").split("\n")]
    return [row for row in rows if row[:1] and row[0] not in FrozenLakeEnv.action_lookup]


def distance(a: tuple[int, int], b: tuple[int, int]) -> int:
    """Moves between two cells with no hole in the way (Manhattan)."""
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def desc_of(rows: list[list[str]]) -> list[str]:
    """Rows of cell symbols as the env's gymnasium map letters (S, F, H, G)."""
    return ["".join(LETTERS.get(cell, "F") for cell in row) for row in rows]


def classify(rows: list[list[str]], word: str) -> list[str]:
    """The labels of one decision (``optimal`` or the mistakes it makes, plus ``detour``)."""
    desc = desc_of(rows)
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


def move_probabilities(model_dir: str, prompts: list[str]) -> list[dict[str, float]]:
    """Each prompt's next-move distribution under ``model_dir`` (softmax over the move tokens)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    words = list(FrozenLakeEnv.action_words.values())
    ids = [tokenizer(f"<answer>{w}</answer>", add_special_tokens=False).input_ids for w in words]
    opening = ids[0][:-2]
    if any(len(i) != len(opening) + 2 or i[: len(opening)] != opening for i in ids):
        raise SystemExit(f"{model_dir}: the moves are not one token each after <answer> ({ids}); cannot score")
    move_ids = [i[len(opening)] for i in ids]
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            x = tokenizer(prompt, add_special_tokens=False).input_ids + opening
            logp = torch.log_softmax(model(torch.tensor([x])).logits[0, -1].float(), -1)
            probs = torch.softmax(logp[move_ids], -1)  # renormalised over the four moves
            out.append(dict(zip(words, probs.tolist(), strict=True)))
    return out


def optimal_words(rows: list[list[str]]) -> list[str]:
    """The moves that begin a shortest hole-free walk from P, as words."""
    desc = desc_of(rows)
    return [FrozenLakeEnv.action_words[a] for a in optimal_first_moves(desc, find(desc, "S"))]


def confidence_report(decisions: list[tuple[str, list[str]]], probs: list[dict[str, float]], group_size: int) -> None:
    """How much probability each kind of decision gives the optimal moves, and what a group would sample."""
    kinds: dict[str, list[float]] = {}
    for (prompt, labels), p in zip(decisions, probs, strict=True):
        p_opt = sum(p[w] for w in optimal_words(grid_of(prompt)))
        kind = "optimal" if "optimal" in labels else next((lb for lb in labels if lb != "detour"), "other")
        kinds.setdefault(kind, []).append(p_opt)
    print(f"probability of an optimal move (temperature 1), and the chance that a group of {group_size} "
          "samples from the state holds none:")
    for kind, values in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        v = sorted(values)
        none = sum((1 - x) ** group_size for x in v) / len(v)
        print(f"  {kind} ({len(v)}): median {v[len(v) // 2]:.3f}, mean {sum(v) / len(v):.3f}, "
              f"< 0.05: {sum(x < 0.05 for x in v)}, < 0.25: {sum(x < 0.25 for x in v)}; no optimal move in the group: {none:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", help="a `roll rollout --dump` JSON-lines file of FrozenLake episodes")
    parser.add_argument("--model", help="a checkpoint to score every decision with (probability of the optimal moves)")
    parser.add_argument("--group-size", type=int, default=8, help="samples a GRPO group draws from one state")
    args = parser.parse_args(argv)
    scored: list[tuple[str, list[str]]] = []
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
                scored.append((turn["prompt"], labels))
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
    if args.model:
        confidence_report(scored, move_probabilities(args.model, [p for p, _ in scored]), args.group_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
