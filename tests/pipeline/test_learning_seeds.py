"""benchmarks/learning_seeds.py, the program docs/learning.md's over-seeds tables come from, read on
event files written by roll's own tracker: the curve a run logged, a resumed run's second file
taking over the steps it repeats, the summary table and the JSON."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_program():
    sys.path.insert(0, str(BENCHMARKS))  # it imports its sibling measure.py, as when run as a script
    try:
        spec = importlib.util.spec_from_file_location("learning_seeds", BENCHMARKS / "learning_seeds.py")
        program = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(program)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return program


def log_run(run_dir: Path, points: dict[int, float], key: str = "val/success") -> None:
    from roll_core.pipeline.tracking import MetricsTracker

    tracker = MetricsTracker(str(run_dir), stream=io.StringIO())
    for step, value in points.items():
        tracker.log(step, {key: value, "train/loss": 1.0 / (step + 1)})
    tracker.close()


def test_curves_summaries_and_json_from_a_runs_event_files(tmp_path, capsys):
    program = load_program()
    out = tmp_path / "runs"
    log_run(out / "base_s42", {0: 0.125, 5: 0.375, 10: 0.25, 15: 0.5})  # float32-exact values
    log_run(out / "base_s43", {0: 0.25, 5: 0.25, 10: 0.5, 15: 0.5})
    # a resumed run writes a second event file that repeats step 10: the later file's value is kept
    log_run(out / "base_s43", {10: 0.625, 15: 0.75})

    assert program.curve(out / "base_s42") == [(0, 0.125), (5, 0.375), (10, 0.25), (15, 0.5)]
    assert program.curve(out / "base_s42", "val/accuracy/addition") == []  # a key the run never logged
    summary = program.summarise(program.curve(out / "base_s42"))
    assert summary["final"] == 0.5 and summary["best"] == 0.5 and summary["best_step"] == 15
    assert summary["last3"] == (0.375 + 0.25 + 0.5) / 3

    results = tmp_path / "results.json"
    code = program.main(["examples/frozen_lake/grpo.yaml", "--out", str(out), "--setting", "base", "--seeds", "42",
                         "43", "--no-run", "--json", str(results)])
    assert code == 0
    records = json.loads(results.read_text())
    assert records["base_s43"]["curve"] == [[0, 0.25], [5, 0.25], [10, 0.625], [15, 0.75]]
    assert records["base_s43"]["last3"] == (0.25 + 0.625 + 0.75) / 3
    table = capsys.readouterr().out
    # start 0.125 and 0.25, final 0.5 and 0.75: means 0.19 and 0.62, sample std 0.09 and 0.18
    assert "| base | 2 | 0.19 ± 0.09 (0.12-0.25) | 0.62 ± 0.18 (0.50-0.75) |" in table
