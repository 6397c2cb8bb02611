"""Advantage estimators and the pipeline's single entry point, :func:`compute_advantages`.

The estimator contract
----------------------
An advantage estimator (registered through ``roll_register_advantage_estimators`` and selected by
``adv_estimator``) is a callable::

    estimator(data: dict[str, Any], config) -> dict[str, Any]

``data`` is the batch with the common reward steps already done; an estimator reads:

* ``token_level_rewards`` ``[B, T]`` (T = L-1, label-aligned): the response-level reward placed
  on each row's last generated token, minus the KL penalty if on, whitened if
  ``whiten_rewards``, multiplied by the mask;
* ``mask`` ``[B, T]``: the training mask (``loss_mask``, else ``response_mask[:, 1:]``);
* ``values`` ``[B, T]`` (critic output, for estimators registered with ``needs_critic=True``);
* anything else the pipeline put in the batch: ``scores``, ``response_mask``, and per-row
  grouping keys as Python lists (``traj_group_id``, ``traj_id``, ``step``, ``state_hash``,
  ``episode_scores``).

It returns ``advantages`` and ``returns`` ``[B, T]`` (raw: whitening, masking and
``advantage_clip`` are applied afterwards) and may add float metrics. Hyper-parameters come from
``config`` by ROLL's names.

An estimator that needs its own response-level reward (GiGPO, step_reinforce) also carries a
``response_rewards(data, config, pipeline) -> Tensor[B]`` attribute (see
:func:`with_response_rewards`); otherwise :func:`default_response_rewards` normalises ``scores``.

Processing order of :func:`compute_advantages` (docs/algorithms.md §1, §4, with roll's decisions):
response-level reward -> clamp to +-``reward_clip`` (once) -> placement on the last generated
token -> KL penalty ``add_token_level_kl`` (controller updated whenever ``ref_log_probs`` is
given) -> ``whiten_rewards`` -> x mask -> estimator -> ``whiten_advantages`` -> x mask ->
clamp to +-``advantage_clip``. Whitening is skipped with fewer than 2 mask tokens; ``returns`` are
taken before whitening and clipping.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.hparams import hp, lookup
from roll_core.algorithms.kl import FixedKLController, kl_controller_from_config, kl_penalty
from roll_core.algorithms.masking import masked_mean, masked_whiten
from roll_core.algorithms.normalization import (
    agentic_reward_norm,
    as_keys,
    group_ids,
    normalize,
    resolve_norm_types,
    reward_norm,
)
from roll_core.algorithms.returns import (
    discounted_returns,
    discounted_step_returns,
    gae_advantages,
    per_turn_returns,
    place_response_rewards,
)
from roll_core.errors import ConfigError

Data = dict[str, Any]
Estimator = Callable[[Data, Any], dict[str, Any]]


# --- batch accessors ---------------------------------------------------------------------------


def require(data: Data, key: str, why: str) -> Any:
    """``data[key]`` with an error saying who needs it."""
    if key not in data:
        raise KeyError(f"{why} needs the batch key {key!r}; present keys: {sorted(data)}")
    return data[key]


def label_mask(data: Data) -> Tensor:
    """The training mask ``[B, L-1]``: ``loss_mask`` if set (sample masks, train-infer filters),
    else ``response_mask[:, 1:]``."""
    if "loss_mask" in data:
        return data["loss_mask"].float()
    return require(data, "response_mask", "the loss mask")[:, 1:].float()


def response_scores(data: Data, key: str = "scores") -> Tensor:
    """Per-row score ``[B]``; a token-level ``[B, T]`` score is summed over tokens (agentic §2.2)."""
    scores = torch.as_tensor(require(data, key, "the response-level reward")).float()
    return scores.sum(-1) if scores.dim() > 1 else scores


# --- response-level rewards ----------------------------------------------------------------------


def _rlvr_groups(data: Data, config: Any) -> tuple[int, list[Hashable] | None]:
    if "group_ids" in data:
        return 1, as_keys(data["group_ids"])
    return hp(config, "num_return_sequences_in_group"), None


def _rlvr_norm(data: Data, config: Any, mean_type: str | None, std_type: str | None) -> Tensor:
    scores = response_scores(data)
    if "group" not in (mean_type, std_type):  # group size is irrelevant, do not require it
        return reward_norm(scores, 1, mean_type, std_type)
    size, groups = _rlvr_groups(data, config)
    return reward_norm(scores, size, mean_type, std_type, groups=groups)


def _agentic_groups(data: Data, grouping: str) -> list[Hashable] | None:
    """Per-row group keys from the batch column named by ``grouping``; None for ``batch``."""
    if grouping == "batch":
        return None
    return as_keys(require(data, grouping, f"reward_normalization.grouping={grouping!r}"))


def _agentic_norm(scores: Tensor, data: Data, config: Any) -> Tensor:
    rn = hp(config, "reward_normalization")
    types = resolve_norm_types(rn.grouping, rn.method, rn.norm_mean_type, rn.norm_std_type)
    return agentic_reward_norm(scores, _agentic_groups(data, rn.grouping), *types)


def _rlvr_default(data: Data, config: Any) -> Tensor:
    return _rlvr_norm(data, config, hp(config, "norm_mean_type"), hp(config, "norm_std_type"))


def _agentic_default(data: Data, config: Any) -> Tensor:
    return _agentic_norm(response_scores(data), data, config)


#: pipeline kind -> default response-level reward (normalised ``scores``)
DEFAULT_RESPONSE_REWARDS = {"rlvr": _rlvr_default, "agentic": _agentic_default}


def default_response_rewards(data: Data, config: Any, pipeline: str) -> Tensor:
    """RLVR: ``norm_mean_type``/``norm_std_type`` (§2.1); agentic: ``reward_normalization`` (§2.2)."""
    return lookup(DEFAULT_RESPONSE_REWARDS, pipeline, "pipeline")(data, config)


def with_response_rewards(fn: Callable[[Data, Any, str], Tensor]) -> Callable[[Estimator], Estimator]:
    """Decorator: give an estimator its own response-level reward step."""

    def attach(estimator: Estimator) -> Estimator:
        estimator.response_rewards = fn
        return estimator

    return attach


def grpo_response_rewards(data: Data, config: Any, pipeline: str) -> Tensor:
    """RLVR GRPO always normalises by group mean and std (without touching the config); agentic
    GRPO is plain ``reward_normalization`` (§2.1, §2.2)."""
    forced = {
        "rlvr": lambda: _rlvr_norm(data, config, "group", "group"),
        "agentic": lambda: _agentic_default(data, config),
    }
    return lookup(forced, pipeline, "pipeline")()


def step_returns(data: Data, config: Any) -> Tensor:
    """Discounted step returns g inside each ``traj_id`` ordered by ``step`` (``step_reward_gamma``)."""
    why = "a step-wise estimator"
    return discounted_step_returns(
        response_scores(data),
        require(data, "traj_id", why),
        require(data, "step", why),
        hp(config, "step_reward_gamma"),
    )


def step_reinforce_response_rewards(data: Data, config: Any, pipeline: str) -> Tensor:
    """``reward_normalization`` applied to the discounted step returns (§4.4)."""
    return _agentic_norm(step_returns(data, config), data, config)


def episode_scores(data: Data) -> Tensor:
    """``episode_scores`` per row, or the sum of the trajectory's step ``scores`` when absent."""
    if "episode_scores" in data:
        return response_scores(data, "episode_scores")
    steps = response_scores(data)
    gid = group_ids(require(data, "traj_id", "episode scores"), steps.device)
    totals = torch.zeros(int(gid.max()) + 1, device=steps.device).index_add(0, gid, steps)
    return totals[gid]


