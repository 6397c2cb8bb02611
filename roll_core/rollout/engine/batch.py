"""Trajectories -> the training batch: right-padded tensors plus per-row lists.

Trajectory-wise (one row per episode, StarPO) or step-wise (one row per turn, GiGPO), both in the
conventions of docs/algorithms.md §0: ``response_mask`` is 1 only on generated tokens, per-token
quantities are label-aligned ``[B, L-1]``, and the reward sits on the row's last real token.

Keys (tensors): ``input_ids``, ``attention_mask``, ``response_mask``, ``position_ids`` ``[B, L]``;
``infer_logprobs`` ``[B, L-1]`` (0 on prompt positions); ``scores`` ``[B, L]`` (the row's reward on
its last token); ``episode_scores`` ``[B]``; ``policy_version_min`` / ``policy_version_max``
``[B]``; ``token_versions`` ``[B, L-1]`` (the policy version that sampled each response token, -1
elsewhere: partial rollout mixes versions in one response); ``response_length`` / ``num_steps``
``[B]``; step-wise adds ``step``, ``step_scores``.
Keys (lists): ``traj_id``, ``traj_group_id``, ``tag``, ``group_id``, ``episode_id``, ``seed``,
``end_reason``, ``env_metrics``; step-wise adds ``state_hash``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import torch

from roll_core.chat.trajectory import Trajectory, state_hash

Row = tuple[list[int], list[int], list[float]]


@dataclass
class RolloutBatch:
    """What ``RolloutScheduler.get_batch`` returns: tensors, per-row lists, metrics, trajectories."""

    tensors: dict[str, torch.Tensor]
    non_tensors: dict[str, list[Any]]
    trajectories: list[Trajectory]
    metrics: dict[str, float] = field(default_factory=dict)
    granularity: str = "trajectory"

    def __len__(self) -> int:
        return int(self.tensors["input_ids"].shape[0])

    def __getitem__(self, key: str) -> Any:
        return self.tensors[key] if key in self.tensors else self.non_tensors[key]

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    def keys(self) -> list[str]:
        return [*self.tensors, *self.non_tensors]


def collate(rows: Sequence[Row], rewards: Sequence[float], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad rows of ``(ids, mask, logprobs)`` into the batch tensors.

    The rows are joined per key and scattered through the attention mask in one assignment each,
    through numpy: ``torch.tensor`` of a Python list costs 7x numpy's conversion per element, and
    a ``torch.tensor`` per row and key was a third of the driver's time per batch at 1024
    trajectories (docs/benchmarks.md, section 1).
    """
    batch = len(rows)
    lengths = torch.tensor([len(ids) for ids, _, _ in rows], dtype=torch.long)
    length = int(lengths.max())
    attention_mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    real = attention_mask.bool()  # row-major order of the real positions = the rows joined
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    response_mask = torch.zeros((batch, length), dtype=torch.long)
    token_logprobs = torch.zeros((batch, length), dtype=torch.float32)
    input_ids[real] = _joined((ids for ids, _, _ in rows), np.int64)
    response_mask[real] = _joined((mask for _, mask, _ in rows), np.int64)
    token_logprobs[real] = _joined((lp for _, _, lp in rows), np.float32)
    scores = torch.zeros((batch, length), dtype=torch.float32)
    scores[torch.arange(batch), (lengths - 1).clamp(min=0)] = torch.tensor(list(rewards), dtype=torch.float32)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0) * attention_mask
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "position_ids": position_ids,
        "infer_logprobs": token_logprobs[:, 1:].contiguous(),
        "scores": scores,
    }


def label_token_versions(response_mask: torch.Tensor, versions: Sequence[Sequence[int]]) -> torch.Tensor:
    """``[B, L-1]`` label-aligned: row ``b``'s ``versions`` on its response tokens, in order; -1 elsewhere."""
    mask = response_mask[:, 1:].bool()
    counts = mask.sum(-1).tolist()
    for b, (n, v) in enumerate(zip(counts, versions)):
        if n != len(v):
            raise ValueError(f"row {b} has {n} response tokens but {len(v)} token versions; every generated "
                             "token needs the version that sampled it")
    out = torch.full(mask.shape, -1, dtype=torch.long)
    out[mask] = _joined(versions, np.int64)
    return out


