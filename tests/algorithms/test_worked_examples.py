"""docs/algorithms.md §9: every worked example, to 1e-5."""

from __future__ import annotations

import math

import pytest
import torch

from roll_core.algorithms import losses
from roll_core.algorithms.advantages import (
    compute_advantages,
    gigpo,
    gigpo_episode_advantages,
    gigpo_response_rewards,
    gigpo_step_advantages,
    grpo,
    reinforce,
    step_returns,
)
from roll_core.algorithms.aggregation import Normalisers, agg_loss
from roll_core.algorithms.corrections import is_weights, train_infer_ratio
from roll_core.algorithms.kl import AdaptiveKLController, FixedKLController, approx_kl, kl_penalty
from roll_core.algorithms.masking import masked_whiten
from roll_core.algorithms.normalization import agentic_reward_norm, reward_norm
from roll_core.algorithms.ratio import segment_ratio
from roll_core.algorithms.returns import (
    discounted_returns,
    gae_advantages,
    per_turn_returns,
    place_response_rewards,
)

ATOL = 1e-5


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def close(actual, expected):
    torch.testing.assert_close(
        actual.float(), torch.as_tensor(expected, dtype=torch.float32), atol=ATOL, rtol=0
    )


# --- E1, E2, E2b: RLVR reward normalisation ---------------------------------------------------------


def test_e1_grpo_group_norm():
    r = t(1, 0, 0, 1, 1, 1, 1, 1)
    expected = [0.866024, -0.866024, -0.866024, 0.866024, 0, 0, 0, 0]
    close(reward_norm(r, 4, "group", "group"), expected)


def test_e1_through_grpo_estimator_forces_group_norm(make_config):
    """RLVR grpo normalises by group even with norm types unset, and leaves the config alone."""
    config = make_config(adv_estimator="grpo", num_return_sequences_in_group=4)
    data = {"scores": t(1, 0, 0, 1, 1, 1, 1, 1), "response_mask": torch.tensor([[0, 1, 1]] * 8)}
    out, _ = compute_advantages(data, config, pipeline="rlvr", estimator=grpo)
    close(out["response_rewards"], [0.866024, -0.866024, -0.866024, 0.866024, 0, 0, 0, 0])
    close(out["advantages"][:, 0], [0.866024, -0.866024, -0.866024, 0.866024, 0, 0, 0, 0])
    assert config.norm_mean_type is None and config.norm_std_type is None


def test_e2_batch_norm_reinforce_plus_plus():
    close(reward_norm(t(1, 0, 0, 0), 1, "batch", "batch"), [1.499997, -0.499999, -0.499999, -0.499999])


def test_e2b_group_mean_batch_std_lite_ppo():
    r = t(1, 0, 0, 1, 1, 1, 1, 0)
    expected = [0.96609, -0.96609, -0.96609, 0.96609, 0.483045, 0.483045, 0.483045, -1.449135]
    close(reward_norm(r, 4, "group", "batch"), expected)


# --- E3, E4: placement, reinforce, GAE --------------------------------------------------------------


@pytest.mark.parametrize("gamma, expected", [(1.0, [0, 0, 2, 2, 2, 0]), (0.9, [0, 0, 1.62, 1.8, 2, 0])])
def test_e3_placement_and_reinforce(gamma, expected):
    mask = t(0, 0, 1, 1, 1, 0)[None]
    rewards = place_response_rewards(t(2), mask)
    close(rewards, [[0, 0, 0, 0, 2, 0]])
    close(discounted_returns(rewards, gamma) * mask, [expected])


@pytest.mark.parametrize("gamma, expected", [(1.0, [0, 0, 2, 2, 2, 0]), (0.9, [0, 0, 1.62, 1.8, 2, 0])])
def test_e3_through_compute_advantages(make_config, gamma, expected):
    data = {"scores": t(2), "response_mask": torch.tensor([[0, 0, 0, 1, 1, 1, 0]])}
    out, _ = compute_advantages(data, make_config(gamma=gamma), pipeline="rlvr", estimator=reinforce)
    close(out["advantages"], [expected])


@pytest.mark.parametrize(
    "gamma, lambd, adv, ret",
    [
        (1.0, 0.95, [0.46575, 0.385, 0.3], [0.96575, 0.985, 1.0]),
        (0.9, 0.5, [0.11425, 0.165, 0.3], [0.61425, 0.765, 1.0]),
    ],
)
def test_e4_gae(gamma, lambd, adv, ret):
    a, r = gae_advantages(t(0, 0, 1)[None], t(0.5, 0.6, 0.7)[None], torch.ones(1, 3), gamma, lambd)
    close(a, [adv])
    close(r, [ret])


# --- E5, E6: KL ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("kl", [0.5, -0.5]),
        ("abs", [0.5, 0.5]),
        ("mse", [0.125, 0.125]),
        ("k3", [0.106531, 0.148721]),
    ],
)
def test_e5_kl_estimators(kind, expected):
    close(approx_kl(t(-1, -2), t(-1.5, -1.5), kind), expected)