def gigpo_episode_advantages(data: Data, config: Any) -> Tensor:
    """Episode level: one entry per trajectory (roll's fix of §4.5 [Q]), normalised under
    ``reward_normalization`` and copied back to the trajectory's step rows."""
    rn = hp(config, "reward_normalization")
    types = resolve_norm_types(rn.grouping, rn.method, rn.norm_mean_type, rn.norm_std_type)
    scores = episode_scores(data)
    traj = group_ids(require(data, "traj_id", "gigpo"), scores.device)
    first = torch.full((int(traj.max()) + 1,), len(traj), dtype=torch.long, device=scores.device)
    first = first.scatter_reduce(0, traj, torch.arange(len(traj), device=scores.device), reduce="amin")
    keys = _agentic_groups(data, rn.grouping)
    traj_groups = None if keys is None else [keys[i] for i in first.tolist()]
    return agentic_reward_norm(scores[first], traj_groups, *types)[traj]


def gigpo_step_advantages(data: Data, config: Any) -> Tensor:
    """Step level: g normalised inside anchor-state groups keyed by (traj_group_id, state_hash).

    The norm types are the explicit ``reward_normalization.norm_*_type`` when set (roll's fix;
    ROLL read only ``method``), else derived from ``method`` at group level. A state seen once
    gets 0 whenever a std type is set, also ``norm_std_type: batch`` (the agentic rule, §2.2, as
    at the episode level): one visit says nothing about how good its action was.
    """
    rn = hp(config, "reward_normalization")
    types = resolve_norm_types("group", rn.method, rn.norm_mean_type, rn.norm_std_type)
    keys = list(
        zip(
            as_keys(require(data, "traj_group_id", "gigpo")),
            as_keys(require(data, "state_hash", "gigpo")),
            strict=True,
        )
    )
    g = step_returns(data, config)
    return normalize(g, group_ids(keys, g.device), *types, zero_singleton_groups=True)


