"""roll's RL numerics: pure torch functions on label-aligned ``[B, L-1]`` tensors.

The pipeline calls two entry points, everything else is building blocks:

* :func:`roll_core.algorithms.advantages.compute_advantages` — rewards to advantages
  (reward normalisation, ``reward_clip``, placement, KL in the reward, whitening, the selected
  estimator, ``advantage_clip``).
* :func:`roll_core.algorithms.objective.make_actor_loss_fn` /
  :func:`~roll_core.algorithms.objective.policy_loss` — the total actor loss with global
  normalisers; :func:`~roll_core.algorithms.objective.make_critic_loss_fn` for the critic.

Modules: ``masking`` (masked stats, whitening, turn segments), ``normalization`` (reward
normalisation), ``kl`` (estimators, controllers), ``returns`` (placement, discounting, GAE,
per-turn and per-step returns), ``advantages`` (estimator contract and built-in estimators),
``ratio`` (token / segment / sequence ratios), ``losses`` (per-token PG losses, entropy, value
loss), ``aggregation`` (``loss_agg_mode`` with global normalisers), ``corrections``
(train-inference IS weights and filters). The built-ins are registered as plugins in
:mod:`roll_core.builtin.algorithms`. Spec: docs/algorithms.md.
"""

from roll_core.algorithms.advantages import compute_advantages, label_mask
from roll_core.algorithms.aggregation import Normalisers, agg_loss
from roll_core.algorithms.corrections import apply_train_infer_correction
from roll_core.algorithms.kl import kl_controller_from_config
from roll_core.algorithms.losses import entropy_from_logits
from roll_core.algorithms.objective import critic_loss, make_actor_loss_fn, make_critic_loss_fn, policy_loss

__all__ = [
    "Normalisers",
    "agg_loss",
    "apply_train_infer_correction",
    "compute_advantages",
    "critic_loss",
    "entropy_from_logits",
    "kl_controller_from_config",
    "label_mask",
    "make_actor_loss_fn",
    "make_critic_loss_fn",
    "policy_loss",
]
