"""Resolving configs against plugins: names, env configs, derived values, the saved YAML."""

from __future__ import annotations

import pickle

import pytest

from roll_core.config import ConfigWarning, Run, load_config, resolve, validate_config
from roll_core.errors import ConfigError, PluginError, UnknownComponentError
from roll_core.plugins import PluginManager

LAYOUT = "roll_layout/qwen2.5-0.5B-agentic/agent_val_sokoban.yaml"


def agentic(**extra):
    data = {"sequence_length": 1024, "pretrain": "tiny", "adv_estimator": "grpo", "rollout_batch_size": 8,
            "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4},
            "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2}}
    data.update(extra)
    return validate_config(data)


def test_composed_roll_example_resolves(fixtures, roll_registry):
    resolved = resolve(load_config(fixtures / LAYOUT), registry=roll_registry)
    config = resolved.config
    assert {k: (r.kind, r.name) for k, r in resolved.components.items()} == {
        "adv_estimator": ("advantage_estimator", "grpo"),
        "actor_train.pg_variant": ("policy_loss", "ppo"),
        "actor_train.strategy_args.strategy_name": ("strategy", "deepspeed_train"),
        "actor_infer.strategy_args.strategy_name": ("strategy", "vllm"),
        "custom_envs.SimpleSokoban.env_type": ("env", "sokoban"),
        "custom_envs.FrozenLake.env_type": ("env", "frozen_lake"),
    }
    sokoban = resolved.env_configs["SimpleSokoban"]
    assert type(sokoban).__name__ == "BoxConfig"
    assert sokoban.dim_room == (6, 6) and sokoban.max_steps == 5  # YAML beats registration defaults
    assert sokoban.format_penalty == -0.15 and sokoban.search_depth == 30  # env model default filled
    assert config.custom_envs["SimpleSokoban"].env_config["search_depth"] == 30  # and saved with the run
    assert config.val_env_manager.num_groups_partition == [32, 32]  # equal split made explicit
    assert config.actor_train.model_args.model_name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert config.enable_reference is False and config.enable_old_logprobs_recompute is False
    assert resolved.pipeline_type == "agentic"


def test_docs_example_resolves_envs_by_tag_with_registration_defaults(fixtures, roll_registry):
    resolved = resolve(load_config(fixtures / "frozen_lake_async_with_env_managers.yaml"), registry=roll_registry)
    assert resolved.components["val_env_manager.tags[1]"].name == "larger_sokoban"
    assert resolved.env_configs["LargerSokoban"].dim_room == (10, 10)  # the tag's preset
    assert resolved.env_configs["LargerSokoban"].num_boxes == 2
    assert resolved.env_configs["SimpleSokoban"].dim_room == (5, 5)
    # a tag without a custom_envs entry becomes one, under its registered name
    assert resolved.config.custom_envs["FrozenLake"].env_type == "frozen_lake"
    assert resolved.config.train_env_manager.max_env_num_per_worker == 16  # kept when set


def test_derived_values_are_filled(roll_registry):
    resolved = resolve(agentic(init_kl_coef=0.1), registry=roll_registry)
    config = resolved.config
    assert config.enable_reference is True and config.enable_old_logprobs_recompute is True
    assert config.actor_train.strategy_args.strategy_name == "hf_train"  # roll's built-in default
    assert config.actor_infer.strategy_args.strategy_name == "hf_infer"
    assert config.reference.strategy_args.strategy_name == "hf_train"  # reference is used now
    assert config.critic.strategy_args is None  # grpo builds no critic, nothing checked or filled
    assert config.reference.model_args.model_name_or_path == "tiny"
    assert config.train_env_manager.max_env_num_per_worker == 8  # 0 means all envs in one worker


@pytest.mark.parametrize("extra, recompute", [
    ({"adv_estimator": "gigpo"}, True),  # a step-wise estimator needs recomputed old log-probs
    ({"adv_estimator": "gigpo", "force_disable_old_logprobs_recompute": True}, False),
    ({"enable_old_logprobs_recompute": True}, True),
])
def test_old_logprob_recompute_switch(roll_registry, extra, recompute):
    assert resolve(agentic(**extra), registry=roll_registry).config.enable_old_logprobs_recompute is recompute


def test_critic_estimator_needs_a_critic_model(roll_registry):
    with pytest.raises(ConfigError, match=r"adv_estimator 'gae' trains a critic.*reward_pretrain"):
        resolve(agentic(adv_estimator="gae"), registry=roll_registry)
    config = resolve(agentic(adv_estimator="gae", reward_pretrain="rm"), registry=roll_registry).config
    assert config.critic.model_args.model_name_or_path == "rm"
    assert config.critic.strategy_args.strategy_name == "hf_train"


@pytest.mark.parametrize("extra, path, suggestion", [
    ({"adv_estimator": "grpoo"}, "adv_estimator", "grpo"),
    ({"actor_train": {"pg_variant": "tsi"}}, "actor_train.pg_variant", "tis"),
    ({"actor_infer": {"strategy_args": {"strategy_name": "vlm"}}}, "actor_infer.strategy_args.strategy_name",
     "vllm"),
    ({"custom_envs": {"FrozenLake": {"env_type": "frozen_lak"}}}, "custom_envs.FrozenLake.env_type",
     "frozen_lake"),
])
def test_unknown_plugin_names_give_path_and_suggestion(roll_registry, extra, path, suggestion):
    with pytest.raises(UnknownComponentError) as info:
        resolve(agentic(**extra), registry=roll_registry)
    message = str(info.value)
    assert f"(at {path})" in message and f"Did you mean {suggestion!r}" in message and "\n" not in message


def test_unknown_env_tag_suggests_custom_envs_entries(roll_registry):
    config = agentic(train_env_manager={"tags": ["Gridd"], "num_env_groups": 2, "group_size": 4},
                     custom_envs={"Grid": {"env_type": "frozen_lake"}})
    with pytest.raises(ConfigError) as info:
        resolve(config, registry=roll_registry)
    message = str(info.value)
    assert message.startswith("train_env_manager.tags[0] is 'Gridd', which is neither a custom_envs entry")
    assert "Did you mean the custom_envs entry 'Grid'?" in message and "Installed envs" in message


def test_env_config_is_validated_by_the_env_plugin(roll_registry):
    config = agentic(custom_envs={"FrozenLake": {"env_type": "FrozenLake", "env_config": {"is_slipery": True}}})
    with pytest.raises(ConfigError) as info:
        resolve(config, registry=roll_registry)
    message = str(info.value)
    assert "custom_envs.FrozenLake.env_config.is_slipery: unknown key. Did you mean 'is_slippery'?" in message
    assert "roll plugins show frozen_lake" in message


def test_strategy_of_the_wrong_role_is_rejected(roll_registry):
    config = agentic(actor_infer={"strategy_args": {"strategy_name": "megatron_train"}})
    with pytest.raises(ConfigError, match=r"actor_infer needs an infer strategy \(installed: .*vllm"):
        resolve(config, registry=roll_registry)


def test_env_without_config_model_is_a_plugin_error(roll_registry):
    from roll_core.registry import Registration

    roll_registry.add(Registration(kind="env", name="broken", target="cfgtest_plugin:estimate", plugin="x"))
    with pytest.raises(PluginError, match="has no pydantic config_model"):
        resolve(agentic(custom_envs={"FrozenLake": {"env_type": "broken"}}), registry=roll_registry)


def test_rlvr_resolution(fixtures, roll_registry, monkeypatch):
    monkeypatch.chdir(fixtures)  # its data_args.file_name is relative, as in ROLL: to where the run starts
    with pytest.raises(ConfigError, match="rewards is empty"):
        resolve(load_config(fixtures / "rlvr_config_async.yaml"), registry=roll_registry)
    config = load_config(fixtures / "rlvr_config_async.yaml", [
        "is_num_return_sequences_expand=false", "sequence_length=6144", "+rewards.math_rule.tag_included=[math]"])
    with pytest.warns(ConfigWarning) as caught:
        resolved = resolve(config, registry=roll_registry)
    assert resolved.components["rewards.math_rule"].name == "math_rule"
    generating = resolved.config.actor_infer.generating_args
    assert generating.max_new_tokens == 6144 - 2048 and generating.num_return_sequences == 8
    assert resolved.config.is_num_return_sequences_expand is True  # async RLVR with groups needs it
    assert {str(w.message).split(" ")[0] for w in caught} == {
        "actor_infer.generating_args.max_new_tokens", "is_num_return_sequences_expand"}
    assert len(resolved.warnings) == 2


def test_saved_yaml_reloads_to_the_same_config(fixtures, roll_registry, tmp_path):
    resolved = resolve(load_config(fixtures / LAYOUT), registry=roll_registry)
    path = resolved.save(tmp_path / "run" / "config.yaml")
    assert "agent_template: |" in path.read_text()  # templates stay readable
    again = load_config(path)
    assert again == resolved.config
    assert resolve(again, registry=roll_registry).config == resolved.config  # resolving is idempotent


def test_resolved_config_pickles_for_ray_workers(roll_registry):
    resolved = resolve(agentic(), registry=roll_registry)
    clone = pickle.loads(pickle.dumps(resolved))
    assert isinstance(clone, Run) and clone.config == resolved.config
    assert clone.env_configs == resolved.env_configs
    assert clone.registration("adv_estimator").name == "grpo"


def test_components_from_a_plugin_module_resolve():
    registry = PluginManager(autoload=False, extra_modules=["cfgtest_plugin"]).registry
    config = validate_config({
        "sequence_length": 512, "pretrain": "tiny", "adv_estimator": "cfgtest_adv", "rollout_batch_size": 4,
        "actor_train": {"pg_variant": "cfgtest_loss", "strategy_args": {"strategy_name": "cfgtest_train"}},
        "actor_infer": {"strategy_args": {"strategy_name": "cfgtest_infer"}},
        "train_env_manager": {"tags": ["CfgtestGrid"], "num_env_groups": 1, "group_size": 4},
        "val_env_manager": {"tags": ["CfgtestGrid"], "num_env_groups": 1},
    })
    resolved = resolve(config, registry=registry)
    assert resolved.components["train_env_manager.tags[0]"].name == "cfgtest_grid"
    assert resolved.env_configs["CfgtestGrid"].size == 4


def test_missing_pretrain_is_reported(roll_registry):
    with pytest.raises(ConfigError, match="pretrain is not set"):
        resolve(validate_config({"sequence_length": 64}), registry=roll_registry)


def test_a_critic_estimator_refuses_a_strategy_without_a_critic_model(roll_registry):
    config = agentic(adv_estimator="gae", reward_pretrain="rm",
                     critic={"strategy_args": {"strategy_name": "megatron_train"}})
    with pytest.raises(ConfigError, match=r"critic.strategy_args.strategy_name is 'megatron_train', which provides "
                                          r"no critic"):
        resolve(config, registry=roll_registry)


@pytest.mark.parametrize("alias", ["k1", "k2", "low_var_kl", "k3"])
def test_kl_estimator_aliases_validate(alias):
    assert agentic(kl_penalty=alias, init_kl_coef=0.1).kl_penalty == alias


def test_full_kl_is_refused_at_validation():
    with pytest.raises(ConfigError, match=r"kl_penalty.*full-vocabulary log-probs.*k3 \(low_var_kl\)"):
        agentic(kl_penalty="full")


def test_importance_sampling_is_rlvrs_name_of_ratio_type(fixtures, roll_registry, monkeypatch):
    monkeypatch.chdir(fixtures)  # the data file is relative to where the run starts
    path = fixtures / "rlvr_config_async.yaml"
    base = ["+rewards.math_rule.tag_included=[math]"]
    resolved = resolve(load_config(path, [*base, "+importance_sampling=seq"]), registry=roll_registry)
    assert resolved.config.ratio_type == "seq" and resolved.config.importance_sampling is None
    assert resolve(load_config(path, base), registry=roll_registry).config.ratio_type == "token"
    with pytest.raises(ConfigError, match=r"importance_sampling \(seq\) and ratio_type \(token\) disagree"):
        resolve(load_config(path, [*base, "+importance_sampling=seq", "+ratio_type=token"]), registry=roll_registry)


def test_max_traj_per_env_is_checked_against_the_batch():
    assert agentic(train_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
                                      "max_traj_per_env": 1}).train_env_manager.max_traj_per_env == 1
    with pytest.raises(ConfigError, match=r"train_env_manager.max_traj_per_env \(1\) lets its 2 groups of 4 play at "
                                          r"most 8 episodes per step, fewer than the batch of 16"):
        agentic(rollout_batch_size=16, train_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2,
                                                          "group_size": 4, "max_traj_per_env": 1})
    with pytest.raises(ConfigError, match="max_traj_per_env must be a positive number of episodes or -1"):
        agentic(train_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
                                   "max_traj_per_env": 0})


