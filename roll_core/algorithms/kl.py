"""KL estimators, KL controllers and the KL penalty in the reward (docs/algorithms.md §3).

The pipeline owns one controller per run (build it with :func:`kl_controller_from_config`, keep
it across steps, checkpoint it with ``state_dict``) and hands it to
:func:`roll_core.algorithms.advantages.compute_advantages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_core.algorithms.hparams import hp, lookup
from roll_core.algorithms.masking import masked_mean


def _k1(delta: Tensor) -> Tensor:
    return delta


def _abs(delta: Tensor) -> Tensor:
    return delta.abs()


def _k2(delta: Tensor) -> Tensor:
    return 0.5 * delta.square()


def _k3(delta: Tensor) -> Tensor:
    return (torch.exp(-delta) + delta - 1).clamp(-10, 10)


#: kl_penalty -> estimator of the per-token log-ratio; k1 / k2 / low_var_kl are the names verl
#: and TRL configs use for the same three estimators
_TOKEN_ESTIMATORS = {"kl": _k1, "abs": _abs, "mse": _k2, "k3": _k3, "k1": _k1, "k2": _k2, "low_var_kl": _k3}


def full_kl(logp: Tensor, logp_base: Tensor) -> Tensor:
    """Exact KL of full distributions ``[..., V]``, summed over the vocabulary (last) dimension.

    Only meaningful on full-vocabulary log-probs; ROLL applied it to per-token ``[B, T]`` inputs
    and so summed over time (§3.3 [Q]); here a 2-D input is an error.
    """
    if logp.dim() < 3:
        raise ValueError(
            "kl_penalty='full' needs full-vocabulary log-probs [B, T, V]; "
            "use 'kl', 'abs', 'mse' or 'k3' with per-token log-probs"
        )
    return (logp.exp() * (logp - logp_base)).sum(-1)


def approx_kl(logp: Tensor, logp_base: Tensor, kind: str = "kl") -> Tensor:
    """Per-token KL estimate of ``logp`` against ``logp_base``: kl (k1), abs, mse (k2), k3, full."""
    if kind == "full":
        return full_kl(logp, logp_base)
    return lookup(_TOKEN_ESTIMATORS, kind, "kl_penalty")(logp - logp_base)


KL_ESTIMATORS = (*_TOKEN_ESTIMATORS, "full")


@dataclass
class FixedKLController:
    """beta stays at ``init_kl_coef`` (``target_kl`` is None)."""

    value: float

    def update(self, current: float, n_steps: int) -> None:
        """Fixed: nothing to adapt."""

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


@dataclass
class AdaptiveKLController(FixedKLController):
    """beta <- beta * (1 + clip(current/target - 1, -0.2, 0.2) * n_steps / horizon)."""

    target: float = 0.1
    horizon: float = 10000

    def update(self, current: float, n_steps: int) -> None:
        error = min(max(current / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def make_kl_controller(
    init_kl_coef: float, target_kl: float | None = None, kl_horizon: float = 10000
) -> FixedKLController:
    if target_kl is None:
        return FixedKLController(float(init_kl_coef))
    return AdaptiveKLController(float(init_kl_coef), float(target_kl), float(kl_horizon))


def kl_controller_from_config(config: Any) -> FixedKLController:
    return make_kl_controller(hp(config, "init_kl_coef"), hp(config, "target_kl"), hp(config, "kl_horizon"))


def kl_penalty(
    token_rewards: Tensor,
    logp: Tensor,
    logp_ref: Tensor,
    mask: Tensor,
    *,
    kl_ctrl: FixedKLController,
    kind: str = "kl",
    add: bool = True,
) -> tuple[Tensor, dict[str, float]]:
    """Subtract ``beta * KL`` from every response token's reward (when ``add``) and update beta.

    beta is read before the update; the controller sees the mean over rows of each row's masked
    token-mean KL, with ``n_steps`` = number of rows, even when the penalty is not added (§3.2).
    """
    kld = approx_kl(logp, logp_ref, kind) * mask
    beta = kl_ctrl.value
    rewards = token_rewards - beta * kld if add else token_rewards
    has_tokens = mask.sum(-1) > 0
    per_row = masked_mean(kld, mask, dim=-1)[has_tokens]
    current = float(per_row.mean()) if per_row.numel() else 0.0
    kl_ctrl.update(current, int(mask.shape[0]))
    return rewards, {"critic/kl": current, "critic/kl_coef": beta}
