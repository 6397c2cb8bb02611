"""roll's decisions (docs/algorithms.md, "roll's decisions"): each fixed [Q], on an input where ROLL would differ."""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch

from roll_core.algorithms import losses
from roll_core.algorithms.advantages import (
    compute_advantages,
    gae,
    gigpo_episode_advantages,
    gigpo_step_advantages,
    grpo,
    reinforce,
)
from roll_core.algorithms.aggregation import Normalisers, agg_loss
from roll_core.algorithms.hparams import hp
from roll_core.algorithms.kl import FixedKLController, approx_kl
from roll_core.algorithms.normalization import agentic_reward_norm, reward_norm
from roll_core.algorithms.objective import policy_loss
from roll_core.errors import ConfigError

TYPES = ["batch", "group", None]


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_gae_masks_values_before_bootstrapping(make_config):
    """The bootstrap after the last response token is 0, not the critic's output on padding."""
    rewards = t(0, 0, 1, 0)[None]
    mask = t(1, 1, 1, 0)[None]
    values = t(0.5, 0.6, 0.7, 9.0)[None]  # 9.0 sits on a padding position
    data = {"token_level_rewards": rewards, "mask": mask, "values": values}
    out = gae(data, make_config(gamma=1.0, lambd=0.95))
    torch.testing.assert_close(out["advantages"][0, :3], t(0.46575, 0.385, 0.3), atol=1e-5, rtol=0)
    roll_style_last = 1.0 + 1.0 * 9.0 - 0.7  # ROLL: delta reads V from the padding position
    assert abs(float(out["advantages"][0, 2]) - roll_style_last) > 8
    # and nothing on padding can change the advantages of response tokens
    other = gae({**data, "values": t(0.5, 0.6, 0.7, -123.0)[None]}, make_config())
    torch.testing.assert_close(other["advantages"], out["advantages"])


def test_token_mean_masks_its_numerator(make_config):
    """A token dropped by a train-infer filter (loss_mask 0) but with A != 0 and log p != 0 does not count."""
    log_probs = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    response_mask = torch.tensor([[0, 1, 1, 1]])
    loss_mask = t(1, 1, 0)[None]  # the third token was filtered out
    data = {
        "old_log_probs": t(-0.5, -1.0, -1.0)[None],
        "advantages": t(1.0, -1.0, 3.0)[None],
        "response_mask": response_mask,
        "loss_mask": loss_mask,
    }
    config = make_config(loss_agg_mode="token-mean", pg_variant="vanilla")
    norm = Normalisers.from_mask(loss_mask, seq_len=3)
    loss, _ = policy_loss(data, log_probs, config, loss_variant=losses.vanilla, normalisers=norm)
    per_token = -data["advantages"] * log_probs.detach()
    assert float(loss.detach()) == pytest.approx(float((per_token * loss_mask).sum() / 2))
    roll_style = float(per_token.sum() / 2)  # ROLL: unmasked numerator, same N_tok
    assert abs(float(loss.detach()) - roll_style) > 1
    loss.backward()
    assert float(log_probs.grad[0, 2]) == 0.0


def gigpo_config(make_config, **rn):
    return make_config(adv_estimator="gigpo", reward_normalization=dict(grouping="traj_group_id", **rn))


def test_gigpo_episode_stats_per_trajectory_not_per_row(make_config):
    """Trajectory A has 1 step, B has 4: ROLL's row-weighted mean would be 0.2, roll's is 0.5."""
    data = {
        "traj_id": ["A", "B", "B", "B", "B"],
        "traj_group_id": [0] * 5,
        "episode_scores": t(1, 0, 0, 0, 0),
        "scores": t(1, 0, 0, 0, 0),
        "step": [0, 0, 1, 2, 3],
        "state_hash": list("abcde"),
    }
    for method, expected in [
        ("mean", [0.5, -0.5, -0.5, -0.5, -0.5]),
        ("mean_std", [0.707106, -0.707106, -0.707106, -0.707106, -0.707106]),
    ]:
        got = gigpo_episode_advantages(data, gigpo_config(make_config, method=method))
        torch.testing.assert_close(got, t(*expected), atol=1e-5, rtol=0)
    roll_style = agentic_reward_norm(t(1, 0, 0, 0, 0), None, "batch", None)
    assert float(roll_style[0]) == pytest.approx(0.8)


