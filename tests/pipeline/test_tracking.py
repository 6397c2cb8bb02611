"""track_with / tracker_kwargs: each tracker really records the metrics; bad settings fail before the run."""

from __future__ import annotations

import glob
import os

import pytest

from roll_core.config import validate_config
from roll_core.errors import ConfigError
from roll_core.pipeline.tracking import MetricsTracker, check_tracker


def scalars_in(event_dir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(event_dir)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_writes_event_files_where_tracker_kwargs_say(tmp_path):
    tracker = MetricsTracker(str(tmp_path / "logs"), track_with="tensorboard",
                             tracker_kwargs={"log_dir": str(tmp_path / "tb"), "filename_suffix": ".roll"})
    tracker.log(1, {"train/success": 0.5, "note": "text is skipped"})
    tracker.log(2, {"train/success": 0.75})
    tracker.close()
    assert glob.glob(str(tmp_path / "tb" / "*.roll"))
    assert scalars_in(str(tmp_path / "tb"))["train/success"] == [(1, 0.5), (2, 0.75)]
    assert not os.path.exists(tmp_path / "logs") or not os.listdir(tmp_path / "logs")


def test_stdout_keeps_only_the_history_and_progress_line(tmp_path):
    tracker = MetricsTracker(str(tmp_path), track_with="stdout")
    tracker.log(1, {"train/success": 0.5})
    tracker.close()
    assert tracker.history == [{"step": 1.0, "train/success": 0.5}] and os.listdir(tmp_path) == []


def test_wandb_offline_run_records_the_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = MetricsTracker(str(tmp_path), track_with="wandb", run_name="exp1",
                             tracker_kwargs={"mode": "offline", "project": "roll-test", "tags": ["ci"]},
                             config={"seed": 3})
    tracker.log(1, {"train/success": 0.5})
    tracker.log(2, {"train/success": 0.25})
    tracker.log(2, {"val/success": 0.75})  # validation lands on the same step
    run = tracker._writer.run
    assert run.name == "exp1" and run.project == "roll-test" and run.config["seed"] == 3
    assert run.summary["train/success"] == 0.5  # a step is committed when the next one starts
    tracker.log(3, {"train/success": 0.125})
    assert run.summary["train/success"] == 0.25 and run.summary["val/success"] == 0.75
    tracker.close()
    assert glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))


def test_tracker_settings_are_checked_before_anything_starts(monkeypatch):
    with pytest.raises(ConfigError, match=r"tracker_kwargs.log_dri: not a setting of the tensorboard tracker. "
                                          r"Did you mean 'log_dir'"):
        check_tracker("tensorboard", {"log_dri": "x"})
    with pytest.raises(ConfigError, match="It takes: nothing"):
        check_tracker("stdout", {"project": "x"})
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install wandb"):
        check_tracker("wandb", {"project": "p"})
    with pytest.raises(ConfigError, match="swanlab is not supported"):
        validate_config({"sequence_length": 64, "track_with": "swanlab"})


def test_the_validation_summary_reports_best_next_to_final(tmp_path):
    """The run's last lines say the final and the best validation figure (the first step reaching
    it) and where validation started; nothing without a validation."""
    tracker = MetricsTracker(str(tmp_path), track_with="stdout")
    assert tracker.validation_summary() is None
    for step, value in [(0, 0.44), (5, 0.36), (40, 0.69), (55, 0.69), (70, 0.62)]:
        tracker.log(step, {"train/success": 0.5})
        tracker.log(step, {"val/success": value})
    assert tracker.validation_summary() == (
        "validation success: final 0.62 (step 70), best 0.69 (step 40), 0.44 at step 0")
    resumed = MetricsTracker(str(tmp_path), track_with="stdout")
    resumed.load_state_dict(tracker.state_dict())
    assert resumed.validation_summary() == tracker.validation_summary()
