"""Returns and advantages on label-aligned ``[B, T]`` token rewards (docs/algorithms.md §3.1, §4).

Pure tensor functions with explicit arguments; the registered estimators in
:mod:`roll_core.algorithms.advantages` read ``gamma``/``lambd`` from the config and call these.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from roll_core.algorithms.normalization import as_keys


def last_token_index(mask: Tensor) -> Tensor:
    """Label index of each row's last masked-in token (-1 for a row with none)."""
    pos = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    return torch.where(mask > 0, pos, torch.full_like(pos, -1)).max(dim=-1).values


def place_response_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """Put each row's response-level reward on its last generated token, 0 elsewhere (§3.1).

    The position is the last token of the label mask, i.e. the log-prob slot of the last
    generated token (the final turn's last token in multi-turn rows). Using the mask rather than
    the attention mask means a row whose last real token is not trainable still gets its reward.
    """
    idx = last_token_index(mask)
    out = torch.zeros(
        mask.shape, dtype=rewards.dtype if rewards.is_floating_point() else torch.float32, device=mask.device
    )
    rows = torch.nonzero(idx >= 0).squeeze(-1)
    out[rows, idx[rows]] = rewards[rows].to(out.dtype)
    return out


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """Reward-to-go ``G_t = R_t + gamma * G_{t+1}`` over every position of the row (§4.1)."""
    out = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = rewards[:, t] + gamma * running
        out[:, t] = running
    return out


def gae_advantages(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lambd: float
) -> tuple[Tensor, Tensor]:
    """GAE over all label positions, with V masked first (roll's fix of §4.2 [Q]).

    Masking V before the recursion means the bootstrap value after the final response token is 0
    instead of whatever the critic emitted on a padding position. Returns ``(advantages, returns)``
    with ``returns = A + V`` (masked V).
    """
    values = values * mask
    width = rewards.shape[1]
    adv = torch.empty_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in range(width - 1, -1, -1):
        next_v = values[:, t + 1] if t + 1 < width else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = delta + gamma * lambd * last
        adv[:, t] = last
    return adv, adv + values


def per_turn_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """``agentic_reinforce`` (§4.3): discount per turn, not per token.

    Each maximal run of mask ones is a turn; going backwards ``G <- R[last token of turn] + gamma*G``
    and every token of the turn gets G. Only the reward on a turn's last token is read.
    """
    on = mask > 0
    nxt = torch.zeros_like(on)
    nxt[:, :-1] = on[:, 1:]
    turn_end = on & ~nxt
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(turn_end[:, t], rewards[:, t] + gamma * running, running)
        out[:, t] = running * mask[:, t]
    return out


def discounted_step_returns(
    step_rewards: Tensor, traj_ids: Sequence[Hashable], steps: Sequence[int], gamma: float
) -> Tensor:
    """Per-step discounted return inside each trajectory, ordered by ``step`` (§4.4).

    ``g_k = s_k + gamma * g_{k+1}``; rows are agent steps in any order.
    """
    rows_by_traj: dict[Hashable, list[int]] = defaultdict(list)
    for row, traj in enumerate(as_keys(traj_ids)):
        rows_by_traj[traj].append(row)
    step_list = as_keys(steps)
    values = step_rewards.double().tolist()
    out = [0.0] * len(values)
    for rows in rows_by_traj.values():
        running = 0.0
        for row in sorted(rows, key=lambda r: step_list[r], reverse=True):
            running = values[row] + gamma * running
            out[row] = running
    return torch.tensor(out, dtype=torch.float32, device=step_rewards.device)
