"""Rollout metrics with ROLL's names (``env/{tag}/success``, ``time/get_batch``, ...), from trajectories.

Plain Python (no torch): the CLI prints these and the pipeline logs them to tensorboard.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from roll_core.chat.trajectory import Trajectory

#: per-trajectory env metrics averaged per tag as ``env/{tag}/{name}`` (with any others trajectories carry,
#: such as an agent's own metrics and its tool-call counts)
ENV_METRICS = ("success", "action_is_valid", "action_is_effective", "num_steps")
#: drop reasons that are not lost work (a late duplicate delivery of an already-counted episode)
NOT_DROPS = ("duplicate",)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def staleness_metrics(trajectories: Sequence[Trajectory], version: int) -> dict[str, float]:
    """How many policy versions each generated turn lags ``version`` (the weights being trained).

    ``rollout/staleness/max`` and ``/mean`` over turns, and the histogram as one scalar per lag:
    ``rollout/staleness/lag_{d}`` is the fraction of the batch's turns generated d versions ago.
    """
    lags = [version - turn.version for traj in trajectories for turn in traj.turns]
    if not lags:
        return {}
    counts: dict[int, int] = defaultdict(int)
    for lag in lags:
        counts[lag] += 1
    metrics = {"rollout/staleness/max": float(max(lags)), "rollout/staleness/mean": _mean(lags)}
    for lag in range(min(0, min(lags)), max(lags) + 1):
        metrics[f"rollout/staleness/lag_{lag}"] = counts[lag] / len(lags)
    return metrics


def token_version_metrics(token_versions: Iterable[Sequence[int]], version: int) -> dict[str, float]:
    """The version mix of a batch's generated tokens, one list per response (partial rollout).

    ``rollout/token_staleness/lag_{d}``: the fraction of generated tokens sampled ``d`` versions
    before ``version`` (the weights being trained), ``/mean`` and ``/max``;
    ``rollout/mixed_version_responses``: the fraction of responses whose tokens span two or more
    versions (a weight sync interrupted them and they were continued).
    """
    counts: dict[int, int] = defaultdict(int)
    responses = mixed = 0
    for versions in token_versions:
        responses += 1
        mixed += len(set(versions)) > 1
        for v in versions:
            counts[version - int(v)] += 1
    total = sum(counts.values())
    if not total:
        return {}
    metrics = {"rollout/token_staleness/mean": sum(d * c for d, c in counts.items()) / total,
               "rollout/token_staleness/max": float(max(counts)),
               "rollout/mixed_version_responses": mixed / responses}
    for lag in range(min(0, min(counts)), max(counts) + 1):
        metrics[f"rollout/token_staleness/lag_{lag}"] = counts[lag] / total
    return metrics


def rollout_metrics(trajectories: Sequence[Trajectory], elapsed_s: float,
                    drops: Mapping[str, int] | None = None, version: int | None = None) -> dict[str, float]:
    """Metrics of one batch: env metrics per tag, lengths, throughput, dropped trajectories, and
    (given the ``version`` being trained) the staleness of its turns."""
    metrics: dict[str, float] = {}
    by_tag: dict[str, list[Trajectory]] = defaultdict(list)
    for traj in trajectories:
        by_tag[traj.tag].append(traj)
    for tag, trajs in sorted(by_tag.items()):
        names = {name for t in trajs for name in t.metrics}  # agents report their own metrics
        for name in (*[n for n in ENV_METRICS if n in names], *sorted(names - set(ENV_METRICS))):
            metrics[f"env/{tag}/{name}"] = _mean([t.metrics[name] for t in trajs if name in t.metrics])
        metrics[f"env/{tag}/episode_reward"] = _mean([t.episode_reward for t in trajs])
    lengths = [t.response_length for t in trajectories]
    steps = sum(t.num_steps for t in trajectories)
    elapsed = max(elapsed_s, 1e-9)
    metrics.update({
        "rollout/response_length/mean": _mean(lengths),
        "rollout/response_length/max": float(max(lengths, default=0)),
        "rollout/response_length/min": float(min(lengths, default=0)),
        "rollout/episode_reward/mean": _mean([t.episode_reward for t in trajectories]),
        "rollout/num_steps/mean": _mean([t.num_steps for t in trajectories]),
        "rollout/truncated_ratio": _mean([float(t.truncated) for t in trajectories]),
        "rollout/trajectories": float(len(trajectories)),
        "rollout/env_steps": float(steps),
        "rollout/trajectories_per_s": len(trajectories) / elapsed,
        "rollout/env_steps_per_s": steps / elapsed,
        "rollout/template_mismatch": float(sum(t.template_mismatches for t in trajectories)),
        "rollout/policy_version/min": float(min((t.min_version for t in trajectories), default=-1)),
        "rollout/policy_version/max": float(max((t.max_version for t in trajectories), default=-1)),
        "time/get_batch": float(elapsed_s),
    })
    if version is not None:
        metrics.update(staleness_metrics(trajectories, version))
        metrics.update(token_version_metrics((turn.versions() for t in trajectories for turn in t.turns), version))
    drops = {k: v for k, v in (drops or {}).items() if k not in NOT_DROPS}
    metrics["rollout/dropped_trajectories"] = float(sum(drops.values()))
    for reason, count in sorted(drops.items()):
        metrics[f"rollout/dropped_trajectories/{reason}"] = float(count)
    return metrics