def test_an_unreadable_dataset_type_is_refused_at_resolve(fixtures, roll_registry):
    config = load_config(fixtures / "rlvr_config_async.yaml", ["+rewards.math_rule.tag_included=[math]",
                                                                "actor_train.data_args.dataset_type=parquet"])
    with pytest.raises(ConfigError, match="dataset_type 'parquet' is not supported: roll reads JSON-lines files"):
        resolve(config, registry=roll_registry)


def test_lora_takes_the_reference_from_the_actor(roll_registry):
    """With LoRA the reference is the actor's base with adapters disabled: no reference worker (as ROLL)."""
    full = resolve(agentic(init_kl_coef=0.1), registry=roll_registry)
    assert "reference" in full.strategies and not full.reference_from_actor and full.lora is None
    lora = resolve(agentic(init_kl_coef=0.1, actor_train={"model_args": {"lora_target": "all-linear",
                                                                           "lora_rank": 4}}),
                   registry=roll_registry)
    assert "reference" not in lora.strategies and "reference" not in lora.train_roles
    assert lora.reference_from_actor and lora.uses_reference
    assert lora.config.actor_train.model_args.lora_alpha == 8  # ROLL's default 2 * rank, written out
    assert not lora.syncs_adapters  # hf_infer takes merged weights
    shown = lora.to_yaml().splitlines()
    assert shown[1] == "# actor_train trains LoRA rank 4, alpha 8, dropout 0 on all-linear; the base model stays frozen"
    assert shown[2] == "# reference log-probs: actor_train with its adapters disabled (no reference workers)"
    assert shown[3] == "# weight sync: merged weights (base + adapter)"
    # no KL term: nothing reference at all
    plain = resolve(agentic(actor_train={"model_args": {"lora_target": "q_proj"}}), registry=roll_registry)
    assert not plain.uses_reference and not plain.reference_from_actor
    assert pickle.loads(pickle.dumps(lora)).reference_from_actor


