"""The seed's RLVR config with ROLL's `rewards:` section of math + code + judge: it validates, the
reward worker fields are real (no "has no effect" warning) and place the domains' workers."""

from __future__ import annotations

import pytest

from roll_core.config import load_config, resolve
from roll_core.distributed.layout import build_layout
from roll_core.distributed.placement import bundle_resources, worker_env
from roll_core.plugins import get_registry
from roll_core.rollout.rlvr.reward_scoring import worker_domains

# ROLL's example_grpo.yaml rewards, on the seed's 24 devices plus 2 for the judge
REWARDS = [
    "+rewards.math_rule.tag_included=[deepmath_103k]",
    "+rewards.code_sandbox.tag_included=[KodCode]", "+rewards.code_sandbox.world_size=8",
    "+rewards.code_sandbox.use_local=true", "+rewards.code_sandbox.infer_batch_size=1",
    "+rewards.llm_judge.tag_included=[RLVR]", "+rewards.llm_judge.judge_prompt=Qwen2.5-7B-Instruct-RLVR-prompt",
    "+rewards.llm_judge.judge_model_type=inference",
    "+rewards.llm_judge.model_args.model_name_or_path=virtuoussy/Qwen2.5-7B-Instruct-RLVR",
    "+rewards.llm_judge.generating_args.max_new_tokens=100",
    "+rewards.llm_judge.strategy_args.strategy_name=hf_infer",
    "+rewards.llm_judge.device_mapping=list(range(24,26))", "+rewards.llm_judge.infer_batch_size=4",
    "+rewards.llm_judge.ray_resources={judge_node: 1}", "+rewards.llm_judge.system_envs={JUDGE_FLAG: judge1}",
]


@pytest.fixture
def registry(roll_registry):
    real = get_registry()
    for kind, name in (("reward", "code_sandbox"), ("reward", "llm_judge")):
        roll_registry.add(real.get(kind, name))
    return roll_registry


def test_seed_rlvr_config_with_math_code_judge_rewards(fixtures, registry, monkeypatch):
    monkeypatch.chdir(fixtures)  # the seed names its data relative to where it runs
    config = load_config(fixtures / "rlvr_config_async.yaml", REWARDS)
    resolved = resolve(config, registry=registry)
    assert not [w for w in resolved.warnings if w.startswith("rewards.")]
    assert resolved.reward_strategies["llm_judge"].name == "hf_infer"  # the judge model's inference strategy
    # math_rule (no worker settings, a rule) stays in the driver; code by world_size, the judge by its model
    assert worker_domains(resolved) == ["code_sandbox", "llm_judge"]
    roles = [*resolved.train_roles, "actor_infer", "rewards.code_sandbox", "rewards.llm_judge"]
    layout = build_layout(resolved.config, roles, on_gpus=True)
    lines = layout.describe()
    assert "rewards.code_sandbox: 8 ranks x 1 CPU slot on its own slots" in lines
    assert "rewards.llm_judge: 2 ranks x 1 GPU on devices 24-25" in lines
    judge_bundle = layout.bundles[layout.roles["rewards.llm_judge"].ranks[0].bundle]
    assert bundle_resources(judge_bundle) == {"GPU": 1.0, "CPU": 1.0, "judge_node": 1.0}  # a bundle per rank
    assert worker_env(resolved.config, "rewards.llm_judge")["JUDGE_FLAG"] == "judge1"
    assert not layout.colocated("rewards.llm_judge", "actor_infer")


def test_judge_devices_overlapping_the_trainer_share_its_bundle(fixtures, registry, monkeypatch):
    monkeypatch.chdir(fixtures)
    config = load_config(fixtures / "rlvr_config_async.yaml",
                         [*REWARDS[:-4], "+rewards.llm_judge.device_mapping=list(range(12,16))",
                          "+rewards.llm_judge.num_gpus_per_worker=2"])
    layout = build_layout(resolve(config, registry=registry).config,
                          ["actor_train", "actor_infer", "rewards.llm_judge"], on_gpus=True)
    assert layout.roles["rewards.llm_judge"].world_size == 2 and layout.roles["rewards.llm_judge"].devices_per_rank == 2
    assert layout.colocated("rewards.llm_judge", "actor_train")
