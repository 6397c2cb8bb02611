"""Property tests (hypothesis): micro-batch invariance, masking, zero advantage, §6.3 gradients."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from roll_core.algorithms import losses
from roll_core.algorithms.advantages import compute_advantages, gae, gigpo_response_rewards, grpo
from roll_core.algorithms.aggregation import AGG_MODES, Normalisers, agg_loss
from roll_core.algorithms.normalization import agentic_reward_norm, reward_norm
from roll_core.algorithms.objective import policy_loss

# make_config is a pure factory, so sharing it across examples is safe
FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VARIANTS = ["ppo", "vanilla", "tis", "topr", "cispo", "kimi15"]
MODES = sorted(AGG_MODES)


def random_batch(seed: int, rows: int, width: int):
    """A label-aligned micro-batch; every row has at least one mask token, some rows have gaps."""
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(rows, width, generator=g) < 0.7).float()
    mask[torch.arange(rows), torch.randint(0, width, (rows,), generator=g)] = 1.0
    old = -torch.rand(rows, width, generator=g) * 2 - 0.05
    return {
        "log_probs": old + 0.3 * torch.randn(rows, width, generator=g),
        "old_log_probs": old,
        "ref_log_probs": old + 0.2 * torch.randn(rows, width, generator=g),
        "advantages": torch.randn(rows, width, generator=g),
        "entropy": torch.rand(rows, width, generator=g),
        "is_weights": torch.rand(rows, width, generator=g) + 0.5,
        "sample_weights": torch.rand(rows, generator=g) + 0.5,
        "scores": torch.randint(-1, 2, (rows,), generator=g).float(),
        "loss_mask": mask,
    }


def splits(draw_sizes, rows):
    bounds, start = [], 0
    for size in draw_sizes:
        if start >= rows:
            break
        bounds.append((start, min(rows, start + size)))
        start += size
    if start < rows:
        bounds.append((start, rows))
    return bounds


def micro(batch, lo, hi):
    return {k: v[lo:hi] for k, v in batch.items()}


def trim(batch):
    """Cut trailing columns with no mask token, as a dynamic-padding micro-batcher would."""
    width = int(batch["loss_mask"].sum(0).nonzero().max()) + 1
    return {k: (v[:, :width] if v.dim() == 2 else v) for k, v in batch.items()}


@pytest.mark.parametrize("mode", MODES)
@FEW
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(1, 7),
    width=st.integers(1, 6),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=7),
)
def test_agg_loss_is_invariant_to_micro_batch_split(mode, seed, rows, width, sizes):
    batch = random_batch(seed, rows, width)
    loss, mask, w = batch["advantages"], batch["loss_mask"], batch["sample_weights"]
    norm = Normalisers.from_mask(mask, seq_len=mask.shape[-1])
    whole = agg_loss(loss, mask, mode, normalisers=norm, weights=w)
    parts = []
    for lo, hi in splits(sizes, rows):
        mb = trim(micro({"l": loss, "loss_mask": mask, "w": w}, lo, hi))
        parts.append(agg_loss(mb["l"], mb["loss_mask"], mode, normalisers=norm, weights=mb["w"]))
    torch.testing.assert_close(sum(parts), whole, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
@FEW
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(1, 6),
    width=st.integers(1, 5),
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=6),
    mode=st.sampled_from(MODES),
    ratio_type=st.sampled_from(["token", "segment", "seq"]),
)
def test_policy_loss_and_gradient_are_invariant_to_micro_batch_split(
    make_config, variant, seed, rows, width, sizes, mode, ratio_type
):
    config = make_config(
        pg_variant=variant,
        loss_agg_mode=mode,
        ratio_type=ratio_type,
        use_kl_loss=True,
        kl_loss_coef=0.3,
        entropy_loss_coef=0.01,
        dual_clip_loss=True,
    )
    fn = getattr(losses, variant)
    batch = random_batch(seed, rows, width)
    norm = Normalisers.from_mask(batch["loss_mask"], seq_len=batch["loss_mask"].shape[-1])

    def run(b):
        lp = b["log_probs"].clone().requires_grad_(True)
        loss, _ = policy_loss(b, lp, config, entropy=b["entropy"], normalisers=norm, loss_variant=fn)
        loss.backward()
        return loss.detach(), lp.grad

    whole_loss, whole_grad = run(batch)
    total = torch.zeros(())
    for lo, hi in splits(sizes, rows):
        loss, grad = run(micro(batch, lo, hi))
        total = total + loss
        torch.testing.assert_close(grad, whole_grad[lo:hi], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(total, whole_loss, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
@FEW
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(1, 5),
    width=st.integers(2, 6),
    mode=st.sampled_from(MODES),
    ratio_type=st.sampled_from(["token", "segment", "seq"]),
    noise=st.floats(-3, 3),
)
def test_masked_tokens_never_change_loss_or_gradient(
    make_config, variant, seed, rows, width, mode, ratio_type, noise
):
    config = make_config(
        pg_variant=variant,
        loss_agg_mode=mode,
        ratio_type=ratio_type,
        use_kl_loss=True,
        kl_loss_coef=0.3,
        entropy_loss_coef=0.01,
        dual_clip_loss=True,
    )
    fn = getattr(losses, variant)
    batch = random_batch(seed, rows, width)
    off = 1 - batch["loss_mask"]
    poked = dict(batch)
    for key in ("log_probs", "old_log_probs", "ref_log_probs", "advantages", "entropy", "is_weights"):
        poked[key] = batch[key] + noise * off

    def run(b):
        lp = b["log_probs"].clone().requires_grad_(True)
        norm = Normalisers.from_mask(b["loss_mask"], seq_len=width)
        loss, _ = policy_loss(b, lp, config, entropy=b["entropy"], loss_variant=fn, normalisers=norm)
        loss.backward()
        return loss.detach(), lp.grad

    loss, grad = run(batch)
    loss2, grad2 = run(poked)
    torch.testing.assert_close(loss2, loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad2, grad, atol=1e-6, rtol=1e-5)
    assert float((grad * off).abs().max()) == 0.0


@FEW
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 5), width=st.integers(2, 6), noise=st.floats(-50, 50))
def test_values_off_the_mask_never_change_gae(make_config, seed, rows, width, noise):
    batch = random_batch(seed, rows, width)
    mask = batch["loss_mask"]
    data = {"token_level_rewards": batch["advantages"] * mask, "mask": mask, "values": batch["entropy"]}
    out = gae(data, make_config(gamma=0.97, lambd=0.9))
    poked = gae({**data, "values": data["values"] + noise * (1 - mask)}, make_config(gamma=0.97, lambd=0.9))
    torch.testing.assert_close(poked["advantages"] * mask, out["advantages"] * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(poked["returns"] * mask, out["returns"] * mask, atol=1e-5, rtol=1e-5)


#: every pairing that involves groups: mean 'group', or std 'group' (degenerate-std rule) with any mean
PAIRINGS = [(m, s) for m in ("batch", "group", None) for s in ("batch", "group", None) if "group" in (m, s)]


@FEW
@given(
    others=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=4),
    size=st.integers(1, 4),
    constant=st.floats(-5, 5, allow_nan=False),
    pairing=st.sampled_from(PAIRINGS),
)
def test_equal_reward_group_gets_zero_advantage(others, size, constant, pairing):
    rest = (others * size)[: size * len(others)]  # whole groups for the RLVR contiguous layout
    x = torch.tensor([constant] * size + rest)
    assert reward_norm(x, size, *pairing)[:size].abs().max() == 0
    keys = ["same"] * size + list(range(len(rest)))
    assert agentic_reward_norm(x, keys, *pairing)[:size].abs().max() == 0


@FEW
@given(
    constant=st.floats(-3, 3, allow_nan=False),
    n=st.integers(2, 5),
    other=st.lists(st.floats(-3, 3), min_size=2, max_size=5),
)
def test_equal_reward_group_zero_through_estimators(make_config, constant, n, other):
    scores = torch.tensor([constant] * n + other[:n] + [0.0] * (n - len(other[:n])))
    mask = torch.tensor([[0, 1, 1]] * (2 * n))
    out, _ = compute_advantages(
        {"scores": scores, "response_mask": mask},
        make_config(adv_estimator="grpo", num_return_sequences_in_group=n),
        pipeline="rlvr",
        estimator=grpo,
    )
    assert out["advantages"][:n].abs().max() == 0
    config = make_config(reward_normalization=dict(grouping="traj_group_id", method="mean_std"))
    data = {"scores": scores, "response_mask": mask, "traj_group_id": [0] * n + [1] * n}
    out, _ = compute_advantages(data, config, pipeline="agentic", estimator=grpo)
    assert out["advantages"][:n].abs().max() == 0
    # gigpo: one traj group where every trajectory scores the same and every state repeats
    steps = {
        "traj_id": [f"t{i}" for i in range(n)],
        "traj_group_id": [0] * n,
        "state_hash": ["s"] * n,
        "step": [0] * n,
        "scores": torch.full((n,), constant),
        "episode_scores": torch.full((n,), constant),
    }
    gcfg = make_config(reward_normalization=dict(grouping="traj_group_id", method="mean_std"))
    assert gigpo_response_rewards(steps, gcfg, "agentic").abs().max() == 0


# --- §6.3: gradient w.r.t. log pi of each variant, checked with autograd -------------------------

EPS_LO, EPS_HI, C = 0.2, 0.28, 3.0
TIS_LB, TIS_UB, W_POS, W_NEG, TAU = 0.3, 1.5, 1.5, 0.5, 0.3


def clamp(x, lo, hi):
    return min(max(x, lo), hi)


def table_gradient(variant, r, a, score):
    """The right-hand column of docs/algorithms.md §6.3 for one token (d loss / d log pi)."""
    ppo_clipped = (a > 0 and r > 1 + EPS_HI) or (a < 0 and r < 1 - EPS_LO)
    ppo = 0.0 if ppo_clipped else -r * a
    cispo_dropped = (a > 0 and r > 1.1) or (a < 0 and r < 0.9)
    table = {
        "ppo": lambda: ppo,
        "ppo_dual": lambda: 0.0 if a < 0 and r > C else ppo,
        "vanilla": lambda: -a,
        "tis": lambda: -clamp(r, TIS_LB, TIS_UB) * a,
        "topr": lambda: -a * W_POS if score > 0 else -clamp(r, 0.0, 1.0) * a * W_NEG,
        "cispo": lambda: -clamp(r, 0.9, 1.1) * a,
        "cispo_unified": lambda: 0.0 if cispo_dropped else -clamp(r, 0.9, 1.1) * a,
        "kimi15": lambda: -a + TAU * math.log(r),
    }
    return table[variant]()


@pytest.mark.parametrize(
    "variant", ["ppo", "ppo_dual", "vanilla", "tis", "topr", "cispo", "cispo_unified", "kimi15"]
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    r=st.floats(0.2, 5.0),
    a=st.floats(-2, 2).filter(lambda v: abs(v) > 1e-3),
    score=st.sampled_from([-1.0, 0.0, 1.0]),
    old=st.floats(-3, -0.1),
)
def test_gradient_matches_the_table(make_config, variant, r, a, score, old):
    for edge in (1 - EPS_LO, 1 + EPS_HI, 0.9, 1.1, 1.0, C, TIS_LB, TIS_UB):
        assume(abs(r - edge) > 1e-3)
    cfg = make_config(
        use_pg_clip_range=True,
        pg_clip_low=EPS_LO,
        pg_clip_high=EPS_HI,
        dual_clip_loss=variant == "ppo_dual",
        dual_clip_c=C,
        tis_lower_bound=TIS_LB,
        tis_upper_bound=TIS_UB,
        cispo_use_unified_mask=variant == "cispo_unified",
        topr_positive_weight=W_POS,
        topr_negative_weight=W_NEG,
        kimi15_tau=TAU,
    )
    fn = getattr(losses, variant.split("_")[0])
    old_lp = torch.tensor([[old]], dtype=torch.float64)
    lp = (old_lp + math.log(r)).requires_grad_(True)
    fn(
        lp, old_lp, torch.tensor([[a]], dtype=torch.float64), cfg, scores=torch.tensor([score])
    ).sum().backward()
    assert float(lp.grad) == pytest.approx(table_gradient(variant, r, a, score), abs=1e-6)