def test_e5_kl_in_reward():
    rewards, metrics = kl_penalty(
        t(0, 1)[None],
        t(-1, -2)[None],
        t(-1.5, -1.5)[None],
        torch.ones(1, 2),
        kl_ctrl=FixedKLController(0.2),
        kind="kl",
    )
    close(rewards, [[-0.1, 1.1]])
    assert metrics["critic/kl_coef"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "current, target, n, horizon, expected",
    [
        (0.15, 0.1, 64, 1e4, 0.200256),
        (0.05, 0.1, 64, 1e4, 0.199744),
        (0.09, 0.1, 100, 1000, 0.198),
    ],
)
def test_e6_adaptive_kl(current, target, n, horizon, expected):
    ctrl = AdaptiveKLController(0.2, target=target, horizon=horizon)
    ctrl.update(current, n)
    assert ctrl.value == pytest.approx(expected, abs=ATOL)


# --- E7: whitening ---------------------------------------------------------------------------------


def test_e7_whiten():
    x = torch.tensor([[1.0, 1.0, 7.0], [-1.0, 5.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    close(masked_whiten(x, mask), [[0.57735, 0.57735, 0], [-1.154701, 0, 0]])


# --- E8: policy-gradient variants --------------------------------------------------------------------

E8_A = t(1, 1, -1, -1, -1)
E8_R = t(1.3, 0.7, 1.3, 0.7, 1.6)
E8_OLD = torch.full((5,), math.log(0.5))
E8_SCORES = t(1, 1, 0, 0, 0)

E8_EXPECTED = {
    "ppo": [-1.2, -0.7, 1.3, 0.8, 1.6],
    "vanilla": [0.430783, 1.049822, -0.430783, -1.049822, -0.223144],
    "tis": [0.430783, 0.734875, -0.430783, -0.734875, -0.223144],
    "topr": [0.430783, 1.049822, -0.430783, -0.734875, -0.223144],
    "cispo": [0.473861, 0.94484, -0.473861, -0.94484, -0.245458],
    "kimi15": [0.434225, 1.056183, -0.427341, -1.043461, -0.212098],
}


def e8_log_probs():
    return torch.log(0.5 * E8_R).requires_grad_(True)


def test_e8_log_probs():
    close(e8_log_probs().detach(), [-0.430783, -1.049822, -0.430783, -1.049822, -0.223144])


@pytest.mark.parametrize("variant", sorted(E8_EXPECTED))
def test_e8_registered_variants(make_config, variant):
    """The registered callables, reading ROLL's names from the config (§9 E8 defaults)."""
    fn = getattr(losses, variant)
    out = fn(
        e8_log_probs(),
        E8_OLD,
        E8_A,
        make_config(cispo_epsilon_low=0.1, cispo_epsilon_high=0.1),
        scores=E8_SCORES,
    )
    close(out.detach(), E8_EXPECTED[variant])


def test_e8_ppo_gradient():
    lp = e8_log_probs()
    losses.ppo_loss(lp, E8_OLD, E8_A, clip_low=0.2, clip_high=0.2).sum().backward()
    close(lp.grad, [0, -0.7, 1.3, 0, 1.6])


def test_e8_ppo_dual_clip_with_c_1_4(make_config):
    """ROLL's c = 1 + 2*pg_clip = 1.4; roll takes c from dual_clip_c, so pass 1.4 to reproduce E8."""
    expected = [-1.2, -0.7, 1.3, 0.8, 1.4]
    close(losses.ppo_loss(e8_log_probs(), E8_OLD, E8_A, dual_clip_c=1.4).detach(), expected)
    config = make_config(dual_clip_loss=True, dual_clip_c=1.4)
    close(losses.ppo(e8_log_probs(), E8_OLD, E8_A, config).detach(), expected)


def test_e8_cispo_unified_mask(make_config):
    expected = [0, 0.94484, -0.473861, 0, -0.245458]
    close(losses.cispo_loss(e8_log_probs(), E8_OLD, E8_A, unified_mask=True).detach(), expected)
    config = make_config(cispo_use_unified_mask=True)
    close(losses.cispo(e8_log_probs(), E8_OLD, E8_A, config).detach(), expected)


# --- E9, E10: aggregation and value loss ------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 2.5),
        ("seq-mean-token-sum", 5.0),
        ("seq-mean-token-mean", 3.0),
        ("seq-mean-token-sum-norm", 10 / 3),
    ],
)
def test_e9_aggregation(mode, expected):
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, -99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    norm = Normalisers.from_mask(mask, seq_len=3)  # T = 3: the longest response of the run
    assert float(agg_loss(loss, mask, mode, normalisers=norm)) == pytest.approx(expected, abs=ATOL)


@pytest.mark.parametrize("value_clip, expected", [(0.2, 0.4225), (None, 0.25)])
def test_e10_value_loss(value_clip, expected):
    loss = losses.value_loss(
        t(1, 0)[:, None], t(0.5, 0.1)[:, None], t(2, 0)[:, None], torch.ones(2, 1), value_clip=value_clip,
        normalisers=Normalisers.from_mask(torch.ones(2, 1), seq_len=1),
    )
    assert float(loss) == pytest.approx(expected, abs=ATOL)


# --- E11: GiGPO -------------------------------------------------------------------------------------


def e11_batch():
    """Rows (traj, state, step reward): A0(s0,0) A1(s1,1) B0(s0,0) B1(s2,0) B2(s1,0)."""
    return {
        "traj_id": ["A", "A", "B", "B", "B"],
        "step": [0, 1, 0, 1, 2],
        "state_hash": ["s0", "s1", "s0", "s2", "s1"],
        "traj_group_id": [0, 0, 0, 0, 0],
        "scores": t(0, 1, 0, 0, 0),
        "episode_scores": t(1, 1, 0, 0, 0),
        "response_mask": torch.tensor([[0, 1, 1]] * 5),
    }


def e11_config(make_config, method="mean"):
    return make_config(
        adv_estimator="gigpo",
        step_reward_gamma=0.95,
        reward_normalization=dict(grouping="traj_group_id", method=method),
    )


def test_e11_discounted_step_returns(make_config):
    close(step_returns(e11_batch(), e11_config(make_config)), [0.95, 1, 0, 0, 0])


@pytest.mark.parametrize(
    "mean_type, std_type, expected",
    [
        ("group", None, [0.6, 0.6, -0.4, -0.4, -0.4]),
        ("group", "group", [1.095443, 1.095443, -0.730295, -0.730295, -0.730295]),
    ],
)
def test_e11_row_weighted_episode_level(mean_type, std_type, expected):
    """ROLL's row-weighted episode statistics, reproduced with the normalisation primitive."""
    close(agentic_reward_norm(t(1, 1, 0, 0, 0), [0] * 5, mean_type, std_type), expected)


def test_e11_step_level(make_config):
    close(gigpo_step_advantages(e11_batch(), e11_config(make_config)), [0.475, 0.5, -0.475, 0, -0.5])


def test_e11_step_level_under_batch_std_zeroes_a_state_seen_once(make_config):
    """``norm_mean_type: batch, norm_std_type: batch``: g = [0.95, 1, 0, 0, 0], batch mean 0.39,
    unbiased batch std sqrt(1.142 / 4) = 0.534322, so (g - 0.39) / 0.534322 =
    [1.048057, 1.141634, -0.729897, -0.729897, -0.729897]; s2 (row 3) is seen once: 0, the
    group-of-one rule of the episode level (E14)."""
    config = make_config(adv_estimator="gigpo", step_reward_gamma=0.95, reward_normalization=dict(
        grouping="traj_group_id", norm_mean_type="batch", norm_std_type="batch"))
    close(gigpo_step_advantages(e11_batch(), config), [1.048057, 1.141634, -0.729897, 0, -0.729897])


def test_e11_combined_reward_row_weighted(make_config):
    """r = A_E + A_S with ROLL's row-weighted A_E gives the §9 values."""
    a_e = agentic_reward_norm(t(1, 1, 0, 0, 0), [0] * 5, "group", None)
    a_s = gigpo_step_advantages(e11_batch(), e11_config(make_config))
    close(a_e + a_s, [1.075, 1.1, -0.875, -0.4, -0.9])


def test_e11_roll_per_trajectory_episode_level(make_config):
    """roll's decision: one entry per trajectory (A=1, B=0, mean .5) instead of per step row."""
    config = e11_config(make_config)
    close(gigpo_episode_advantages(e11_batch(), config), [0.5, 0.5, -0.5, -0.5, -0.5])
    expected = [0.975, 1.0, -0.975, -0.5, -1.0]
    close(gigpo_response_rewards(e11_batch(), config, "agentic"), expected)
    out, _ = compute_advantages(e11_batch(), config, pipeline="agentic", estimator=gigpo)
    close(out["advantages"], [[v, v] for v in expected])


# --- E12, E13 ---------------------------------------------------------------------------------------


def test_e12_agentic_reinforce():
    mask = t(0, 1, 1, 0, 0, 1, 1, 1, 0)[None]
    rewards = torch.zeros(1, 9)
    rewards[0, 2], rewards[0, 7] = 0.5, 1.0
    close(per_turn_returns(rewards, mask, 0.9), [[0, 1.4, 1.4, 0, 0, 1, 1, 1, 0]])


def test_e13_segment_ratio():
    log_r = t(0, 0.2, 0.4, 0, -0.3, 0.1)[None]
    mask = t(0, 1, 1, 0, 1, 1)[None]
    close(
        segment_ratio(log_r, torch.zeros_like(log_r), mask), [[0, 1.349859, 1.349859, 0, 0.904837, 0.904837]]
    )


def test_e13_train_infer_weights():
    old, infer, mask = t(-1, -0.5)[None], t(-1.3, -0.4)[None], torch.ones(1, 2)
    close(is_weights(old, infer, mask, weight_type="token", upper_bound=1.2), [[1.2, 0.904837]])
    close(train_infer_ratio(old, infer, mask, "geometric"), [[1.105171, 1.105171]])
    close(train_infer_ratio(old, infer, mask, "sequence"), [[1.221403, 1.221403]])