def gigpo_response_rewards(data: Data, config: Any, pipeline: str) -> Tensor:
    """``episode_reward_weight * A_E + step_reward_weight * A_S`` (§4.5)."""
    return hp(config, "episode_reward_weight") * gigpo_episode_advantages(data, config) + hp(
        config, "step_reward_weight"
    ) * gigpo_step_advantages(data, config)


# --- registered estimators ---------------------------------------------------------------------


def reinforce(data: Data, config: Any) -> dict[str, Any]:
    """Discounted reward-to-go over token positions (``gamma``); ``returns`` = advantages.
    REINFORCE++ is this with ``norm_mean_type: batch, norm_std_type: batch``."""
    adv = discounted_returns(data["token_level_rewards"], hp(config, "gamma"))
    return {"advantages": adv, "returns": adv}


@with_response_rewards(grpo_response_rewards)
def grpo(data: Data, config: Any) -> dict[str, Any]:
    """GRPO: REINFORCE on group-normalised rewards (group mean and std forced in RLVR)."""
    return reinforce(data, config)


def gae(data: Data, config: Any) -> dict[str, Any]:
    """Generalised advantage estimation (``gamma``, ``lambd``) on critic ``values``, masked first."""
    values = require(data, "values", "adv_estimator 'gae'")
    adv, ret = gae_advantages(
        data["token_level_rewards"], values, data["mask"], hp(config, "gamma"), hp(config, "lambd")
    )
    return {"advantages": adv, "returns": ret}


def agentic_reinforce(data: Data, config: Any) -> dict[str, Any]:
    """Trajectory rows: REINFORCE discounted per turn (``gamma``), every token of a turn shares G."""
    adv = per_turn_returns(data["token_level_rewards"], data["mask"], hp(config, "gamma"))
    return {"advantages": adv, "returns": adv}


@with_response_rewards(step_reinforce_response_rewards)
def step_reinforce(data: Data, config: Any) -> dict[str, Any]:
    """Step rows: REINFORCE on the normalised discounted step return (``step_reward_gamma``)."""
    return reinforce(data, config)


@with_response_rewards(gigpo_response_rewards)
def gigpo(data: Data, config: Any) -> dict[str, Any]:
    """GiGPO step rows: episode-level plus anchor-state step-level group advantages."""
    return reinforce(data, config)


# --- the pipeline's entry point ------------------------------------------------------------------