def test_smollm2_lora_example_resolves_and_holds_out_its_validation_pairs():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = resolve(load_config(root / "examples/rlvr/smollm2_lora.yaml"))  # the installed plugins
    assert run.lora is not None and run.lora.target_modules() == "all-linear" and run.lora.scale_alpha == 32
    assert not run.uses_reference  # no KL term in the example
    assert run.config.rewards["addition"].format_pattern  # the answer is pinned down (see math_verify)

    def pairs(name):
        rows = [json.loads(line) for line in open(root / "examples/rlvr/data" / name)]
        return rows, {frozenset(r["prompt"].split("?")[0].split(" ")[2::2]) for r in rows}

    train_rows, train_pairs = pairs("addition_train.jsonl")
    val_rows, val_pairs = pairs("addition_val.jsonl")
    assert {r["tag"] for r in train_rows} == {"addition", "answer_format"}  # a run may pay for the format
    assert run.config.actor_train.data_args.domain_interleave_probs == {"addition": 1.0, "answer_format": 0.0}
    assert sorted(r["tag"] for r in val_rows) == ["addition"] * 32 + ["answer_format"] * 32
    assert len(val_pairs) == 32 and not val_pairs & train_pairs  # held out, in either order

    # the format the prompt asks for, paid only with the answer (validation scores it on its own)
    from roll_core.rewards.dispatch import RewardDispatcher

    assert all(r["prompt"].endswith("Reply with just the number.") for r in val_rows)
    rewards = RewardDispatcher(run.config.rewards, run.rewards)
    question = val_rows[0]["prompt"]
    a, b = question.split("?")[0].split(" ")[2::2]
    total = str(int(a) + int(b))
    for reply, paid, fmt in [(f" {total}\n", 1.0, 1.0),
                             (f"{a} + {b} = {total}", 0.5, 0.0),  # right, not in the format: half
                             (f"The sum is {total}.", 0.5, 0.0),
                             (f"{a} + {b}", 0.0, 0.0),  # the question restated is not an answer
                             ("1000", 0.0, 1.0)]:  # the format alone earns nothing in training
        assert rewards.score("addition", question, reply, total)[0] == paid, reply
        assert rewards.score("answer_format", question, reply, total)[0] == fmt, reply


