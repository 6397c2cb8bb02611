"""Agent tags on Ray: OpenAI-API agent code played through the gateway, next to the built-in env path.

The FrozenLake agent of examples/agents (the game loop in user code, only the ``openai`` client)
must give the very rows the built-in env gives for the same seeds and the same sampled tokens;
rewritten histories split into samples; tool calls, faults, timeouts and reward functions behave
as they do for envs.
"""

from __future__ import annotations

import os

import pytest
import torch

from roll_core.config import load_config, resolve
from roll_core.errors import ConfigError
from roll_core.rollout import RolloutScheduler
from roll_core.rollout.engine.agentic_rollout import batch_dict
from roll_core.rollout.engine.batch import build_batch

pytestmark = pytest.mark.ray

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "agent_frozen_lake.yaml")
TEST_PLUGINS = ["roll_rollout_testenvs", "roll_rollout_testagents"]  # next to this file, on the workers' path
ROW_KEYS = ("input_ids", "attention_mask", "response_mask", "scores", "episode_scores", "policy_version_min")


@pytest.fixture(scope="module")
def registry():
    from roll_core.plugins import PluginManager

    return PluginManager(extra_modules=TEST_PLUGINS).registry


def agent_run(registry, tags, *overrides, model=True):
    config = load_config(CONFIG, [f"train_env_manager.tags=[{','.join(tags)}]",
                                  f"val_env_manager.tags=[{','.join(tags)}]",
                                  f"val_env_manager.num_env_groups={max(2, len(tags))}",
                                  f"val_batch_size={max(2, len(tags))}", *overrides])
    return resolve(config, registry=registry, roles=("actor_infer",) if model else ())


@pytest.fixture(scope="module")
def generation(ray_session, registry):
    from roll_core.workers.infer_group import start_generation

    generation = start_generation(agent_run(registry, ["Lake"]), num_workers=1, options={"num_cpus": 1},
                                  max_batch_size=8)
    yield generation
    generation.shutdown()


def rollout(run, mode="train", generation=None, **overrides):
    return RolloutScheduler.from_run(run, mode, generate_scheduler=generation.scheduler if generation else None,
                                     **overrides)


def rows(batch):
    return batch_dict(batch)  # canonical row order


def test_openai_frozen_lake_agent_gives_the_env_paths_rows(generation, registry):
    batches = {}
    for tag in ("Lake", "LakeAgent"):
        run = agent_run(registry, [tag])
        for mode in ("train", "val"):
            with rollout(run, mode, generation) as scheduler:
                batches[tag, mode] = scheduler.get_batch(timeout=240)
    for mode in ("train", "val"):
        env, agent = batches["Lake", mode], batches["LakeAgent", mode]
        env_rows, agent_rows = rows(env), rows(agent)
        assert env_rows["traj_id"] == agent_rows["traj_id"] and env_rows["seed"] == agent_rows["seed"]
        for key in ROW_KEYS:
            assert torch.equal(env_rows[key], agent_rows[key]), (mode, key)
        assert torch.allclose(env_rows["infer_logprobs"], agent_rows["infer_logprobs"], atol=1e-6)
        assert (env_rows["infer_logprobs"][env_rows["response_mask"][:, 1:].bool()] < 0).all()  # real samples
        envs = sorted(env.trajectories, key=lambda t: t.traj_id)
        agents = sorted(agent.trajectories, key=lambda t: t.traj_id)
        for e, a in zip(envs, agents):
            assert [t.response_ids for t in e.turns] == [t.response_ids for t in a.turns]
            assert (e.end_reason, e.truncated, e.episode_reward) == (a.end_reason, a.truncated, a.episode_reward)
            for name in ("success", "action_is_valid", "action_is_effective", "num_steps"):
                assert e.metrics[name] == a.metrics[name], name
            assert a.metrics["samples"] == 1 and a.template_mismatches == 0
        # step-wise rows (GiGPO): one per turn, with the step rewards and the anchor states
        env_steps = build_batch(envs, granularity="step", pad_id=0)
        agent_steps = build_batch(agents, granularity="step", pad_id=0)
        for key in ("input_ids", "response_mask", "step_scores", "scores"):
            assert torch.equal(env_steps[key], agent_steps[key]), (mode, key)
        assert env_steps["state_hash"] == agent_steps["state_hash"]
    train = batches["Lake", "train"].trajectories
    assert max(t.num_steps for t in train) >= 2  # multi-turn
    assert {t.end_reason for t in train} & {"sequence_length", "max_steps", "terminated"}


def test_rewritten_history_splits_into_samples_sharing_the_reward(generation, registry):
    run = agent_run(registry, ["Rewrite"], "+custom_envs.Rewrite.env_type=test_rewriting_agent")
    with rollout(run, "train", generation) as scheduler:
        batch = scheduler.get_batch(timeout=240)
    data = rows(batch)
    assert len(batch) == 8  # 4 episodes x 2 samples
    by_member: dict[tuple, list] = {}
    for traj in batch.trajectories:
        by_member.setdefault((traj.group_id, traj.member), []).append(traj)
    for (_group, member), samples in by_member.items():
        first, second = sorted(samples, key=lambda t: t.traj_id)
        assert second.traj_id == first.traj_id + "-s1"
        assert (first.num_steps, second.num_steps) == (2, 1)
        assert first.episode_reward == second.episode_reward == float(member)
        assert first.metrics["samples"] == 2 and first.metrics["calls"] == 3
        # the rewritten call starts afresh: its prompt holds none of the earlier completions
        assert not set(map(tuple, [t.response_ids for t in first.turns])) & {tuple(second.turns[0].prompt_ids)}
    # every sampled token is trainable exactly once, with its log-prob
    sampled = sum(len(turn.response_ids) for traj in batch.trajectories for turn in traj.turns)
    assert int(data["response_mask"].sum()) == sampled
    assert (data["infer_logprobs"][data["response_mask"][:, 1:].bool()] < 0).all()
    steps = build_batch(batch.trajectories, granularity="step", pad_id=0)
    assert len(steps) == 12
    expected = [r for _group in range(2) for member in range(2) for r in (0.0, 0.5, member - 0.5)]
    assert sorted(steps["step_scores"].tolist()) == sorted(expected)  # the agent's step rewards, per call