def _summary(prefix: str, x: Tensor, mask: Tensor) -> dict[str, float]:
    on = x[mask > 0]
    if not on.numel():
        return {}
    return {
        f"{prefix}/mean": float(on.mean()),
        f"{prefix}/max": float(on.max()),
        f"{prefix}/min": float(on.min()),
    }


def compute_advantages(
    data: Data,
    config: Any,
    *,
    pipeline: str,
    estimator: Estimator,
    kl_ctrl: FixedKLController | None = None,
) -> tuple[dict[str, Tensor], dict[str, float]]:
    """Rewards to advantages for one batch (one RLVR domain, or one agentic batch).

    ``data`` keys: ``response_mask [B, L]`` (or ``loss_mask [B, L-1]``), ``scores`` ``[B]`` (RLVR reward,
    agentic episode return, or the step reward for step rows; ``[B, T]`` is summed), plus what the
    estimator reads (``values``; grouping keys; ``group_ids`` for non-contiguous RLVR groups).
    ``old_log_probs`` and ``ref_log_probs`` turn on the KL term. ``pipeline`` is ``"rlvr"`` or
    ``"agentic"`` (required: the two normalise rewards differently, and a wrong default would
    silently drop RLVR's group normalisation); ``estimator`` is the run's bound advantage
    estimator (``Run.estimator.load()``). Keep one ``kl_ctrl`` (see :mod:`roll_core.algorithms.kl`) for the run; it is
    updated in place. Returns ``(outputs, metrics)``; outputs hold ``advantages``, ``returns``,
    ``raw_advantages``, ``token_level_rewards`` ``[B, L-1]`` and ``response_rewards`` ``[B]``.
    """
    lookup(DEFAULT_RESPONSE_REWARDS, pipeline, "pipeline")  # "rlvr" or "agentic", checked up front
    mask = label_mask(data)
    shaping = getattr(estimator, "response_rewards", default_response_rewards)
    rewards = shaping(data, config, pipeline).float()
    reward_clip = hp(config, "reward_clip")
    if reward_clip is not None:
        rewards = rewards.clamp(-reward_clip, reward_clip)
    token_rewards = place_response_rewards(rewards, mask)

    metrics: dict[str, float] = {
        "critic/score/mean": float(response_scores(data).mean()),
        "critic/rewards/mean": float(rewards.mean()),
    }
    add_kl = hp(config, "add_token_level_kl")
    if "ref_log_probs" in data:
        kl_ctrl = kl_ctrl if kl_ctrl is not None else kl_controller_from_config(config)
        token_rewards, kl_metrics = kl_penalty(
            token_rewards,
            require(data, "old_log_probs", "the KL penalty"),
            data["ref_log_probs"],
            mask,
            kl_ctrl=kl_ctrl,
            kind=hp(config, "kl_penalty"),
            add=add_kl,
        )
        metrics.update(kl_metrics)
    elif add_kl:
        raise ConfigError(
            "add_token_level_kl is on but the batch has no ref_log_probs; "
            "the reference model must run (init_kl_coef > 0 or enable_reference)."
        )

    can_whiten = mask.sum() >= 2
    if can_whiten and hp(config, "whiten_rewards"):
        token_rewards = masked_whiten(token_rewards, mask)
    token_rewards = token_rewards * mask

    result = estimator({**data, "token_level_rewards": token_rewards, "mask": mask}, config)
    raw = result["advantages"]
    adv = masked_whiten(raw, mask) if can_whiten and hp(config, "whiten_advantages") else raw
    adv = adv * mask
    advantage_clip = hp(config, "advantage_clip")
    if advantage_clip is not None:
        adv = adv.clamp(-advantage_clip, advantage_clip)

    metrics.update({k: float(v) for k, v in result.items() if isinstance(v, int | float)})
    metrics.update(_summary("critic/advantages", adv, mask))
    metrics.update(_summary("critic/returns", result["returns"], mask))
    metrics["critic/token_rewards/mean"] = float(masked_mean(token_rewards, mask))
    outputs = {
        "advantages": adv,
        "raw_advantages": raw,
        "returns": result["returns"],
        "token_level_rewards": token_rewards,
        "response_rewards": rewards,
    }
    return outputs, metrics
