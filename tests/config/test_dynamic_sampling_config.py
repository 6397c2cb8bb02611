"""Dynamic sampling's ROLL fields are real: they validate, bind a filter, and warn about nothing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from roll_core.config import resolve, validate_config
from roll_core.config.base import compat_warnings
from roll_core.errors import ConfigError, UnknownComponentError
from roll_core.rollout.engine.group_filters import BoundFilter
from roll_core.rollout.rlvr.reward_filters import DynamicSampling


@pytest.fixture(scope="module")
def registry():
    from roll_core.plugins import PluginManager

    return PluginManager(extra_modules=["cfgtest_plugin"]).registry


def agentic(registry, **extra):
    data = {"sequence_length": 256, "pretrain": "tiny", "adv_estimator": "grpo", "rollout_batch_size": 8,
            "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4},
            "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2}, **extra}
    return resolve(validate_config(data), registry=registry)


RLVR = {"sequence_length": 64, "prompt_length": 32, "num_return_sequences_in_group": 4,
        "rewards": {"math": {"tag_included": ["m"],
                             "query_filter_config": {"type": "std_filter", "filter_args": {"std_threshold": 0}},
                             "response_filter_config": {"type": "mean_filter", "filter_args": {"threshold_down": 0}}}},
        "is_use_additional_prompts": True, "max_additional_running_prompts": 4, "max_groups_per_step": 40}


def test_rlvr_filter_fields_are_read_not_warned_about():
    config = validate_config(RLVR)
    assert compat_warnings(config) == []
    settings = DynamicSampling.from_config(config)
    assert settings.active and settings.additional == 4 and settings.max_groups == 40
    assert settings.group_reason("math", [1.0, 1.0]) == "std_filter" and settings.group_reason("math", [0, 1]) is None
    assert settings.response_fails("math", 0.0) and not settings.response_fails("math", 1.0)
    with pytest.raises(ConfigError, match="max_additional_running_prompts is 0"):
        validate_config({**RLVR, "max_additional_running_prompts": 0})
    off = validate_config({**RLVR, "is_use_additional_prompts": False, "max_additional_running_prompts": 0})
    assert DynamicSampling.from_config(off).additional == 0  # spares only with is_use_additional_prompts


def test_unfilled_batch_reaches_both_pipelines_and_refuses_other_values(registry):
    assert DynamicSampling.from_config(validate_config(RLVR)).unfilled == "stop"  # today's behaviour by default
    assert DynamicSampling.from_config(validate_config({**RLVR, "unfilled_batch": "fill"})).unfilled == "fill"
    with pytest.raises(ConfigError, match="unfilled_batch"):
        validate_config({**RLVR, "unfilled_batch": "refill"})
    from roll_core.rollout import rollout_spec

    run = agentic(registry, unfilled_batch="fill", train_env_manager={
        "tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4, "group_filter_cls": "equal_returns"})
    assert rollout_spec(run, "train", policy="random").unfilled_batch == "fill"
    assert compat_warnings(run.config) == []


@pytest.mark.parametrize("change, message", [
    ({"query_filter_config": {"type": "mean_filter", "filter_args": {"threshold_upp": 1}}},
     "filter_args.threshold_upp is not read by mean_filter .*Did you mean 'threshold_up'"),
    ({"response_filter_config": {"type": "std_filter"}}, "a response has one reward and no spread"),
])
def test_bad_filter_settings_say_what_to_write(change, message):
    data = {**RLVR, "rewards": {"math": {"tag_included": ["m"], **change}}}
    with pytest.raises(ConfigError, match=message):
        validate_config(data)


def test_group_filter_cls_binds_a_registered_filter(registry):
    assert agentic(registry).group_filter is None
    run = agentic(registry, train_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
                                               "group_filter_cls": "EqualReturnsFilter"})
    assert run.group_filter.name == "equal_returns" and run.config.train_env_manager.group_filter_cls == "equal_returns"
    assert not [w for w in run.warnings if "group_filter_cls" in w]
    roll_default = agentic(registry, train_env_manager={
        "tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
        "group_filter_cls": "roll.pipeline.agentic.agentic_pipeline.GroupFilter"})
    assert roll_default.group_filter is None  # ROLL's default keeps every group: nothing to filter
    with pytest.warns(UserWarning, match="val_env_manager.group_filter_cls .* is ignored"):
        agentic(registry, val_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2,
                                           "group_filter_cls": "equal_returns"})


def test_unknown_group_filter_gets_did_you_mean(registry):
    with pytest.raises(UnknownComponentError, match=r"Unknown group filter 'equal_return' \(at "
                       r"train_env_manager.group_filter_cls\)\. Did you mean 'equal_returns'"):
        agentic(registry, train_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
                                             "group_filter_cls": "equal_return"})


def test_a_third_party_filter_registers_through_the_hook(registry):
    run = agentic(registry, train_env_manager={"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
                                               "group_filter_cls": "cfgtest_all_failed"})
    bound = BoundFilter.load(run.group_filter)
    failed = [SimpleNamespace(metrics={"success": 0.0}, episode_reward=0.0)] * 2
    mixed = [SimpleNamespace(metrics={"success": 1.0}, episode_reward=1.0), failed[0]]
    assert bound.reason(0, 0, failed) == "none_succeeded" and bound.reason(0, 0, mixed) is None


def test_a_filter_that_max_traj_per_env_leaves_no_room_for_is_warned_about():
    data = {"sequence_length": 256, "rollout_batch_size": 8,
            "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4,
                                  "max_traj_per_env": 1, "group_filter_cls": "equal_returns"}}
    with pytest.warns(UserWarning, match=r"max_traj_per_env \(1\) leaves no episode to replace a dropped group.*"
                      r"the first dropped group will stop the step"):
        validate_config(data)
    with pytest.warns(UserWarning, match=r"a step in which a group is dropped is completed with filtered groups "
                      r"\(unfilled_batch: fill\)"):
        validate_config({**data, "unfilled_batch": "fill"})