def test_gigpo_state_groups_are_not_pooled_across_traj_groups(make_config):
    """The same observation in two env groups forms two anchor groups (each a singleton here)."""
    data = {
        "traj_id": ["A", "B"],
        "traj_group_id": ["g1", "g2"],
        "state_hash": ["s0", "s0"],
        "step": [0, 0],
        "scores": t(1, 0),
        "episode_scores": t(1, 0),
    }
    got = gigpo_step_advantages(data, gigpo_config(make_config, method="mean"))
    torch.testing.assert_close(got, t(0, 0))
    pooled = agentic_reward_norm(t(1, 0), ["s0", "s0"], "group", None)  # ROLL's hash-only grouping
    torch.testing.assert_close(pooled, t(0.5, -0.5))


def test_gigpo_step_level_obeys_explicit_norm_types(make_config):
    """method 'mean' alone is mean-only; explicit group/group types add the std, as configured."""
    data = {
        "traj_id": ["A", "B"],
        "traj_group_id": [0, 0],
        "state_hash": ["s0", "s0"],
        "step": [0, 0],
        "scores": t(0.95, 0),
        "episode_scores": t(0.95, 0),
    }
    mean_only = gigpo_step_advantages(data, gigpo_config(make_config, method="mean"))
    torch.testing.assert_close(mean_only, t(0.475, -0.475), atol=1e-6, rtol=0)
    explicit = gigpo_step_advantages(
        data, gigpo_config(make_config, method="mean", norm_mean_type="group", norm_std_type="group")
    )
    torch.testing.assert_close(explicit, t(0.707106, -0.707106), atol=1e-5, rtol=0)


def test_reward_clip_is_applied_once(make_config):
    """The response reward is clipped once; the KL penalty is not clipped again (ROLL clamps twice)."""
    data = {
        "scores": t(5.0),
        "response_mask": torch.tensor([[0, 1, 1]]),
        "old_log_probs": t(-4.0, -1.0)[None],
        "ref_log_probs": t(-1.0, -1.0)[None],
    }
    config = make_config(reward_clip=1.0, add_token_level_kl=True, init_kl_coef=1.0)
    out, _ = compute_advantages(
        data, config, pipeline="rlvr", estimator=reinforce, kl_ctrl=FixedKLController(1.0)
    )
    assert float(out["response_rewards"][0]) == 1.0
    # k1 = -3 on the first token: penalty +3, unclipped; ROLL's second clamp would make it 1
    torch.testing.assert_close(out["token_level_rewards"], t(3.0, 1.0)[None])


def reference_norm(x, groups, mean_type, std_type):
    """Straight-from-the-spec reference: per-row mu and sigma with Python's statistics module."""
    members = {g: [v for v, h in zip(x, groups) if h == g] for g in groups}
    out = []
    for v, g in zip(x, groups):
        pools = {"batch": x, "group": members[g]}
        mu = statistics.mean(pools[mean_type]) if mean_type else 0.0
        if std_type is None:
            out.append(v - mu)
            continue
        pool = pools[std_type]
        sigma = statistics.stdev(pool) if len(pool) > 1 else 0.0
        out.append(0.0 if len(pool) <= 1 or sigma <= 1e-6 else (v - mu) / (sigma + 1e-6))
    return out


@pytest.mark.parametrize("mean_type, std_type", list(itertools.product(TYPES, TYPES)))
def test_every_norm_pairing_works(mean_type, std_type):
    x = [0.3, 1.0, -2.0, 0.5, 4.0, 4.0, 1.5, -1.0, 2.0]
    contiguous = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    expected = torch.tensor(reference_norm(x, contiguous, mean_type, std_type))
    got = reward_norm(torch.tensor(x), 3, mean_type, std_type)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    keys = ["a", "b", "a", "c", "b", "a", "c", "c", "b"]
    expected = torch.tensor(reference_norm(x, keys, mean_type, std_type))
    torch.testing.assert_close(
        agentic_reward_norm(torch.tensor(x), keys, mean_type, std_type), expected, atol=1e-5, rtol=1e-5
    )


