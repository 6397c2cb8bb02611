"""What a Sokoban policy gets wrong: every decision of a ``roll rollout --dump`` file, classified.

    roll rollout examples/sokoban/starpo.yaml --policy model --val --dump val.jsonl \\
        pretrain=<run>/checkpoints/warmup_sft warmup_sft.steps=0
    python benchmarks/sokoban_mistakes.py val.jsonl [more.jsonl ...]

Each turn's grid is read back from its prompt and the move is played on it and compared with the
env's own solver (``solve_level``): a move is *optimal* when it starts a shortest solution;
otherwise it is *blocked* (into a wall or an immovable box: the grid does not change), a *dead
push* (the level was solvable and no longer is), or a *detour* (still solvable, no shorter). A
*repeat* is a blocked move made again at once on the same grid: a policy that was never shown a
blocked move (solver-played demonstrations have none) has nothing to tell it the second try
fails too. Each failed episode is put down to its first mistake of the worst kind (dead push, then
repeats, then the rest).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections import Counter

from roll_env_sokoban.env import SokobanEnv
from roll_env_sokoban.levels import SYMBOLS, Level, parse_level
from roll_env_sokoban.solver import solve_level

LABELS = ("optimal", "blocked", "repeat", "dead push", "detour", "invalid")


def grid_of(prompt: str) -> Level:
    """The last user message of a turn's prompt (the grid, one symbol per cell) as a level."""
    text = prompt.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]
    rows = ["".join(row.split()) for row in text.strip("\n").split("\n") if row.strip()]
    return parse_level([row for row in rows if set(row) <= set(SYMBOLS)])


@functools.cache
def moves_to_solve(level: Level) -> int | None:
    """Length of the shortest solution; None when the level can no longer be solved."""
    plan = solve_level(level)
    return None if plan is None else len(plan)


@functools.lru_cache(maxsize=1)
def _env() -> SokobanEnv:
    return SokobanEnv()


def play(level: Level, word: str) -> Level:
    """The level after one move, played by the env itself (so its rules are the env's)."""
    env = _env()
    env.reset(options={"level": level})
    env.step(env.parser.format(word))
    return env.level


def classify(level: Level, word: str | None, previous: tuple[Level, str | None] | None) -> str:
    """The label of one decision (see the module's docstring)."""
    if word is None:
        return "invalid"
    after = play(level, word)
    if after == level:  # the env leaves a blocked move's level as it was
        repeated = previous is not None and previous == (level, word)
        return "repeat" if repeated else "blocked"
    before_n, after_n = moves_to_solve(level), moves_to_solve(after)
    if before_n is not None and after_n is None:
        return "dead push"
    if before_n is not None and after_n == before_n - 1:
        return "optimal"
    return "detour"


def episode_labels(trajectory: dict) -> list[str]:
    """Every decision of one dumped episode, labelled."""
    labels, previous = [], None
    for turn in trajectory["turns"]:
        level = grid_of(turn["prompt"])
        parsed = _env().parser.parse(turn["response"])
        word = parsed.action if parsed.is_valid else None
        labels.append(classify(level, word, previous))
        previous = (level, word)
    return labels


def cause(labels: list[str]) -> str:
    """What a failed episode is put down to: its worst mistake."""
    for kind in ("dead push", "repeat", "blocked", "detour", "invalid"):
        if kind in labels:
            return kind
    return "too slow"  # every move optimal, yet out of steps: the level needs more than max_steps


def summarise(trajectories: list[dict]) -> dict:
    decisions: Counter[str] = Counter()
    failed_decisions: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for trajectory in trajectories:
        labels = episode_labels(trajectory)
        decisions.update(labels)
        if not trajectory["metrics"].get("success"):
            failed_decisions.update(labels)
            causes[cause(labels)] += 1
    n = len(trajectories)
    return {
        "episodes": n,
        "success": sum(bool(t["metrics"].get("success")) for t in trajectories) / max(n, 1),
        "decisions": {k: decisions[k] for k in LABELS},
        "decisions_in_failed_episodes": {k: failed_decisions[k] for k in LABELS},
        "failed_episodes_by_cause": dict(causes.most_common()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", nargs="+", help="JSON-lines files from roll rollout --dump")
    parser.add_argument("--json", help="write the summaries here")
    args = parser.parse_args(argv)
    out = {}
    for path in args.dumps:
        with open(path, encoding="utf-8") as f:
            trajectories = [json.loads(line) for line in f if line.strip()]
        summary = out[path] = summarise(trajectories)
        total = sum(summary["decisions"].values()) or 1
        print(f"{path}: {summary['episodes']} episodes, success {summary['success']:.3f}")
        print("  decisions: " + ", ".join(f"{k} {v} ({v / total:.0%})" for k, v in summary["decisions"].items()))
        print("  failed episodes by their worst mistake: "
              + ", ".join(f"{k} {v}" for k, v in summary["failed_episodes_by_cause"].items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
