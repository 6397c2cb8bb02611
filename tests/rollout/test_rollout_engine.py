"""The rollout engine on Ray: groups, sync batches, validation, faults, a killed env manager, the model."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict

import pytest

from roll_core.config import bind_env, resolve
from roll_core.errors import ConfigError
from roll_core.rollout import EnvSpec, RolloutScheduler, RolloutSpec, RolloutTimeout, rollout_spec

pytestmark = pytest.mark.ray

TEST_ENVS = "roll_rollout_testenvs"  # tests/rollout/roll_rollout_testenvs.py, on the workers' PYTHONPATH

MODEL_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_counting_model.yaml")
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
SEED_CONFIG = os.path.join(FIXTURES, "frozen_lake_async_with_env_managers.yaml")


def spec_for(tags, *, groups=4, group_size=2, per_worker=4, mode="train", env_config=None, partition=None,
             **changes):
    from roll_core.plugins import PluginManager
    from roll_core.rollout.engine.spec import partition_groups

    registry = PluginManager(extra_modules=[TEST_ENVS]).registry

    names = {"Counting": "test_counting", "Flaky": "test_flaky", "Slow": "test_slow", "Broken": "test_broken"}
    values = dict(mode=mode, seed=3, num_env_groups=groups, group_size=group_size, max_env_num_per_worker=per_worker,
                  group_tags=partition_groups(groups, tags, partition),
                  envs={t: EnvSpec(t, bind_env(names[t], dict((env_config or {}).get(t, {})), registry=registry))
                        for t in tags},
                  sequence_length=2048, policy="random", step_timeout_s=5.0)
    values.update(changes)
    return RolloutSpec(**values)


def check_groups(batch, group_size):
    """Rows come in complete groups: one (group, episode) per traj_group_id, one seed per group."""
    groups = defaultdict(list)
    for traj in batch.trajectories:
        groups[traj.traj_group_id].append(traj)
    assert all(len(members) == group_size for members in groups.values())
    for members in groups.values():
        assert len({(t.group_id, t.episode_id, t.seed) for t in members}) == 1
        assert sorted(t.member for t in members) == list(range(group_size))
        assert len({t.turns[0].observation for t in members}) == 1  # the same instance
    order = batch["traj_group_id"]
    assert all(order[i] == order[i - i % group_size] for i in range(len(order)))  # contiguous rows
    return groups


def test_frozen_lake_128_groups_of_8_in_sync_mode(ray_session, tokenizer):
    from roll_core.config import load_config

    # the seed config in sync mode, on 4 workers, with episodes capped at 8 turns to keep the test short
    config = load_config(SEED_CONFIG, ["train_env_manager.max_env_num_per_worker=256", "async_generation_ratio=0",
                                       "+custom_envs.FrozenLake.env_type=frozen_lake",
                                       "+custom_envs.FrozenLake.max_steps=8"])
    spec = rollout_spec(resolve(config, roles=()), "train", policy="random")
    assert (spec.num_env_groups, spec.group_size, spec.num_workers) == (128, 8, 4)
    with RolloutScheduler(spec, tokenizer, batch_size=1024) as scheduler:
        first = scheduler.get_batch(1024, timeout=240)
        assert len(first) == 1024 and first.tensors["input_ids"].shape[0] == 1024
        groups = check_groups(first, 8)
        assert len(groups) == 128
        assert len({members[0].seed for members in groups.values()}) == 128
        assert scheduler.status()["in_flight_groups"] == 0  # sync: loops wait for the next get_batch
        second = scheduler.get_batch(timeout=240)
        check_groups(second, 8)
        assert {t.episode_id for t in second.trajectories} == {1}  # each group played exactly one more episode
        assert {t.seed for t in second.trajectories}.isdisjoint({t.seed for t in first.trajectories})
        m = second.metrics
        assert m["rollout/trajectories_per_s"] > 0 and m["env/FrozenLake/action_is_valid"] > 0.99
        assert 0 <= m["env/FrozenLake/success"] <= 1 and m["env/FrozenLake/num_steps"] >= 1
        assert m["rollout/dropped_trajectories"] == 0


def test_validation_passes_are_identical_and_saved_as_gifs(ray_session, tokenizer, tmp_path):
    spec = spec_for(["Counting"], groups=6, group_size=1, per_worker=3, mode="val",
                    render_save_dir=str(tmp_path), render_max_trajectories=2)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        passes = [scheduler.get_batch(6, timeout=120) for _ in range(2)]
    views = [[(t.group_id, t.episode_id, t.seed, [m["content"] for m in t.messages]) for t in b.trajectories]
             for b in passes]
    assert views[0] == views[1]
    assert [v[0] for v in views[0]] == list(range(6))
    for pass_id in (1, 2):
        gifs = sorted(os.listdir(tmp_path / "val" / f"pass_{pass_id:04d}"))
        assert gifs == ["Counting_g0_e0_m0.gif", "Counting_g1_e0_m0.gif"]
    assert passes[0].trajectories[0].frames_path.endswith("Counting_g0_e0_m0.gif")


def test_env_raising_in_10_percent_of_steps_still_fills_batches(ray_session, tokenizer):
    spec = spec_for(["Flaky"], groups=8, group_size=4, per_worker=16,
                    env_config={"Flaky": {"fail_prob": 0.1, "max_target": 3}})
    with RolloutScheduler(spec, tokenizer) as scheduler:
        drops = 0
        for _ in range(3):
            batch = scheduler.get_batch(32, timeout=120)
            check_groups(batch, 4)
            assert len(batch) == 32
            drops += batch.metrics["rollout/dropped_trajectories"]
            assert batch.metrics.get("rollout/dropped_trajectories/env_error", 0) == \
                batch.metrics["rollout/dropped_trajectories"] - batch.metrics.get(
                    "rollout/dropped_trajectories/group_abandoned", 0)
        assert drops > 0


def test_step_timeout_drops_only_the_hung_trajectory(ray_session, tokenizer):
    spec = spec_for(["Slow"], groups=4, group_size=2, per_worker=8, step_timeout_s=0.3,
                    env_config={"Slow": {"sleep_prob": 0.3, "sleep_s": 1.0}})
    with RolloutScheduler(spec, tokenizer) as scheduler:
        batch = scheduler.get_batch(8, timeout=120)
        check_groups(batch, 2)
    assert batch.metrics["rollout/dropped_trajectories/timeout"] > 0


def test_broken_groups_give_up_and_healthy_groups_fill_the_batch(ray_session, tokenizer):
    spec = spec_for(["Counting", "Broken"], groups=4, group_size=2, partition=[3, 1], max_episode_retries=2)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        batch = scheduler.get_batch(8, timeout=120)  # 4 groups' worth from the 3 healthy groups
        check_groups(batch, 2)
        assert set(batch["tag"]) == {"Counting"}
        assert batch.metrics["rollout/dropped_trajectories/env_error"] >= 2


def test_group_filter_replaces_dropped_groups_and_stops_when_nothing_passes(ray_session, tokenizer, test_registry):
    from roll_core.rollout import RolloutError

    equal_returns = test_registry.get("group_filter", "equal_returns")
    spec = spec_for(["Counting"], groups=4, group_size=2, per_worker=8, group_filter=equal_returns)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        batch = scheduler.get_batch(8, timeout=120)
        groups = check_groups(batch, 2)
        assert len(groups) == 4  # the batch is full
        assert all(len({t.episode_reward for t in members}) == 2 for members in groups.values())  # none filtered
        m = batch.metrics
        filtered = m["rollout/filtered_groups/equal_returns"]
        assert m["rollout/filtered_groups"] == filtered and m["rollout/dropped_trajectories"] == 0
        assert sum(scheduler.state_dict()["next_episode"]) == 4 + filtered  # episodes played = trained + dropped
        assert m["rollout/groups_per_trained_group"] == (4 + filtered) / 4
    # the solver succeeds in every episode: every group's returns are equal, nothing can pass
    spec = spec_for(["Counting"], groups=2, group_size=2, policy="scripted", group_filter=equal_returns,
                    max_groups_per_step=6)
    with RolloutScheduler(spec, tokenizer) as scheduler:
        with pytest.raises(RolloutError, match=r"0 of 2 groups passed after [56] were consumed, and "
                           r"max_groups_per_step is 6 \(dropped by reason: equal_returns [56]"):
            scheduler.get_batch(4, timeout=120)
    # unfilled_batch: fill: the same rollout completes the batch with the latest filtered groups and goes on
    spec = spec_for(["Counting"], groups=2, group_size=2, policy="scripted", group_filter=equal_returns,
                    max_groups_per_step=6, unfilled_batch="fill")
    with RolloutScheduler(spec, tokenizer) as scheduler:
        for step in range(2):
            batch = scheduler.get_batch(4, timeout=120)
            groups = check_groups(batch, 2)
            assert len(groups) == 2 and len(batch) == 4  # the full batch reaches the trainer
            assert all(len({t.episode_reward for t in members}) == 1 for members in groups.values())  # filtered ones
            m = batch.metrics
            assert m["rollout/filtered_groups/equal_returns"] == m["rollout/filtered_groups"] == 6  # all consumed
            assert m["rollout/filtered_groups/refilled"] == 2 and m["rollout/groups_per_trained_group"] == 3.0
            # the latest of the 6 consumed: planned round-robin, each group played 3 episodes this step
            assert {(t.group_id, t.episode_id) for t in batch.trajectories} == {(0, 3 * step + 2), (1, 3 * step + 2)}
        assert sum(scheduler.state_dict()["next_episode"]) == 12  # two steps of max_groups_per_step, no more


def test_killed_env_manager_is_restarted_and_get_batch_completes(ray_session, tokenizer):
    import ray

    # every episode takes 6 steps of 0.3 s (the target is out of reach), so the kill lands mid-episode
    spec = spec_for(["Slow"], groups=8, group_size=2, per_worker=4,
                    env_config={"Slow": {"sleep_prob": 1.0, "sleep_s": 0.3, "max_target": 50, "max_steps": 6}})
    with RolloutScheduler(spec, tokenizer) as scheduler:
        pid = scheduler.worker_info[0]["pid"]
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("batch", scheduler.get_batch(16, timeout=180)))
        thread.start()
        time.sleep(0.6)
        ray.kill(scheduler.workers[0], no_restart=False)
        thread.join(timeout=200)
        batch = result["batch"]
        check_groups(batch, 2)
        assert len(batch) == 16
        lost = {k: v for k, v in batch.metrics.items() if k.endswith(("/worker_restarted", "/worker_lost"))}
        assert sum(lost.values()) > 0  # the killed worker's running episodes, admitted again
        assert ray.get(scheduler.workers[0].ready.remote(), timeout=60)["pid"] != pid
        check_groups(scheduler.get_batch(16, timeout=180), 2)  # the restarted worker takes part again


def test_scripted_policy_and_bad_requests(ray_session, tokenizer):
    spec = spec_for(["Counting"], groups=2, group_size=2, policy="scripted")
    with RolloutScheduler(spec, tokenizer) as scheduler:
        batch = scheduler.get_batch(4, timeout=60)
        assert batch.metrics["env/Counting/success"] == 1.0
        with pytest.raises(ConfigError, match="multiple of group_size"):
            scheduler.get_batch(3)
        scheduler.pause()  # e.g. during weight sync or validation: nothing is admitted or generated
        with pytest.raises(RolloutTimeout, match="'paused': True"):
            scheduler.get_batch(4, timeout=1.5)
        scheduler.resume()
        assert len(scheduler.get_batch(4, timeout=60)) == 4
    with pytest.raises(ConfigError, match="generation scheduler"):
        RolloutScheduler(spec_for(["Counting"], policy="model"), tokenizer)
    # the warm start's slipping demonstrator: the options reach the env managers' policies
    slipping = spec_for(["Counting"], groups=2, group_size=2, policy="scripted", policy_options={"slip_rate": 0.5},
                        env_config={"Counting": {"max_target": 12, "max_steps": 12}})
    with RolloutScheduler(slipping, tokenizer) as scheduler:
        batch = scheduler.get_batch(4, timeout=60)
        turns = [turn for traj in batch.trajectories for turn in traj.turns]
        assert any(not turn.trainable for turn in turns) and any(turn.trainable for turn in turns)
        assert int(batch["response_mask"].sum()) == sum(len(t.response_ids) for t in turns if t.trainable)


# -- the model as the policy: hf_infer + roll-tiny behind the generation scheduler ----------------

@pytest.fixture(scope="module")
def model_rollout(ray_session, test_registry):

    from roll_core.config import load_config
    from roll_core.rollout import RolloutScheduler
    from roll_core.workers.infer_group import start_generation

    run = resolve(load_config(MODEL_CONFIG), registry=test_registry, roles=("actor_infer",))
    config = run.config
    generation = start_generation(run, num_workers=1, options={"num_cpus": 1},
                                  max_batch_size=config.max_running_requests)
    scheduler = RolloutScheduler.from_run(run, "train", generate_scheduler=generation.scheduler)
    yield config, scheduler, generation.scheduler, generation.workers
    scheduler.shutdown()
    generation.shutdown()


def test_model_trajectories_carry_logprobs_and_versions(model_rollout, codec):
    import ray

    config, scheduler, generate, workers = model_rollout
    batch = scheduler.get_batch(timeout=240)
    assert len(batch) == 4
    t = batch.tensors
    mask = t["response_mask"][:, 1:].bool()
    assert (t["infer_logprobs"][mask] < 0).all()  # sampled tokens have real log-probs
    assert (t["infer_logprobs"][~mask] == 0).all()
    assert set(t["policy_version_max"].tolist()) == {0}
    for traj in batch.trajectories:
        for turn in traj.turns:
            assert 1 <= len(turn.response_ids) <= 6  # max_tokens_per_step caps max_new_tokens (8)
            assert len(turn.logprobs) == len(turn.response_ids)
    stats = ray.get(generate.stats.remote())
    assert stats["requests"] == sum(tr.num_steps for tr in batch.trajectories)
    # a synchronous CPU rollout generates in lock-step rounds (one per turn), which need no sticky routes
    longest = max(tr.num_steps for tr in batch.trajectories)
    assert stats["rounds"] == longest and stats["routes"] == 0


def test_weight_update_bumps_the_version_of_new_turns(model_rollout):
    import ray
    from transformers import AutoModelForCausalLM

    from roll_core.models import resolve_pretrain

    config, scheduler, generate, workers = model_rollout
    weights = AutoModelForCausalLM.from_pretrained(resolve_pretrain("roll-tiny", seed=config.seed)).state_dict()
    assert ray.get(generate.update_weights.remote([ray.put(weights)], 1)) == 1
    scheduler.set_version(1)
    batch = scheduler.get_batch(timeout=240)
    assert set(batch["policy_version_min"].tolist()) == {1}  # sync mode: the whole batch is on-policy
    assert ray.get(workers[0].policy_version.remote()) == 1


def test_inference_workers_start_as_one_policy(ray_session, test_registry):
    """Every inference worker of a run starts from the same weights (one seed for all, one start-up
    path): with a locally built model, greedy outputs agree before the first weight sync."""
    import ray

    from roll_core.config import load_config
    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.workers.infer_group import start_generation

    run = resolve(load_config(MODEL_CONFIG), registry=test_registry, roles=("actor_infer",))
    generation = start_generation(run, num_workers=2, options={"num_cpus": 0})
    try:
        greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
        requests = [GenerationRequest(f"r{i}", prompt, greedy) for i, prompt in
                    enumerate([[5, 17, 40, 99, 3], [250, 7, 7, 7], [1, 2, 3, 4, 5, 6, 7, 8]])]
        outputs = ray.get([w.generate.remote(requests) for w in generation.workers])
        tokens = [[o.token_ids for o in worker_outputs] for worker_outputs in outputs]
        assert all(len(t) >= 1 for t in tokens[0])
        assert tokens[0] == tokens[1]
        logprobs = [[o.logprobs for o in worker_outputs] for worker_outputs in outputs]
        assert logprobs[0] == logprobs[1]  # the same weights, not merely the same argmax
    finally:
        generation.shutdown()
