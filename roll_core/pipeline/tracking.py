"""Metrics of a run: a tracker (TensorBoard, wandb), a one-line progress report per step, a learning curve.

``track_with`` picks the tracker from :data:`TRACKERS` and ``tracker_kwargs`` are its settings
(checked by :func:`check_tracker` when the config is resolved, before anything starts);
``stdout`` keeps only the progress line. The tracker keeps the whole scalar history in memory (a
few hundred numbers per step), so the curve can be redrawn at every evaluation and the history
survives a resume through :meth:`MetricsTracker.state_dict` (the curve of a resumed run shows the
steps before the kill too).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

from roll_core.errors import ConfigError, did_you_mean

#: (label in the progress line, metric key, format); missing keys are left out of the line
PROGRESS_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("val_success", "val/success", "{:.2f}"),
    ("success", "train/success", "{:.2f}"),
    ("reward", "train/reward_mean", "{:+.3f}"),
    ("resp_len", "train/response_length", "{:.1f}"),
    ("loss", "actor/pg_loss", "{:+.4f}"),
)

#: series drawn by the learning curve: (metric key, label, axis, style) — axis 0: success, 1: reward
CURVE_SERIES: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    ("val/success", "validation success", 0, dict(marker="o", linewidth=2.2, color="tab:blue")),
    ("train/success", "train success", 0, dict(linewidth=1.2, alpha=0.7, color="tab:green")),
    ("train/accuracy", "train accuracy", 0, dict(linewidth=1.2, alpha=0.7, color="tab:green")),
    ("train/reward_mean", "train reward mean", 1,
     dict(linewidth=1.0, alpha=0.5, color="tab:orange", linestyle="--")),
)


#: said in the progress line of a step during which a lock-step round timed out
LOCKSTEP_TIMEOUT_NOTE = ("a lock-step generation round timed out: batches depend on timing from here, so this run "
                         "no longer repeats to the digit (docs/architecture.md, reproducible runs)")
#: said in the progress line of a step whose advantages are all zero (why its loss is +0.0000)
ZERO_ADVANTAGE_NOTE = ("every advantage is 0 (the rewards within each group are all equal): this batch "
                       "has nothing to learn from")


def no_learning_signal(metrics: Mapping[str, Any]) -> bool:
    """Whether a training step's advantages were all zero (``critic/advantages/{min,max}``): with
    GRPO-style group normalisation, every group's responses earned the same reward."""
    low, high = metrics.get("critic/advantages/min"), metrics.get("critic/advantages/max")
    if not (_is_scalar(low) and _is_scalar(high)):
        return False
    return max(abs(float(low)), abs(float(high))) < 1e-8