def test_tool_agent_calls_its_tool_through_the_template(ray_session, registry):
    from roll_agent_examples.number_search import TOOLS

    run = agent_run(registry, ["Search"], "+custom_envs.Search.env_type=number_search", "+custom_envs.Search.max_steps=4",
                    "sequence_length=512", "actor_infer.generating_args.max_new_tokens=48", model=False)
    with rollout(run, "train", policy="scripted") as scheduler:  # the agent's expert: binary search
        batch = scheduler.get_batch(timeout=120)
        codec = scheduler.codec
    assert batch.metrics["env/Search/success"] == 1.0 and batch.metrics["env/Search/malformed_tool_calls"] == 0.0
    assert batch.metrics["rollout/template_mismatch"] == 0
    for traj in batch.trajectories:
        assert traj.num_steps == traj.metrics["guesses"] == traj.metrics["tool_calls"] and traj.metrics["samples"] == 1
        ids, mask, _ = traj.token_stream()
        # the stream is the template's render of the whole conversation, tools and tool calls included
        # (up to the newline after the last end-of-turn, which no turn generates)
        assert codec.decode(ids) + "\n" == codec.render(traj.messages, add_generation_prompt=False, tools=TOOLS)
        assert codec.decode([i for i, m in zip(ids, mask) if m]).count('"name": "guess"') == traj.num_steps


def test_agent_faults_cost_one_attempt_each(ray_session, registry):
    overrides = [f"+custom_envs.{tag}.env_type=test_{tag.lower()}_agent" for tag in ("Flaky", "Sleepy", "Blocking")]
    run = agent_run(registry, ["Flaky", "Sleepy", "Blocking"], *overrides, "train_env_manager.num_env_groups=3",
                    "rollout_batch_size=6", model=False)
    with rollout(run, "train", policy="scripted", step_timeout_s=1.0) as scheduler:
        batch = scheduler.get_batch(timeout=120)
    assert len(batch) == 6 and all(t.episode_reward == 1.0 for t in batch.trajectories)
    assert batch.metrics["rollout/dropped_trajectories/agent_error"] == 2  # Flaky: each member once
    assert batch.metrics["rollout/dropped_trajectories/timeout"] == 2  # Sleepy: 30 s > step_timeout_s
    assert {t.tag for t in batch.trajectories} == {"Flaky", "Sleepy", "Blocking"}


def test_reward_function_scores_the_final_conversation(ray_session, registry):
    run = agent_run(registry, ["Scored"], "+custom_envs.Scored.env_type=test_scored_agent",
                    "+custom_envs.Scored.reward=math_verify", model=False)
    assert run.agents["Scored"].reward.name == "math_verify"
    with rollout(run, "train", policy="scripted") as scheduler:
        batch = scheduler.get_batch(timeout=120)
    assert [t.episode_reward for t in batch.trajectories] == [1.0] * 4


def test_agent_config_mistakes_are_named(registry):
    with pytest.raises(ConfigError, match="history_length.*agent code writes its own prompts"):
        agent_run(registry, ["LakeAgent"], "+custom_envs.LakeAgent.history_length=2", model=False)
    with pytest.raises(ConfigError, match=r"custom_envs.Lake.reward.*env"):
        agent_run(registry, ["Lake"], "+custom_envs.Lake.reward=math_verify", model=False)
    with pytest.raises(ConfigError, match=r"custom_envs\.Search\.env_config\.max_turns"):
        agent_run(registry, ["Search"], "+custom_envs.Search.env_type=number_search",
                  "+custom_envs.Search.env_config.max_turns=0", model=False)
    with pytest.raises(ConfigError, match="slip_rate.*cannot slip"):
        agent_run(registry, ["LakeAgent"], "+warmup_sft.steps=3", "+warmup_sft.policy=scripted",
                  "+warmup_sft.slip_rate=0.2", model=False)
    with pytest.raises(Exception, match="Installed agents: .*number_search"):
        agent_run(registry, ["X"], "+custom_envs.X.env_type=number_serch", model=False)
    from roll_core.rollout.engine.spec_from_run import rollout_spec

    with pytest.raises(ConfigError, match="no random actions"):
        rollout_spec(agent_run(registry, ["LakeAgent"], model=False), "train", policy="random")


def test_agents_are_selected_by_tag_like_envs(registry):
    run = agent_run(registry, ["NumberSearch"], model=False)  # a registered agent tag, no custom_envs entry
    assert run.agents["NumberSearch"].name == "number_search" and "NumberSearch" not in run.envs
    assert run.agents["NumberSearch"].config.high == 15  # the agent's config model, defaults applied
    assert run.config.custom_envs["NumberSearch"].env_type == "number_search"  # resolved into the saved config
    assert run.config.agent_gateway.model_name == "roll-tiny"
    assert run.plugins.get("roll-agent-examples")  # the agent's distribution is pinned like an env's
