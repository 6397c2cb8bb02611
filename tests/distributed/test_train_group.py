"""Data-parallel training through worker groups: 2 ranks take the same step as 1 on the same batch."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "frozen_lake" / "grpo.yaml"


def make_run(tmp, world_size: int, per_device: int, strategy: str = "hf_train", optim: str = "sgd", **extra: str):
    from roll_core.config import load_config, resolve

    overrides = [f"logging_dir={tmp}/logs", f"output_dir={tmp}/ckpt", f"+actor_train.world_size={world_size}",
                 f"actor_train.training_args.per_device_train_batch_size={per_device}",
                 "actor_train.training_args.gradient_accumulation_steps=2",
                 # SGD: the update is linear in the gradient, so equal updates mean equal gradients (Adam's
                 # first step divides by |g| and turns float noise in near-zero gradients into full steps)
                 "actor_train.training_args.max_grad_norm=0", f"actor_train.training_args.optim={optim}",
                 f"actor_train.training_args.learning_rate={1.0 if optim == 'sgd' else 1e-3}",
                 f"actor_train.strategy_args.strategy_name={strategy}",
                 *[f"{k}={v}" for k, v in extra.items()]]
    return resolve(load_config(str(DEMO), overrides))


def make_batch(rows: int = 8, width: int = 12):
    import torch

    g = torch.Generator().manual_seed(0)
    lengths = [width - (i % 4) for i in range(rows)]  # rows of different lengths: the split balances tokens
    ids = torch.randint(3, 200, (rows, width), generator=g)
    attention = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    response = attention.clone()
    response[:, :5] = 0
    return {"input_ids": ids * attention, "attention_mask": attention, "response_mask": response,
            "advantages": torch.randn(rows, width - 1, generator=g), "scores": torch.randn(rows, generator=g)}


def group_of(run, world_size: int):
    from roll_core.distributed.layout import build_layout
    from roll_core.distributed.placement import Placement
    from roll_core.workers.train_group import TrainGroup

    placement = Placement.create(build_layout(run.config, ["actor_train"], on_gpus=False))
    return TrainGroup(run, "actor_train", placement, num_training_steps=4), placement


def one_step(run, world_size: int):
    import ray

    group, placement = group_of(run, world_size)
    try:
        batch = make_batch()
        before = group.compute_log_probs(batch)
        metrics = group.train_actor(batch, epochs=1, shuffle_seed=5)
        after = group.compute_log_probs(batch)
        weights = ray.get(group.export_weights_ref()[0])
        return {"before": before, "after": after, "metrics": metrics, "weights": weights,
                "ranks": placement.to_json()["actor_train"]}
    finally:
        group.shutdown()
        placement.remove()


def test_probes_answer_from_inside_their_bundles_and_a_live_rank_relocates_in_place(ray_session, tmp_path):
    import ray

    from roll_core.distributed.layout import build_layout
    from roll_core.distributed.placement import Placement, probe_bundles
    from roll_core.distributed.replacement import Replacements

    config = make_run(tmp_path, 2, per_device=4).config
    placement = Placement.create(build_layout(config, ["actor_train"], on_gpus=False))
    try:
        node = ray.get_runtime_context().get_node_id()
        answers = probe_bundles(placement.pg, list(placement.layout.bundles), timeout_s=120)
        assert [a[0] for a in answers] == [node, node] and all(a[2] == [] for a in answers)
        before = placement.ranks["actor_train"][1]
        assert placement.relocate("actor_train", 1) == before  # its bundle is on a live node: a replacement goes there

        # the record keeps where the replacement came up, not where its bundle was when it started: a
        # node lost without a word is still alive to Ray until its heartbeats are missed, then its
        # bundle (and the starting actor) move to a node that joins
        @ray.remote(num_cpus=0)
        class Rank:
            def node(self) -> tuple[str, str]:
                return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

        def start(options):
            placement.ranks["actor_train"][1] = replace(before, node_id="f" * 56, node_ip="10.9.9.9")  # the stale view
            return Rank.options(**options).remote()

        replacements = Replacements("actor_train", start, placement=placement, config=config)
        deadline = time.monotonic() + 120
        while not (up := replacements.poll([1])) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(up) == [1] and replacements.started == 1
        assert placement.ranks["actor_train"][1] == before  # its node, from the actor's own answer
        replacements.shutdown()
    finally:
        placement.remove()


@pytest.fixture(scope="module")
def single(ray_session, tmp_path_factory):
    return one_step(make_run(tmp_path_factory.mktemp("one"), 1, per_device=4), 1)


def test_two_hf_train_ranks_take_the_one_rank_step(ray_session, single, tmp_path):
    import torch

    double = one_step(make_run(tmp_path, 2, per_device=2), 2)  # the same 8-row global mini-batch
    assert [r["rank"] for r in double["ranks"]] == [0, 1]
    torch.testing.assert_close(double["before"], single["before"])  # the forward shares come back in row order
    assert not torch.allclose(single["after"], single["before"])
    torch.testing.assert_close(double["after"], single["after"], atol=2e-5, rtol=1e-4)
    for name, tensor in single["weights"].items():
        torch.testing.assert_close(double["weights"][name], tensor, atol=1e-6, rtol=1e-5)
    assert double["metrics"]["actor/optimizer_steps"] == single["metrics"]["actor/optimizer_steps"] == 1.0
    assert double["metrics"]["actor/loss"] == pytest.approx(single["metrics"]["actor/loss"], rel=1e-4)
    assert double["metrics"]["actor/grad_norm"] == pytest.approx(single["metrics"]["actor/grad_norm"], rel=1e-3)


def test_two_deepspeed_ranks_take_the_one_rank_step(ray_session, tmp_path):
    """DeepSpeed (ZeRO-2, its own AdamW) in roll run's worker groups: 2 CPU ranks step like 1 hf_train rank."""
    pytest.importorskip("deepspeed")
    import torch

    single = one_step(make_run(tmp_path / "one", 1, per_device=4, optim="adamw_torch"), 1)
    double = one_step(make_run(tmp_path / "two", 2, per_device=2, strategy="deepspeed_train", optim="adamw_torch",
                               **{"+actor_train.strategy_args.strategy_config.zero_stage": "2"}), 2)
    torch.testing.assert_close(double["before"], single["before"])
    assert not torch.allclose(single["after"], single["before"])
    torch.testing.assert_close(double["after"], single["after"], atol=1e-4, rtol=1e-4)
    assert double["metrics"]["actor/loss"] == pytest.approx(single["metrics"]["actor/loss"], rel=1e-4)


