"""The pipeline-facing entry points: compute_advantages, policy_loss, critic_loss, corrections."""

from __future__ import annotations

import pytest
import torch

from roll_core.algorithms import losses
from roll_core.algorithms.advantages import compute_advantages
from roll_core.algorithms.aggregation import Normalisers, agg_loss
from roll_core.algorithms.corrections import apply_train_infer_correction
from roll_core.algorithms.kl import AdaptiveKLController, approx_kl, kl_controller_from_config
from roll_core.algorithms.losses import entropy_from_logits
from roll_core.algorithms.masking import masked_mean
from roll_core.algorithms.objective import critic_loss, make_actor_loss_fn, make_critic_loss_fn, policy_loss
from roll_core.errors import ConfigError
from roll_core.plugins import PluginManager


@pytest.fixture(scope="module")
def registry():
    return PluginManager(autoload=False, extra_modules=[]).registry


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def step_batch():
    """Two trajectories of one group in step rows; a history-window prompt then the action."""
    return {
        "traj_id": ["A", "A", "B", "B"],
        "step": [0, 1, 0, 1],
        "traj_group_id": [7, 7, 7, 7],
        "state_hash": ["s0", "s1", "s0", "s1"],
        "scores": t(0, 1, 0, 0),
        "episode_scores": t(1, 1, 0, 0),
        "response_mask": torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 1, 1], [0, 0, 0, 1, 0], [0, 1, 1, 0, 0]]),
        "values": torch.rand(4, 4),
    }


@pytest.mark.parametrize("name", ["gae", "reinforce", "grpo", "agentic_reinforce", "step_reinforce", "gigpo"])
def test_every_registered_estimator_runs_through_compute_advantages(make_config, registry, name):
    config = make_config(
        adv_estimator=name, gamma=0.9, reward_normalization=dict(grouping="traj_group_id", method="mean_std")
    )
    data = step_batch()
    estimator = registry.load("advantage_estimator", name)
    out, metrics = compute_advantages(data, config, pipeline="agentic", estimator=estimator)
    mask = data["response_mask"][:, 1:].float()
    for key in ("advantages", "raw_advantages", "returns", "token_level_rewards"):
        assert out[key].shape == (4, 4) and torch.isfinite(out[key]).all()
    assert (out["advantages"] * (1 - mask)).abs().max() == 0
    assert out["response_rewards"].shape == (4,)
    assert "critic/advantages/mean" in metrics


def test_whitening_clipping_and_returns_before_them(make_config):
    data = {
        "scores": t(3, -1, 0.5),
        "response_mask": torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0], [0, 1, 1, 0]]),
        "values": t(0.1, 0.2, 0.3)[:, None].expand(3, 3).clone(),
    }
    config = make_config(adv_estimator="gae", whiten_advantages=True, advantage_clip=0.8, gamma=0.95)
    from roll_core.algorithms.advantages import gae

    out, _ = compute_advantages(data, config, pipeline="rlvr", estimator=gae)
    mask = data["response_mask"][:, 1:].float()
    assert float(out["advantages"].abs().max()) <= 0.8 + 1e-7
    unclipped, _ = compute_advantages(
        data,
        make_config(adv_estimator="gae", whiten_advantages=True, gamma=0.95),
        pipeline="rlvr",
        estimator=gae,
    )
    assert float(masked_mean(unclipped["advantages"], mask)) == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(out["returns"], out["raw_advantages"] + data["values"] * mask)


def test_single_token_batch_skips_whitening(make_config):
    from roll_core.algorithms.advantages import reinforce

    data = {"scores": t(2.0), "response_mask": torch.tensor([[0, 1, 0]])}
    out, _ = compute_advantages(
        data, make_config(whiten_advantages=True, whiten_rewards=True), pipeline="rlvr", estimator=reinforce
    )
    torch.testing.assert_close(out["advantages"], t(2, 0)[None])


def test_kl_controller_updates_even_without_the_reward_penalty(make_config):
    from roll_core.algorithms.advantages import reinforce

    data = {
        "scores": t(1.0, 0.0),
        "response_mask": torch.tensor([[0, 1, 1]] * 2),
        "old_log_probs": t(-1, -1)[None].expand(2, 2),
        "ref_log_probs": t(-1.5, -1.5)[None].expand(2, 2),
    }
    config = make_config(init_kl_coef=0.2, target_kl=0.1, kl_horizon=100)
    ctrl = kl_controller_from_config(config)
    assert isinstance(ctrl, AdaptiveKLController)
    out, metrics = compute_advantages(data, config, pipeline="rlvr", estimator=reinforce, kl_ctrl=ctrl)
    assert metrics["critic/kl"] == pytest.approx(0.5)
    assert ctrl.value == pytest.approx(0.2 * (1 + 0.2 * 2 / 100))
    torch.testing.assert_close(out["token_level_rewards"], t(0, 1, 0, 0).reshape(2, 2))
    restored = kl_controller_from_config(config)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == ctrl.value


