"""The agentic rollout as the training loop uses it: env trajectories as training rows.

:class:`AgenticRollout` wraps the engine's :class:`~roll_core.rollout.engine.scheduler.RolloutScheduler`
(which serves complete groups of trajectories) in the :class:`~roll_core.rollout.contract.TrainingRollout`
contract: a batch of ``rollout_batch_size`` trajectories becomes one dict of rows in canonical
order (the order env loops finish in is timing; a resumed run must see the same rows).
"""

from __future__ import annotations

from typing import Any

from roll_core.rollout.contract import StepBatch


def canonical_order(data: dict[str, Any]) -> list[int]:
    """Row order independent of which env finished first: by group, episode, member, turn."""
    keys = list(zip(data["group_id"], data["episode_id"], data["traj_id"],
                    data["step"].tolist() if "step" in data else [0] * len(data["traj_id"])))
    return sorted(range(len(keys)), key=keys.__getitem__)


def batch_dict(batch: Any) -> dict[str, Any]:
    """A :class:`RolloutBatch` as one dict of tensors and per-row lists, in canonical row order."""
    import torch

    from roll_core.distributed.dispatch import take_rows

    data = {**batch.tensors, **batch.non_tensors}
    order = canonical_order(data)
    if order == list(range(len(order))):
        return data
    return take_rows(data, torch.tensor(order, dtype=torch.long), len(order))


def trajectory_summary(trajectories: list[Any], prefix: str) -> dict[str, float]:
    """Success, reward and lengths per trajectory (the same for trajectory- and step-wise rows)."""
    n = max(len(trajectories), 1)
    valid = [float(t.metrics["action_is_valid"]) for t in trajectories if "action_is_valid" in t.metrics]
    summary = {
        f"{prefix}/success": sum(float(t.metrics.get("success", 0.0)) for t in trajectories) / n,
        f"{prefix}/reward_mean": sum(float(t.episode_reward) for t in trajectories) / n,
        f"{prefix}/response_length": sum(float(t.response_length) for t in trajectories)
        / max(sum(t.num_steps for t in trajectories), 1),
        f"{prefix}/num_turns": sum(float(t.num_steps) for t in trajectories) / n,
    }
    if valid:  # envs report it; agents only when their code does
        summary[f"{prefix}/action_is_valid"] = sum(valid) / len(valid)
    return summary


class AgenticRollout:
    """:class:`TrainingRollout` over one env manager's :class:`RolloutScheduler`."""

    def __init__(self, scheduler: Any, batch_size: int):
        self.scheduler = scheduler
        self.batch_size = int(batch_size)

    def next_batch(self, step: int) -> StepBatch:
        batch = self.scheduler.get_batch(self.batch_size)
        data = batch_dict(batch)
        data["infer_log_probs"] = data.pop("infer_logprobs")
        metrics: dict[str, float] = dict(batch.metrics)
        metrics.update(trajectory_summary(batch.trajectories, "train"))
        metrics["train/samples"] = float(len(data["traj_id"]))  # rows: episodes, or turns when step-wise
        return StepBatch(data=data, metrics=metrics, items=batch)

    def pause(self) -> None:
        self.scheduler.pause()

    def resume(self) -> None:
        self.scheduler.resume()

    def set_version(self, version: int) -> None:
        self.scheduler.set_version(version)

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state)

    def shutdown(self) -> None:
        self.scheduler.shutdown()