def test_an_uneven_batch_is_adjusted_or_refused(ray_session, tmp_path):
    from roll_core.errors import ConfigError

    run = make_run(tmp_path, 2, per_device=2)
    group, placement = group_of(run, 2)
    try:
        metrics = group.train_actor(make_batch(rows=7), epochs=1, shuffle_seed=1)  # batch_adjust_mode: copy
        assert metrics["actor_train/adjusted_rows"] == 1.0 and metrics["actor/optimizer_steps"] == 1.0
    finally:
        group.shutdown()
        placement.remove()
    with pytest.raises(ConfigError, match="7 rows cannot be split equally over 2 data-parallel ranks"):
        from roll_core.distributed.dispatch import split_rows

        split_rows(range(7), [1] * 7, 2)


def test_lora_on_two_ranks_takes_the_one_rank_step_and_gives_reference_log_probs(ray_session, tmp_path):
    """LoRA under DDP: 2 ranks train the adapters like 1 rank; the reference log-probs the ranks compute
    with adapters disabled are the untrained model's."""
    import ray
    import torch

    lora = {"actor_train.model_args.lora_target": "all-linear", "actor_train.model_args.lora_rank": "4",
            "init_kl_coef": "0.1"}
    results = []
    for world in (1, 2):
        run = make_run(tmp_path / str(world), world, per_device=4 // world, **lora)
        assert run.reference_from_actor and "reference" not in run.train_roles
        group, placement = group_of(run, world)
        try:
            batch = make_batch()
            before = group.compute_log_probs(batch)
            metrics = group.train_actor(batch, epochs=1, shuffle_seed=5)
            results.append({"before": before, "after": group.compute_log_probs(batch),
                            "ref": group.compute_ref_log_probs(batch), "metrics": metrics,
                            "weights": ray.get(group.export_weights_ref()[0]),
                            "counts": group.parameter_counts})
        finally:
            group.shutdown()
            placement.remove()
    single, double = results
    assert single["counts"] == double["counts"] and single["counts"][0] < single["counts"][1] / 5
    assert not torch.allclose(single["after"], single["before"])
    torch.testing.assert_close(double["after"], single["after"], atol=2e-5, rtol=1e-4)
    for result in results:
        torch.testing.assert_close(result["ref"], single["before"], atol=1e-6, rtol=0)
    for name, tensor in single["weights"].items():  # merged weights, HF names
        torch.testing.assert_close(double["weights"][name], tensor, atol=1e-6, rtol=1e-5)
    assert double["metrics"]["actor/loss"] == pytest.approx(single["metrics"]["actor/loss"], rel=1e-4)


def test_pi_old_computed_in_the_train_step_gives_the_drivers_update(ray_session, tmp_path):
    """Two optimiser steps (8 rows, mini-batches of 4): pi_old computed by each rank inside
    ``train_actor`` for the second step's rows (the first step's own forward is pi_old for its rows)
    trains as the driver's pi_old for every row does, on 1 rank and on 2, and over two epochs;
    without pi_old (every step's own forward) the second step's ratio is lost and the update differs."""
    import ray
    import torch

    def trained(name: str, world: int, epochs: int = 1, **options):
        run = make_run(tmp_path / name, world, per_device=2 // world)  # x 2 accumulation: 4 rows a step
        group, placement = group_of(run, world)
        try:
            batch = make_batch()
            batch["infer_log_probs"] = torch.zeros(batch["advantages"].shape)  # a sampler far off pi_old
            old = group.compute_log_probs(batch)
            if options.pop("driver", False):
                batch = {**batch, "old_log_probs": old}
            metrics = group.train_actor(batch, epochs=epochs, shuffle_seed=5, **options)
            mask = batch["response_mask"][:, 1:].float()
            metrics["expected_gap"] = float((old.abs() * mask).sum() / mask.sum())
            return metrics, ray.get(group.export_weights_ref()[0])
        finally:
            group.shutdown()
            placement.remove()

    driver_metrics, driver = trained("driver", 1, driver=True)
    here_metrics, here = trained("here", 1, old_log_probs_here=True)
    _, here_two_ranks = trained("here2", 2, old_log_probs_here=True)
    _, without = trained("without", 1)
    assert driver_metrics["actor/optimizer_steps"] == here_metrics["actor/optimizer_steps"] == 2.0
    assert "time/old_logp" in here_metrics and "time/old_logp" not in driver_metrics
    # the sampler's gap to pi_old is measured where pi_old is taken (the driver's correction step
    # measures it when the driver sends pi_old)
    assert "train_infer/logprob_abs_diff" not in driver_metrics
    assert here_metrics["train_infer/logprob_abs_diff"] == pytest.approx(here_metrics["expected_gap"], rel=1e-5)
    assert here_metrics["actor/loss"] == pytest.approx(driver_metrics["actor/loss"], rel=1e-5)
    for name, tensor in driver.items():
        torch.testing.assert_close(here[name], tensor, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(here_two_ranks[name], tensor, atol=1e-6, rtol=1e-5)
    assert max(float((without[n] - t).abs().max()) for n, t in driver.items()) > 1e-3
    # two epochs: rows train again after updates, so every row's pi_old is computed first, here as well
    _, driver_twice = trained("driver_e2", 1, epochs=2, driver=True)
    twice_metrics, here_twice = trained("here_e2", 1, epochs=2, old_log_probs_here=True)
    assert twice_metrics["actor/optimizer_steps"] == 4.0
    for name, tensor in driver_twice.items():
        torch.testing.assert_close(here_twice[name], tensor, atol=1e-6, rtol=1e-5)
