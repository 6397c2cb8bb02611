"""benchmarks/frozen_lake_mistakes.py, behind docs/learning.md's account of what the demo's clone
gets wrong: each decision classified against the env's solver, on hand-made grids and a dump."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def program():
    spec = importlib.util.spec_from_file_location("frozen_lake_mistakes", BENCHMARKS / "frozen_lake_mistakes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GRID = " - - P -\n O - O -\n - - - O\n - G O -"  # the hole below P; the goal down and left


def prompt(grid: str) -> str:
    return f"<|im_start|>system\nFrozenLake<|im_end|>\n<|im_start|>user\n{grid}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("word, labels", [
    ("Down", ["into a hole towards the goal"]),
    ("Left", ["optimal"]),
    ("Up", ["off the grid"]),
    ("Right", ["off every shortest walk"]),
    ("Jump", ["invalid"]),
])
def test_each_move_is_classified_against_the_solver(program, word, labels):
    assert program.classify(program.grid_of(prompt(GRID)), word) == labels


def test_the_neighbours_line_is_not_read_as_a_row(program):
    with_line = GRID + "\nLeft - Down O Right - Up #"  # show_neighbours: true, the demo since 2026-11-28
    assert program.grid_of(prompt(with_line)) == program.grid_of(prompt(GRID))
    assert program.classify(program.grid_of(prompt(with_line)), "Down") == ["into a hole towards the goal"]


def test_a_detour_map_is_marked(program):
    walled = " P O -\n - O G\n - - -"  # straight distance 3, the walk round the holes 5
    assert program.classify(program.grid_of(prompt(walled)), "Down") == ["detour", "optimal"]
    assert program.classify(program.grid_of(prompt(walled)), "Right") == ["detour", "into a hole towards the goal"]


def test_a_dump_is_summarised(program, tmp_path, capsys):
    episodes = [
        {"metrics": {"success": 0.0}, "num_steps": 1,
         "turns": [{"prompt": prompt(GRID), "response": "<answer>Down</answer>"}]},
        {"metrics": {"success": 1.0}, "num_steps": 2,
         "turns": [{"prompt": prompt(GRID), "response": "<answer>left</answer>"},
                   {"prompt": prompt(GRID.replace("- P", "P -")), "response": "<answer>Down</answer>"}]},
    ]
    dump = tmp_path / "val.jsonl"
    dump.write_text("".join(json.dumps(e) + "\n" for e in episodes))
    assert program.main([str(dump)]) == 0
    out = capsys.readouterr().out
    assert "3 decisions; 1 failed episodes, 1 of them on their first move" in out
    assert "optimal: 2 (66.7%)" in out and "into a hole towards the goal: 1 (33.3%)" in out
    assert "into a hole by move: Down 1" in out


def test_confidence_says_how_often_a_group_samples_no_optimal_move(program, capsys):
    assert program.optimal_words(program.grid_of(prompt(GRID))) == ["Left"]
    scored = [(prompt(GRID), ["into a hole towards the goal"]), (prompt(GRID), ["optimal"]),
              (prompt(GRID), ["optimal"])]
    probs = [{"Left": 0.25, "Down": 0.75, "Right": 0.0, "Up": 0.0},
             {"Left": 0.9, "Down": 0.1, "Right": 0.0, "Up": 0.0},
             {"Left": 0.02, "Down": 0.0, "Right": 0.98, "Up": 0.0}]
    program.confidence_report(scored, probs, group_size=2)
    out = capsys.readouterr().out
    # (1 - 0.25)^2 = 0.5625; the optimal decisions: (0.1^2 + 0.98^2) / 2 = 0.485
    assert "into a hole towards the goal (1): median 0.250, mean 0.250, < 0.05: 0, < 0.25: 0; " \
           "no optimal move in the group: 0.56" in out
    assert "optimal (2): median 0.900, mean 0.460, < 0.05: 1, < 0.25: 1; no optimal move in the group: 0.49" in out


def test_a_checkpoint_scores_the_four_moves(program, tmp_path):
    from roll_core.models.tiny import build_tiny_model

    model_dir = build_tiny_model("roll-tiny", seed=0, out_dir=str(tmp_path / "model"))
    (probs,) = program.move_probabilities(model_dir, [prompt(GRID)])
    assert sorted(probs) == ["Down", "Left", "Right", "Up"]
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5) and all(0 < p < 1 for p in probs.values())