class TensorBoardWriter:
    """Scalars as TensorBoard event files under ``log_dir`` (default: ``logging_dir``)."""

    #: SummaryWriter's settings a config may give in tracker_kwargs
    SETTINGS = ("log_dir", "comment", "purge_step", "max_queue", "flush_secs", "filename_suffix")
    requires = "tensorboard"

    def __init__(self, logging_dir: str, run_name: str, config: Mapping[str, Any], **kwargs: Any):
        from torch.utils.tensorboard import SummaryWriter

        log_dir = kwargs.pop("log_dir", None) or logging_dir
        os.makedirs(log_dir, exist_ok=True)
        self.writer = SummaryWriter(log_dir=log_dir, **kwargs)

    def add(self, scalars: Mapping[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbWriter:
    """A Weights & Biases run (``wandb.init(**tracker_kwargs)``; offline with ``mode: offline``)."""

    SETTINGS = ("project", "entity", "name", "group", "job_type", "tags", "notes", "mode", "dir", "id",
                "resume", "anonymous", "save_code")
    requires = "wandb"

    def __init__(self, logging_dir: str, run_name: str, config: Mapping[str, Any], **kwargs: Any):
        import wandb

        settings = {"project": "roll", "name": run_name, "dir": logging_dir, "config": dict(config), **kwargs}
        os.makedirs(settings["dir"], exist_ok=True)
        self.run = wandb.init(**settings)

    def add(self, scalars: Mapping[str, float], step: int) -> None:
        self.run.log(dict(scalars), step=step)

    def close(self) -> None:
        self.run.finish()


#: track_with -> the writer class (None: the progress line alone)
TRACKERS: dict[str, type | None] = {"tensorboard": TensorBoardWriter, "wandb": WandbWriter, "stdout": None}


def check_tracker(track_with: str, tracker_kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for a tracker that cannot start: unknown setting, library missing."""
    if track_with not in TRACKERS:
        raise ConfigError(f"track_with: roll has no {track_with!r} tracker; use one of {', '.join(TRACKERS)}.")
    writer = TRACKERS[track_with]
    accepted: tuple[str, ...] = writer.SETTINGS if writer is not None else ()
    for key in tracker_kwargs:
        if key not in accepted:
            raise ConfigError(
                f"tracker_kwargs.{key}: not a setting of the {track_with} tracker.{did_you_mean(key, accepted)} "
                f"It takes: {', '.join(accepted) or 'nothing'}."
            )
    if writer is not None and importlib.util.find_spec(writer.requires) is None:
        raise ConfigError(f"track_with: {track_with} needs the {writer.requires} package: pip install {writer.requires}")


def best_point(points: list[tuple[int, float]]) -> tuple[int, float]:
    """The (step, value) with the highest value, the earliest step among equals: validation moves by
    noise, so a later tie is not a better model (the run's summary, ``save_best`` and
    benchmarks/learning_seeds.py all use this rule)."""
    return max(points, key=lambda p: (p[1], -p[0]))


class MetricsTracker:
    """A tracker (``track_with``) + in-memory history + progress line + learning-curve PNG."""

    def __init__(self, logging_dir: str | None, *, title: str = "", stream=None, track_with: str = "tensorboard",
                 tracker_kwargs: Mapping[str, Any] | None = None, run_name: str = "roll",
                 config: Mapping[str, Any] | None = None):
        self.logging_dir = logging_dir
        self.title = title
        self.stream = stream or sys.stdout
        self.history: list[dict[str, float]] = []  # one dict per logged step, with "step"
        self._writer = None
        writer = TRACKERS[track_with]
        if logging_dir and writer is not None:
            self._writer = writer(logging_dir, run_name, config or {}, **dict(tracker_kwargs or {}))

    # -- logging -------------------------------------------------------------------------
    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, float]:
        """Record the scalars of ``step`` (non-finite and non-numeric values are skipped)."""
        scalars = {k: float(v) for k, v in metrics.items() if _is_scalar(v)}
        if self._writer is not None:
            self._writer.add(scalars, step)
        entry = {"step": float(step), **scalars}
        if self.history and self.history[-1]["step"] == step:  # validation added to the same step
            self.history[-1].update(entry)
        else:
            self.history.append(entry)
        return scalars

    def progress_line(self, step: int, max_steps: int, metrics: Mapping[str, Any],
                      timings: Mapping[str, float]) -> str:
        """``step 3/40 | val_success 0.25 | success 0.31 | ... | time 4.1s (rollout 2.0 ...)``."""
        width = len(str(max_steps))
        parts = [f"step {step:>{width}}/{max_steps}"]
        for label, key, fmt in PROGRESS_FIELDS:
            if key in metrics and _is_scalar(metrics[key]):
                parts.append(f"{label} {fmt.format(float(metrics[key]))}")
        if _is_scalar(metrics.get("rollout/filtered_groups")):  # dynamic sampling: what the filter cost
            refilled = float(metrics.get("rollout/filtered_groups/refilled", 0.0))  # unfilled_batch: fill
            parts.append(f"filtered {float(metrics['rollout/filtered_groups']):.0f} groups "
                         f"({float(metrics.get('rollout/groups_per_trained_group', 1.0)):.2f} per trained, "
                         f"+{float(metrics.get('rollout/filter_extra_time', 0.0)):.1f}s"
                         + (f", {refilled:.0f} refilled)" if refilled else ")"))
        if no_learning_signal(metrics):
            parts.append(ZERO_ADVANTAGE_NOTE)
        if float(metrics.get("rollout/lockstep_timeouts", 0.0) or 0.0) > 0:
            parts.append(LOCKSTEP_TIMEOUT_NOTE)
        total = timings.get("step", sum(timings.values()))
        phases = " ".join(f"{k} {v:.1f}" for k, v in timings.items() if k != "step")
        parts.append(f"time {total:.1f}s ({phases})" if phases else f"time {total:.1f}s")
        return " | ".join(parts)

    def print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def best(self, key: str = "val/success") -> tuple[int, float] | None:
        """(step, value) of the first validation reaching the maximum of ``key``; None without one."""
        points = [(int(e["step"]), e[key]) for e in self.history if key in e]
        return best_point(points) if points else None

    def validation_summary(self, key: str = "val/success") -> str | None:
        """``validation success: final 0.62 (step 70), best 0.69 (step 40), 0.44 at step 0``, or None
        without a validation. Best is the first step reaching the maximum: validation moves by noise
        between evaluations, so the final figure alone under- or overstates a run."""
        points = [(int(e["step"]), e[key]) for e in self.history if key in e]
        if not points:
            return None
        (first_step, first), (last_step, last) = points[0], points[-1]
        best_step, best = self.best(key)
        label = "validation success" if key == "val/success" else key
        line = f"{label}: final {last:.2f} (step {last_step}), best {best:.2f} (step {best_step})"
        return line + (f", {first:.2f} at step {first_step}" if len(points) > 1 else "")

    # -- learning curve ------------------------------------------------------------------
    def plot(self, path: str) -> str | None:
        """Draw success and reward against the step into ``path`` (PNG); None when nothing to draw."""
        series = []
        for key, label, axis, style in CURVE_SERIES:
            points = [(e["step"], e[key]) for e in self.history if key in e]
            if points:
                series.append((label, axis, style, points))
        if not series:
            return None
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib import pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        reward_ax = None
        lines = []
        for label, axis, style, points in series:
            xs, ys = zip(*points)
            target = ax
            if axis == 1:
                reward_ax = reward_ax or ax.twinx()
                target = reward_ax
            lines += target.plot(xs, ys, label=label, **style)
        ax.set_xlabel("training step")
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if reward_ax is not None:
            reward_ax.set_ylabel("reward")
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8)
        if self.title:
            ax.set_title(self.title, fontsize=10)
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp.png"
        fig.savefig(tmp)
        plt.close(fig)
        os.replace(tmp, path)
        return path

    # -- resume --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"history": [dict(e) for e in self.history]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = [dict(e) for e in state.get("history", [])]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _is_scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return math.isfinite(value)
    item = getattr(value, "item", None)  # 0-d tensors / numpy scalars
    if item is not None and getattr(value, "ndim", 1) == 0:
        try:
            return math.isfinite(float(item()))
        except (TypeError, ValueError):
            return False
    return False
