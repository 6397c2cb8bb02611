"""Invalid configs: every problem is one paragraph naming its YAML path; warnings stay warnings."""

from __future__ import annotations

import warnings

import pytest

from roll_core.config import ConfigWarning, parse_device_mapping, validate_config
from roll_core.config.device_mapping import DeviceMappingError
from roll_core.errors import ConfigError

BASE = {"sequence_length": 1024}


def error_of(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config({**BASE, **data}, source="run.yaml")
    message = str(info.value)
    assert "\n" not in message, "a user-facing error is one paragraph"
    assert "pydantic" not in message.lower() and "errors.pydantic.dev" not in message
    assert message.startswith("Invalid config run.yaml") or "pipeline_type" in message or "mixes" in message
    return message


def test_unknown_nested_key_names_the_path_and_suggests():
    message = error_of({"actor_train": {"training_args": {"learning_rat": 1e-6}}})
    assert "actor_train.training_args.learning_rat: unknown key" in message
    assert "Did you mean 'learning_rate'?" in message


def test_unknown_key_inside_a_list_item_and_in_a_dict_value():
    message = error_of({"train_infer_correction": {"filters": [{"ratio_lo": 0.5}]},
                        "custom_envs": {"Grid": {"env_type": "grid", "max_step": 3}}})
    assert "train_infer_correction.filters[0].ratio_lo: unknown key. Did you mean 'ratio_low'" in message
    assert "custom_envs.Grid.max_step: unknown key. Did you mean 'max_steps'" in message
    assert message.count("unknown key") == 2 and "(2 problems)" in message


@pytest.mark.parametrize("data, expected", [
    ({"actor_train": {"training_args": {"learning_rate": "fast"}}},
     "actor_train.training_args.learning_rate expects a number, got 'fast'"),
    ({"rollout_batch_size": [64]}, "rollout_batch_size expects an integer, got [64]"),
    ({"train_env_manager": {"tags": "FrozenLake"}}, "train_env_manager.tags expects a list of strings"),
    ({"kl_penalty": "k4"}, "kl_penalty must be one of 'kl', 'abs', 'mse', 'k3', 'k1', 'k2', 'low_var_kl', 'full', got 'k4'"),
    ({"ppo_epochs": 0}, "ppo_epochs should be greater than or equal to 1, got 0"),
    ({"async_generation_ratio": 1.5}, "async_generation_ratio expects an integer, got 1.5"),
    ({"actor_train": {"tis_lower_bound": 2.0}}, "actor_train: tis_lower_bound (2.0) is above tis_upper_bound"),
    ({"custom_envs": {"Grid": {"max_steps": 3}}}, "custom_envs.Grid.env_type is required (a string)"),
])
def test_wrong_types_and_values_name_path_and_expectation(data, expected):
    assert expected in error_of(data)


def test_literal_typo_gets_a_suggestion():
    assert "Did you mean 'seq-mean-token-mean'" in error_of({"loss_agg_mode": "seq-mean-token-man"})


@pytest.mark.parametrize("manager, expected", [
    ({"tags": ["A", "B"], "num_groups_partition": [4], "num_env_groups": 4},
     "train_env_manager.num_groups_partition has 1 entries [4] but train_env_manager.tags has 2"),
    ({"tags": ["A", "B"], "num_groups_partition": [2, 3], "num_env_groups": 4},
     "train_env_manager.num_groups_partition [2, 3] sums to 5, but train_env_manager.num_env_groups is 4"),
    ({"tags": ["A", "A"], "num_groups_partition": [2, 2], "num_env_groups": 4},
     "train_env_manager.tags lists 'A' more than once"),
    ({"tags": ["A", "B", "C"], "num_env_groups": 2},
     "train_env_manager.num_env_groups (2) is smaller than the number of tags (3)"),
])
def test_bad_tag_partition(manager, expected):
    assert expected in error_of({"rollout_batch_size": 8, "train_env_manager": manager})


def test_partition_defaults_to_an_equal_split():
    config = validate_config({**BASE, "train_env_manager": {"tags": ["A", "B", "C"], "num_env_groups": 8}})
    assert config.train_env_manager.partition() == {"A": 3, "B": 3, "C": 2}


def test_rollout_batch_size_must_hold_complete_groups():
    message = error_of({"rollout_batch_size": 100, "train_env_manager": {"group_size": 8, "tags": ["A"]}})
    assert "rollout_batch_size (100) is not a multiple of train_env_manager.group_size (8)" in message


def test_turn_longer_than_a_sample_is_rejected():
    message = error_of({"sequence_length": 256, "custom_envs": {"Grid": {"env_type": "g", "max_tokens_per_step": 512}}})
    assert "custom_envs.Grid.max_tokens_per_step (512) exceeds the sequence length (256)" in message


def test_sequence_length_is_required():
    with pytest.raises(ConfigError, match=r"set sequence_length \(or prompt_length and response_length\)"):
        validate_config({})


def test_val_group_size_above_one_is_a_warning_not_an_error():
    with pytest.warns(ConfigWarning, match=r"val_env_manager.group_size is 4; 1 is recommended"):
        config = validate_config({**BASE, "val_env_manager": {"group_size": 4, "tags": ["A"]}})
    assert config.val_env_manager.group_size == 4


def test_roll_example_typo_flash_attn_is_accepted_with_a_warning():
    with pytest.warns(ConfigWarning, match=r"actor_train\.model_args\.flash_attn \(fa2\) is ignored"):
        config = validate_config({**BASE, "actor_train": {"model_args": {"flash_attn": "fa2"}}})
    assert config.actor_train.model_args.attn_implementation is None


def test_mixing_agentic_and_rlvr_keys():
    message = error_of({"custom_envs": {}, "num_return_sequences_in_group": 4})
    assert "agentic keys (custom_envs)" in message and "rlvr keys (num_return_sequences_in_group)" in message


def test_explicit_pipeline_type_explains_foreign_keys():
    message = error_of({"pipeline_type": "rlvr", "train_env_manager": {}})
    assert "train_env_manager: unknown key" in message and "a key of agentic configs" in message
    assert "pipeline_type must be one of agentic, rlvr, got 'rlhf'" in error_of({"pipeline_type": "rlhf"})


def test_rlvr_domains_must_have_rewards():
    message = error_of({"rewards": {"math_rule": {}}, "actor_train": {
        "data_args": {"domain_interleave_probs": {"math_rul": 1.0}}}})
    assert "domain_interleave_probs names domain 'math_rul'" in message and "Did you mean 'math_rule'" in message


# -- device_mapping ------------------------------------------------------------------------------

@pytest.mark.parametrize("value, devices", [
    ("list(range(0,4))", [0, 1, 2, 3]),
    ("list(range(4, 8))", [4, 5, 6, 7]),
    ("range(2)", [0, 1]),
    ("list(range(0, 8, 2))", [0, 2, 4, 6]),
    ("[0, 1, 3]", [0, 1, 3]),
    ("list(range(0,2)) + [6, 7]", [0, 1, 6, 7]),
    ([3, 2], [3, 2]),
    (5, [5]),
    (None, None),
])
def test_device_mapping_forms(value, devices):
    assert parse_device_mapping(value) == devices


@pytest.mark.parametrize("value, expected", [
    ("__import__('os').system('touch {marker}')", "is not allowed there (roll never evaluates code"),
    ("[i for i in range(4)]", "is not allowed there"),
    ("list(range(0, 10**12))", "is not allowed there"),
    ("list(range(0, 100000000))", "names 100000000 devices"),
    ("list(range(0,4)", "cannot parse"),
    ("[0, 0, 1]", "more than once"),
    ("list(range(-2, 2))", "not a device id"),
    ("list(range(3, 3))", "names no devices"),
    ([0, "1"], "not a device id"),
])
def test_device_mapping_never_runs_code(tmp_path, value, expected):
    marker = tmp_path / "pwned"
    if isinstance(value, str):
        value = value.replace("{marker}", str(marker))
    with pytest.raises(DeviceMappingError, match=expected.replace("(", r"\(")):
        parse_device_mapping(value)
    assert not marker.exists()


def test_device_mapping_error_in_a_config_names_the_worker(tmp_path):
    marker = tmp_path / "pwned"
    message = error_of({"actor_infer": {"device_mapping": f"__import__('os').system('touch {marker}')"}})
    assert message.startswith("Invalid config run.yaml: actor_infer.device_mapping: ")
    assert "roll never evaluates code in configs" in message and not marker.exists()


def test_device_mapping_must_split_into_workers():
    message = error_of({"actor_infer": {"device_mapping": [0, 1, 2], "num_gpus_per_worker": 2}})
    assert "actor_infer: device_mapping has 3 devices" in message


def test_valid_config_emits_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_config({**BASE, "train_env_manager": {"tags": ["A"], "group_size": 4, "num_env_groups": 2},
                         "rollout_batch_size": 8})


@pytest.mark.parametrize("data, expected", [
    ({"add_token_level_kl": True}, "add_token_level_kl puts the KL to the reference model into the rewards"),
    ({"force_disable_old_logprobs_recompute": True, "use_kl_loss": True, "kl_loss_coef": 0.1},
     "force_disable_old_logprobs_recompute is on, but the KL to the reference model"),
    ({"force_disable_old_logprobs_recompute": True, "init_kl_coef": 0.05},
     "force_disable_old_logprobs_recompute is on"),
])
def test_kl_settings_that_would_fail_at_the_first_step_are_refused(data, expected):
    """Both used to pass validation and fail in the first step's advantages (a KeyError for the second)."""
    assert expected in error_of(data)


def test_kl_settings_that_work_pass():
    validate_config({**BASE, "add_token_level_kl": True, "init_kl_coef": 0.05}, source="run.yaml")
    validate_config({**BASE, "force_disable_old_logprobs_recompute": True}, source="run.yaml")