def test_token_level_kl_without_reference_is_a_config_error(make_config):
    from roll_core.algorithms.advantages import reinforce

    with pytest.raises(ConfigError, match="ref_log_probs"):
        compute_advantages(
            {"scores": t(1.0), "response_mask": torch.tensor([[0, 1]])},
            make_config(add_token_level_kl=True),
            pipeline="rlvr",
            estimator=reinforce,
        )


def test_rlvr_group_norm_needs_a_group_size_or_group_ids(make_config):
    from types import SimpleNamespace

    from roll_core.algorithms.advantages import grpo

    data = {"scores": t(1, 0, 1, 1), "response_mask": torch.tensor([[0, 1]] * 4)}
    config = make_config(adv_estimator="grpo")
    flat = SimpleNamespace(**{k: v for k, v in vars(config).items() if k != "num_return_sequences_in_group"})
    with pytest.raises(ConfigError, match="num_return_sequences_in_group"):
        compute_advantages(data, flat, pipeline="rlvr", estimator=grpo)
    out, _ = compute_advantages(
        {**data, "group_ids": ["p", "q", "p", "q"]}, flat, pipeline="rlvr", estimator=grpo
    )
    torch.testing.assert_close(out["response_rewards"], t(0, -0.707106, 0, 0.707106), atol=1e-5, rtol=0)


def test_step_reinforce_normalises_discounted_step_returns(make_config, registry):
    config = make_config(
        adv_estimator="step_reinforce",
        step_reward_gamma=0.5,
        reward_normalization=dict(grouping="traj_group_id", method="mean"),
    )
    out, _ = compute_advantages(step_batch(), config, pipeline="agentic",
                                estimator=registry.load("advantage_estimator", "step_reinforce"))
    g = t(0.5, 1, 0, 0)
    torch.testing.assert_close(out["response_rewards"], g - g.mean())


def test_agentic_reinforce_discounts_per_turn(make_config, registry):
    data = {"scores": t(1.0), "response_mask": torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1, 1]])}
    out, _ = compute_advantages(
        data, make_config(adv_estimator="agentic_reinforce", gamma=0.9), pipeline="agentic",
        estimator=registry.load("advantage_estimator", "agentic_reinforce"),
    )
    torch.testing.assert_close(out["advantages"], t(0, 0.9, 0.9, 0, 0, 1, 1, 1)[None])


def test_the_pipeline_and_the_estimator_must_be_given(make_config):
    """No default: an RLVR caller that fell back to the agentic normalisation would silently lose
    GRPO's group normalisation (estimators are bound by resolve, never looked up here)."""
    from roll_core.algorithms.advantages import grpo

    data = {"scores": t(1.0, 0.0), "response_mask": torch.tensor([[0, 1]] * 2)}
    with pytest.raises(TypeError, match="pipeline"):
        compute_advantages(data, make_config(), estimator=grpo)
    with pytest.raises(TypeError, match="estimator"):
        compute_advantages(data, make_config(), pipeline="rlvr")
    with pytest.raises(ConfigError, match="pipeline='rlvrr' is not supported"):
        compute_advantages(data, make_config(), pipeline="rlvrr", estimator=grpo)


def micro_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 4, generator=g) - 0.1
    return (
        {
            "response_mask": torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 1, 0, 1, 1]]),
            "old_log_probs": old,
            "ref_log_probs": old - 0.1,
            "advantages": torch.randn(3, 4, generator=g),
            "is_weights": torch.rand(3, 4, generator=g) + 0.5,
            "sample_weights": t(1.0, 0.5, 2.0),
            "scores": t(1, 0, -1),
        },
        old + 0.1 * torch.randn(3, 4, generator=g),
        torch.rand(3, 4, generator=g),
    )


