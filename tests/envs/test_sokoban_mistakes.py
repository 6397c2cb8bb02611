"""benchmarks/sokoban_mistakes.py, behind docs/learning.md's account of what the Sokoban clone gets
wrong: each decision played by the env and classified against its solver, on a hand-made level."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# box at row 2, target up and to its right; shortest solution 5 moves, starting Down
# (Down, Right pushes the box right, Down, Right, Up pushes it onto the target)
ROOM = ["######", "#P_O_#", "#_X__#", "#____#", "######"]
# the player one step right: Down now pushes the box against the bottom wall, where it cannot go up
BESIDE = ["######", "#_PO_#", "#_X__#", "#____#", "######"]


@pytest.fixture(scope="module")
def program():
    spec = importlib.util.spec_from_file_location("sokoban_mistakes", BENCHMARKS / "sokoban_mistakes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prompt(rows: list[str], spaced: bool = True) -> str:
    """A turn's prompt as the env manager writes it; the example renders one token per cell (" #")."""
    grid = "\n".join("".join(f" {c}" for c in row) if spaced else row for row in rows)
    return f"<|im_start|>system\nSokoban<|im_end|>\n<|im_start|>user\n{grid}<|im_end|>\n<|im_start|>assistant\n"


def test_the_grid_is_read_back_in_either_rendering(program):
    assert program.grid_of(prompt(ROOM)) == program.grid_of(prompt(ROOM, spaced=False))
    assert program.moves_to_solve(program.grid_of(prompt(ROOM))) == 5


@pytest.mark.parametrize("rows, word, label", [
    (ROOM, "Down", "optimal"),
    (ROOM, "Up", "blocked"),
    (ROOM, "Left", "blocked"),
    (ROOM, "Right", "detour"),
    (BESIDE, "Down", "dead push"),
    (ROOM, None, "invalid"),
])
def test_each_move_is_classified_against_the_solver(program, rows, word, label):
    assert program.classify(program.grid_of(prompt(rows)), word, None) == label


def test_a_blocked_move_made_again_on_the_same_grid_is_a_repeat(program):
    level = program.grid_of(prompt(ROOM))
    assert program.classify(level, "Up", (level, "Up")) == "repeat"
    assert program.classify(level, "Up", (level, "Left")) == "blocked"  # a different blocked move


def test_a_dump_is_summarised_and_failures_put_down_to_the_worst_mistake(program, tmp_path, capsys):
    def turn(rows, word):
        return {"prompt": prompt(rows), "response": f"<answer>{word}</answer>"}

    episodes = [  # stuck against the wall, then a detour and a dead push: the dead push is the cause
        {"metrics": {"success": 0.0}, "turns": [turn(ROOM, "Up"), turn(ROOM, "Up"), turn(ROOM, "Right"),
                                                turn(BESIDE, "Down")]},
        {"metrics": {"success": 0.0}, "turns": [turn(ROOM, "Left"), turn(ROOM, "Left"), turn(ROOM, "Down")]},
        {"metrics": {"success": 1.0}, "turns": [turn(ROOM, "Down")]},
    ]
    dump = tmp_path / "val.jsonl"
    dump.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    program.main([str(dump), "--json", str(tmp_path / "out.json")])
    summary = json.loads((tmp_path / "out.json").read_text())[str(dump)]
    assert summary["success"] == pytest.approx(1 / 3)
    assert summary["decisions"] == {"optimal": 2, "blocked": 2, "repeat": 2, "dead push": 1, "detour": 1,
                                    "invalid": 0}
    assert summary["failed_episodes_by_cause"] == {"dead push": 1, "repeat": 1}
    assert "failed episodes by their worst mistake: dead push 1, repeat 1" in capsys.readouterr().out
