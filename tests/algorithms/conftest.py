"""Duck-typed configs for the algorithm tests: the numerics need no pydantic schema."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

#: roll's defaults (docs/algorithms.md §7 plus roll's decisions) for the fields the algorithms read
TOP_LEVEL = dict(
    adv_estimator="reinforce",
    gamma=1.0,
    lambd=0.95,
    norm_mean_type=None,
    norm_std_type=None,
    reward_clip=None,
    advantage_clip=None,
    whiten_rewards=False,
    whiten_advantages=False,
    pg_clip=0.2,
    use_pg_clip_range=False,
    pg_clip_low=0.2,
    pg_clip_high=0.2,
    dual_clip_loss=False,
    value_clip=None,
    kl_penalty="kl",
    init_kl_coef=0.0,
    target_kl=None,
    kl_horizon=10000,
    add_token_level_kl=False,
    use_kl_loss=False,
    kl_loss_coef=0.0,
    entropy_loss_coef=0.0,
    loss_agg_mode="seq-mean-token-mean",
    ppo_epochs=1,
    ratio_type="token",
    episode_reward_weight=1.0,
    step_reward_weight=1.0,
    step_reward_gamma=0.95,
    num_return_sequences_in_group=1,
)
ACTOR_TRAIN = dict(
    pg_variant="ppo",
    tis_lower_bound=0.0,
    tis_upper_bound=1.0,
    cispo_epsilon_low=0.1,
    cispo_epsilon_high=0.1,
    cispo_use_unified_mask=False,
    kimi15_tau=0.1,
    topr_positive_weight=1.0,
    topr_negative_weight=1.0,
    dual_clip_c=3.0,
)
REWARD_NORMALIZATION = dict(grouping="batch", method="identity", norm_mean_type=None, norm_std_type=None)


def build_config(reward_normalization=None, filters=(), is_weight=None, **overrides):
    """A config namespace; ``overrides`` go to ``actor_train`` or the top level by field name."""
    unknown = set(overrides) - set(TOP_LEVEL) - set(ACTOR_TRAIN)
    assert not unknown, f"not a field the algorithms read: {unknown}"
    top = {k: overrides.get(k, v) for k, v in TOP_LEVEL.items()}
    actor = {k: overrides.get(k, v) for k, v in ACTOR_TRAIN.items()}
    weight = dict(enabled=False, weight_type="token", upper_bound=1.2, detach=True) | (is_weight or {})
    correction = SimpleNamespace(
        is_weight=SimpleNamespace(**weight), filters=[SimpleNamespace(**_filter(f)) for f in filters]
    )
    return SimpleNamespace(
        **top,
        actor_train=SimpleNamespace(**actor),
        reward_normalization=SimpleNamespace(**(REWARD_NORMALIZATION | (reward_normalization or {}))),
        train_infer_correction=correction,
    )


def _filter(overrides):
    return (
        dict(
            enabled=True,
            agg_type="token",
            ratio_enabled=True,
            ratio_low=0.8,
            ratio_high=1.2,
            diff_enabled=False,
            diff_low=-0.2,
            diff_high=0.2,
        )
        | overrides
    )


@pytest.fixture
def make_config():
    return build_config