def test_policy_loss_is_the_documented_total(make_config):
    data, log_probs, entropy = micro_batch()
    config = make_config(
        use_kl_loss=True, kl_loss_coef=0.3, entropy_loss_coef=0.01, loss_agg_mode="token-mean"
    )
    mask = data["response_mask"][:, 1:].float()
    norm = Normalisers.from_mask(mask, seq_len=4)
    loss, metrics = policy_loss(data, log_probs, config, entropy=entropy, loss_variant=losses.ppo, normalisers=norm)
    pg = losses.ppo_loss(log_probs, data["old_log_probs"], data["advantages"]) * data["is_weights"]
    expected = (
        agg_loss(pg, mask, "token-mean", weights=data["sample_weights"], normalisers=norm)
        + 0.3 * agg_loss(approx_kl(log_probs, data["ref_log_probs"], "k3"), mask, "token-mean", normalisers=norm)
        - 0.01 * agg_loss(entropy, mask, "token-mean", normalisers=norm)
    )
    assert float(loss) == pytest.approx(float(expected), abs=1e-6)
    assert {"actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/pg_clipfrac"} <= set(metrics)


def test_entropy_bonus_requires_entropy(make_config):
    data, log_probs, _ = micro_batch()
    with pytest.raises(ConfigError, match="entropy"):
        policy_loss(data, log_probs, make_config(entropy_loss_coef=0.1), loss_variant=losses.ppo,
                    normalisers=Normalisers(1, 1, 1))


def test_actor_loss_fn_is_a_strategy_loss_fn(make_config, registry):
    data, log_probs, entropy = micro_batch()
    for variant in ("ppo", "vanilla", "tis", "topr", "cispo", "kimi15"):
        config = make_config(pg_variant=variant, ratio_type="seq")
        loss_fn = make_actor_loss_fn(
            config, Normalisers.from_mask(data["response_mask"][:, 1:].float(), seq_len=4),
            loss_variant=registry.load("policy_loss", variant),
        )
        lp = log_probs.clone().requires_grad_(True)
        loss, metrics = loss_fn(data, lp, entropy)
        loss.backward()
        assert torch.isfinite(lp.grad).all() and lp.grad.abs().sum() > 0
        assert all(isinstance(v, float) for v in metrics.values())


def test_critic_loss_reproduces_e10_through_the_config(make_config):
    data = {
        "values": t(0.5, 0.1)[:, None],
        "returns": t(2, 0)[:, None],
        "response_mask": torch.tensor([[0, 1]] * 2),
    }
    loss, _ = critic_loss(data, t(1, 0)[:, None], make_config(value_clip=0.2), normalisers=Normalisers(2, 2, 1))
    assert float(loss) == pytest.approx(0.4225, abs=1e-6)
    norm = Normalisers(num_tokens=2, num_seqs=2, seq_len=1)
    fn = make_critic_loss_fn(make_config(), norm)
    halves = [
        fn({k: v[i : i + 1] for k, v in data.items()}, t(1, 0)[i : i + 1, None], None)[0] for i in (0, 1)
    ]
    assert float(sum(halves)) == pytest.approx(0.25, abs=1e-6)


def test_train_infer_correction_weights_and_filters(make_config):
    data = {
        "old_log_probs": t(-1, -0.5, -1.0, -2.0).reshape(2, 2),
        "infer_log_probs": t(-1.3, -0.4, -1.0, -2.05).reshape(2, 2),
        "response_mask": torch.tensor([[0, 1, 1], [0, 1, 1]]),
    }
    updates, metrics = apply_train_infer_correction(data, make_config())
    assert updates == {}  # the correction is off: nothing changes, the mismatch is still reported
    assert metrics == {"train_infer/logprob_abs_diff": pytest.approx((0.3 + 0.1 + 0.0 + 0.05) / 4)}
    updates, metrics = apply_train_infer_correction(
        data, make_config(is_weight=dict(enabled=True), filters=[{}])
    )
    torch.testing.assert_close(updates["loss_mask"], t(0, 1, 1, 1).reshape(2, 2))
    torch.testing.assert_close(
        updates["is_weights"], t(0, 0.904837, 1, 1.051271).reshape(2, 2), atol=1e-5, rtol=0
    )
    assert metrics["train_infer/filtered_token_frac"] == pytest.approx(0.25)
    updates, _ = apply_train_infer_correction(data, make_config(filters=[dict(agg_type="sequence")]))
    # sequence rho: exp(0.2) = 1.22 drops all of row 0; exp(0.05) keeps row 1
    torch.testing.assert_close(updates["loss_mask"], t(0, 0, 1, 1).reshape(2, 2))
    updates, _ = apply_train_infer_correction(
        data,
        make_config(filters=[dict(ratio_enabled=False, diff_enabled=True, diff_low=-0.05, diff_high=0.05)]),
    )
    torch.testing.assert_close(updates["loss_mask"], t(0, 0, 1, 1).reshape(2, 2))


def test_entropy_from_logits_matches_torch():
    logits = torch.randn(2, 3, 11)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected)