def test_equal_group_with_batch_mean_and_group_std_is_zero_not_huge():
    got = reward_norm(t(1, 1, 0, 1), 2, "batch", "group")
    assert got[:2].abs().max() == 0
    assert got[2:].abs().max() < 10


def test_pg_variant_parameters_are_read_from_the_config(make_config):
    """Non-default values change the loss (ROLL silently used the hard-coded defaults)."""
    lp, old, adv = torch.log(t(0.6)), torch.log(t(0.5)), t(1.0)
    base = make_config()
    assert float(losses.tis(lp, old, adv, base)) != float(
        losses.tis(lp, old, adv, make_config(tis_upper_bound=2.0))
    )
    assert float(losses.cispo(lp, old, adv, base)) != float(
        losses.cispo(lp, old, adv, make_config(cispo_epsilon_high=0.5))
    )
    assert float(losses.kimi15(lp, old, adv, base)) != float(
        losses.kimi15(lp, old, adv, make_config(kimi15_tau=1.0))
    )
    scores = t(0.0)
    assert float(losses.topr(lp, old, adv, base, scores=scores)) != float(
        losses.topr(lp, old, adv, make_config(topr_negative_weight=2.0), scores=scores)
    )


def test_missing_config_field_is_an_error_not_a_default():
    from types import SimpleNamespace

    with pytest.raises(ConfigError, match="tis_upper_bound"):
        losses.tis(
            t(-1.0), t(-1.0), t(1.0), SimpleNamespace(actor_train=SimpleNamespace(tis_lower_bound=0.0))
        )
    assert (
        hp(SimpleNamespace(actor_train=SimpleNamespace(pg_variant="tis"), pg_variant="x"), "pg_variant")
        == "tis"
    )


def test_dual_clip_uses_dual_clip_c_default_3(make_config):
    lp, old, adv = torch.log(t(5.0)), t(0.0), t(-1.0)
    config = make_config(dual_clip_loss=True)
    assert float(losses.ppo(lp, old, adv, config)) == pytest.approx(3.0)  # ROLL: 1.4
    assert float(losses.ppo(lp, old, adv, make_config())) == pytest.approx(5.0)


def test_grpo_in_agentic_mode_is_reward_normalization_only(make_config):
    """Agentic grpo does not force group stats: with method identity it is plain REINFORCE."""
    data = {
        "scores": t(1, 0, 0, 1),
        "response_mask": torch.tensor([[0, 1]] * 4),
        "traj_group_id": [0, 0, 1, 1],
    }
    out, _ = compute_advantages(data, make_config(adv_estimator="grpo"), pipeline="agentic", estimator=grpo)
    torch.testing.assert_close(out["response_rewards"], t(1, 0, 0, 1))


def test_full_kl_refuses_per_token_inputs():
    with pytest.raises(ValueError, match="full-vocabulary"):
        approx_kl(torch.zeros(2, 3), torch.zeros(2, 3), "full")
    logp = torch.log_softmax(torch.randn(2, 3, 5), -1)
    assert approx_kl(logp, logp, "full").abs().max() < 1e-6


def test_seq_mean_token_sum_norm_uses_a_global_constant():
    """Not the micro-batch's padded length: T is passed once for the whole step."""
    from roll_core.algorithms.aggregation import Normalisers

    loss, mask = torch.ones(2, 4), torch.tensor([[1.0, 1, 0, 0], [1, 0, 0, 0]])
    norm = Normalisers(num_tokens=3, num_seqs=2, seq_len=8)
    assert float(agg_loss(loss, mask, "seq-mean-token-sum-norm", normalisers=norm)) == pytest.approx(3 / 8)
    assert float(
        agg_loss(loss[:, :2], mask[:, :2], "seq-mean-token-sum-norm", normalisers=norm)
    ) == pytest.approx(3 / 8)