def test_make_addition_rewrites_the_shipped_files_and_takes_another_prompt(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "examples/rlvr"
    spec = importlib.util.spec_from_file_location("make_addition", data / "make_addition.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["--out", str(tmp_path / "shipped")])
    for name in ("addition_train.jsonl", "addition_val.jsonl"):  # the shipped files are reproducible
        assert (tmp_path / "shipped" / name).read_bytes() == (data / "data" / name).read_bytes()
    script.main(["--out", str(tmp_path / "other"), "--prompt", "Add {a} and {b}."])
    shipped = [json.loads(line) for line in open(tmp_path / "shipped/addition_val.jsonl")]
    other = [json.loads(line) for line in open(tmp_path / "other/addition_val.jsonl")]
    assert [r["prompt"] for r in other][:2] == ["Add 32 and 43."] * 2  # the same pairs, the new question
    assert [{**r, "prompt": None} for r in other] == [{**r, "prompt": None} for r in shipped]


@pytest.mark.parametrize("extra, rows, source", [
    ({}, 8, None),  # one optimiser step (8 rows per mini-batch): the first forward is pi_old
    ({}, 16, "train_step"),  # two steps: pi_old for the second step's rows, inside the train step
    ({"ppo_epochs": 2}, 8, "train_step"),
    ({"adv_estimator": "gigpo"}, 8, "train_step"),  # recompute switched on by resolve
    ({"init_kl_coef": 0.1}, 8, "driver"),  # the KL penalty in the advantages reads pi_old
    ({"train_infer_correction": {"is_weight": {"enabled": True}}}, 8, "driver"),
    ({"train_infer_correction": {"filters": [{"enabled": True}]}}, 16, "driver"),
    ({"force_disable_old_logprobs_recompute": True}, 16, None),
])
def test_where_pi_old_comes_from(roll_registry, extra, rows, source):
    from types import SimpleNamespace

    from roll_core.pipeline.base import TrainingLoop

    resolved = resolve(agentic(**extra), registry=roll_registry)
    loop = SimpleNamespace(config=resolved.config, use_reference=resolved.uses_reference)
    assert TrainingLoop.old_log_probs_source(loop, rows) == source