def _joined(lists: Iterable[Sequence[Any]], dtype: Any) -> torch.Tensor:
    """The concatenation of ``lists`` as a 1-D tensor of numpy ``dtype``."""
    return torch.from_numpy(np.fromiter(chain.from_iterable(lists), dtype=dtype))


def _common(trajs: Sequence[Trajectory]) -> tuple[dict[str, torch.Tensor], dict[str, list[Any]]]:
    tensors = {
        "episode_scores": torch.tensor([t.episode_reward for t in trajs], dtype=torch.float32),
        "policy_version_min": torch.tensor([t.min_version for t in trajs], dtype=torch.long),
        "policy_version_max": torch.tensor([t.max_version for t in trajs], dtype=torch.long),
        "num_steps": torch.tensor([t.num_steps for t in trajs], dtype=torch.long),
    }
    lists = {
        "traj_id": [t.traj_id for t in trajs],
        "traj_group_id": [t.traj_group_id for t in trajs],
        "tag": [t.tag for t in trajs],
        "group_id": [t.group_id for t in trajs],
        "episode_id": [t.episode_id for t in trajs],
        "seed": [t.seed for t in trajs],
        "end_reason": [t.end_reason for t in trajs],
        "env_metrics": [dict(t.metrics) for t in trajs],
    }
    return tensors, lists


def trajectory_batch(trajs: Sequence[Trajectory], pad_id: int) -> tuple[dict, dict]:
    """One row per episode: the whole token stream, the episode reward on its last token."""
    rows = [t.token_stream() for t in trajs]
    tensors = collate(rows, [t.episode_reward for t in trajs], pad_id)
    common, lists = _common(trajs)
    tensors.update(common)
    tensors["token_versions"] = label_token_versions(
        tensors["response_mask"], [[v for turn in t.turns if turn.trainable for v in turn.versions()] for t in trajs])
    tensors["response_length"] = torch.tensor([t.response_length for t in trajs], dtype=torch.long)
    return tensors, lists


def step_batch(trajs: Sequence[Trajectory], pad_id: int) -> tuple[dict, dict]:
    """One row per turn: its prompt (history window) and response; the step reward on its last token."""
    rows, rewards, steps, hashes, owners, versions = [], [], [], [], [], []
    for traj in trajs:
        for k, turn in enumerate(traj.turns):
            rows.append(traj.step_tokens(k))
            versions.append(turn.versions() if turn.trainable else [])  # a slip's tokens are masked
            rewards.append(turn.reward)
            steps.append(k)
            hashes.append(state_hash(turn.observation))
            owners.append(traj)
    tensors = collate(rows, rewards, pad_id)
    common, lists = _common(owners)
    tensors.update(common)
    tensors["token_versions"] = label_token_versions(tensors["response_mask"], versions)
    tensors["step"] = torch.tensor(steps, dtype=torch.long)
    tensors["step_scores"] = torch.tensor(rewards, dtype=torch.float32)
    tensors["response_length"] = torch.tensor([sum(m) for _, m, _ in rows], dtype=torch.long)
    lists["state_hash"] = hashes
    return tensors, lists


#: granularity -> builder
BUILDERS: dict[str, Callable[[Sequence[Trajectory], int], tuple[dict, dict]]] = {
    "trajectory": trajectory_batch,
    "step": step_batch,
}


def build_batch(trajs: Sequence[Trajectory], *, granularity: str, pad_id: int,
                metrics: dict[str, float] | None = None) -> RolloutBatch:
    tensors, lists = BUILDERS[granularity](trajs, pad_id)
    return RolloutBatch(tensors=tensors, non_tensors=lists, trajectories=list(trajs), metrics=dict(metrics or {}),
                        granularity=granularity)