def test_a_group_of_one_is_zero_in_agentic_norm_also_with_batch_std():
    """§2.2: a group with one member says nothing relative to its group: advantage 0, even when
    the std is taken over the batch. Hand-computed: scores 1, 0, 3; batch mean 4/3, unbiased
    batch std sqrt(7/3) = 1.527525; group a = rows 0, 1; group b = row 2 alone."""
    scores = t(1.0, 0.0, 3.0)
    out = agentic_reward_norm(scores, ["a", "a", "b"], "batch", "batch")
    sigma = (7 / 3) ** 0.5
    torch.testing.assert_close(out, t((1 - 4 / 3) / (sigma + 1e-6), (0 - 4 / 3) / (sigma + 1e-6), 0.0))
    assert float(out[0]) == pytest.approx(-0.218218, abs=1e-6) and float(out[1]) == pytest.approx(-0.872872, abs=1e-6)
    # RLVR's reward_norm has no such rule: group_size 1 with batch std (REINFORCE++) keeps its signal
    rlvr = reward_norm(scores, 1, "batch", "batch")
    assert float(rlvr[2]) == pytest.approx((3 - 4 / 3) / (sigma + 1e-6), abs=1e-6)


@pytest.mark.parametrize("alias, name", [("k1", "kl"), ("k2", "mse"), ("low_var_kl", "k3")])
def test_kl_aliases_used_by_peers_are_the_same_estimators(alias, name):
    logp, base = t(-0.2, -1.5, -3.0), t(-0.7, -1.0, -2.0)
    torch.testing.assert_close(approx_kl(logp, base, alias), approx_kl(logp, base, name))
    if alias == "low_var_kl":  # verl's formula: r - log r - 1 with r = p_ref / p, clamped
        r = torch.exp(base - logp)
        torch.testing.assert_close(approx_kl(logp, base, alias), (r - (base - logp) - 1).clamp(-10, 10))


def test_seq_mean_token_sum_norm_takes_t_from_the_config():
    """T is the run's longest response (RLVR) or trajectory (agentic), never a mini-batch's width."""
    from types import SimpleNamespace

    from roll_core.algorithms.aggregation import norm_seq_len
    from roll_core.workers.train_worker import TrainWorker

    rlvr = SimpleNamespace(pipeline_type="rlvr", response_length=8, sequence_length=40, prompt_length=32)
    assert norm_seq_len(rlvr) == 8
    assert norm_seq_len(SimpleNamespace(pipeline_type="rlvr", response_length=None, sequence_length=40,
                                        prompt_length=30)) == 10
    assert norm_seq_len(SimpleNamespace(pipeline_type="agentic", response_length=None, sequence_length=64,
                                        prompt_length=None)) == 64
    with pytest.raises(ConfigError, match="sequence_length"):
        norm_seq_len(SimpleNamespace(pipeline_type="agentic", sequence_length=None))
    # the train worker builds every step's normalisers with it: a narrow mini-batch gets T = 8 too
    batch = {"response_mask": torch.tensor([[0, 1, 1], [0, 0, 1]])}
    norm = TrainWorker.normalisers(SimpleNamespace(config=rlvr), batch)
    assert (norm.num_tokens, norm.num_seqs, norm.seq_len) == (3.0, 2.0, 8.0)
    loss = torch.ones(2, 2)
    value = agg_loss(loss, batch["response_mask"][:, 1:], "seq-mean-token-sum-norm", normalisers=norm)
    assert float(value) == pytest.approx(3 / 8)


def test_a_group_of_equal_rewards_is_exactly_zero_under_group_mean():
    """Found by hypothesis: with group mean and batch std, 3 x 3.5682779 averages to a float one ulp
    off, and the group got advantages of 1e-7 instead of 0."""
    x = torch.tensor([3.5682779131611113] * 3 + [0.0] * 3)
    assert reward_norm(x, 3, "group", "batch").abs().max() == 0
    assert agentic_reward_norm(x, ["a"] * 3 + ["b"] * 3, "group", None).abs().max() == 0
