"""Loading configs: ROLL's own examples, Hydra composition, overrides, interpolation, variables."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml
from pydantic import ValidationError

from roll_core.config import (
    AgenticConfig,
    EnvManagerConfig,
    RLVRConfig,
    load_config,
    validate_config,
)
from roll_core.errors import ConfigError

LAYOUT_DIR = "roll_layout/qwen2.5-0.5B-agentic"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# -- ROLL's example configs from the docs --------------------------------------------------------

def test_agentic_async_example_validates(fixtures):
    config = load_config(fixtures / "agent_val_frozen_lake_async.yaml")
    assert isinstance(config, AgenticConfig)
    assert config.async_generation_ratio == 1 and config.rollout_batch_size == 1024
    assert config.adv_estimator == "grpo" and config.whiten_advantages is True
    train, infer = config.actor_train, config.actor_infer
    assert train.device_mapping == [0, 1, 2, 3] and infer.device_mapping == [4, 5, 6, 7]
    assert train.strategy_args.strategy_name == "megatron_train"
    assert train.strategy_args.strategy_config["recompute_granularity"] == "full"
    assert train.training_args.learning_rate == pytest.approx(1e-6)
    assert train.training_args.gradient_accumulation_steps == 128
    assert train.model_args.attn_implementation == "fa2"
    assert infer.generating_args.top_k == 100 and infer.strategy_args.strategy_name == "vllm"
    assert train.pg_variant == "ppo" and train.dual_clip_c == 3.0  # roll's decisions
    assert config.init_kl_coef == 0.0 and config.loss_agg_mode == "seq-mean-token-mean"


def test_rlvr_async_example_validates_with_interpolations(fixtures):
    config = load_config(fixtures / "rlvr_config_async.yaml")
    assert isinstance(config, RLVRConfig)
    assert config.num_return_sequences_in_group == 8 and config.is_num_return_sequences_expand is True
    assert config.actor_infer.generating_args.max_new_tokens == 8192  # ${response_length}
    assert config.actor_infer.generating_args.num_return_sequences == 8  # ${num_return_sequences_in_group}
    assert config.actor_train.device_mapping == list(range(16))
    assert config.actor_infer.device_mapping == list(range(16, 24))
    assert config.actor_train.data_args.file_name == ["data/math_deepmath_deal.jsonl"]
    assert config.actor_train.data_args.template == "qwen2_5"
    assert config.effective_sequence_length == 2048 + 8192


def test_env_manager_block_of_the_rollout_docs_validates(fixtures):
    raw = yaml.safe_load((fixtures / "async_parallel_rollout_env_managers.yaml").read_text())
    train = EnvManagerConfig.model_validate(raw["train_env_manager"])
    val = EnvManagerConfig.model_validate(raw["val_env_manager"])
    assert train.partition() == {"FrozenLake": 128} and train.num_envs == 1024
    assert val.partition() == {"SimpleSokoban": 256, "LargerSokoban": 256,
                               "SokobanDifferentGridVocab": 256, "FrozenLake": 256}
    assert train.partition_problems("train_env_manager") == val.partition_problems("val_env_manager") == []


def test_env_manager_block_composed_into_the_agentic_example(fixtures, recwarn):
    config = load_config(fixtures / "frozen_lake_async_with_env_managers.yaml")
    assert isinstance(config, AgenticConfig)
    assert config.exp_name == "frozen_lake_async_with_env_managers"
    assert config.train_env_manager.group_size == 8 and config.val_env_manager.num_env_groups == 1024
    assert config.actor_train.strategy_args.strategy_name == "megatron_train"  # from the other file
    assert not [w for w in recwarn if "group_size" in str(w.message)]  # val group_size is 1


# -- Hydra defaults composition in a ROLL-style directory ------------------------------------------

@pytest.mark.parametrize("how", ["file", "dir+name"])
def test_roll_layout_directory_composes(fixtures, how):
    if how == "file":
        config = load_config(fixtures / LAYOUT_DIR / "agent_val_sokoban.yaml")
    else:
        config = load_config(fixtures / LAYOUT_DIR, config_name="agent_val_sokoban")
    sokoban = config.custom_envs["SimpleSokoban"]
    assert sokoban.env_type == "sokoban"
    assert sokoban.max_steps == 5  # the primary file's value beats the included default (_self_ last)
    assert sokoban.env_config == {"action_pattern": "<answer>(.*?)</answer>", "max_steps": 5,
                                  "format_penalty": -0.15, "dim_room": [6, 6], "num_boxes": 1}
    assert sokoban.agent_template.startswith("Turn {turn_idx}:")
    assert config.actor_train.strategy_args.strategy_config == {"zero_optimization": {"stage": 2,
                                                                                      "overlap_comm": True}}
    assert config.exp_name == "agentic_sokoban_8x"  # interpolation of a nested key
    assert config.actor_infer.generating_args.max_new_tokens == 128  # variable from ../config
    assert set(config.custom_envs) == {"SimpleSokoban", "FrozenLake"}
    assert config.reward_normalization.method == "mean_std"


def test_missing_defaults_entry_is_a_config_error(tmp_path):
    path = write(tmp_path, "main.yaml", """
        defaults:
          - ../config/nowhere@_here_
        sequence_length: 128
    """)
    with pytest.raises(ConfigError, match=r"Cannot compose .*main\.yaml.*nowhere"):
        load_config(path)


def test_variables_and_typos_at_the_top_level(tmp_path):
    write(tmp_path, "shared.yaml", """
        unused_shared_preset: {a: 1}
        turns: 4
    """)
    ok = write(tmp_path, "ok.yaml", """
        defaults: [shared, _self_]
        sequence_length: 256
        my_len: 64
        custom_envs:
          Grid: {env_type: grid, max_steps: "${turns}", max_tokens_per_step: "${my_len}"}
    """)
    config = load_config(ok)
    assert config.custom_envs["Grid"].max_steps == 4 and config.custom_envs["Grid"].max_tokens_per_step == 64
    assert "my_len" not in config.model_dump() and "unused_shared_preset" not in config.model_dump()

    typo = write(tmp_path, "typo.yaml", """
        sequence_length: 256
        whiten_advantage: true
    """)
    with pytest.raises(ConfigError, match=r"whiten_advantage: unknown key\. Did you mean 'whiten_advantages'"):
        load_config(typo)


# -- overrides ------------------------------------------------------------------------------------

def test_overrides_reach_yaml_keys_schema_fields_and_interpolations(fixtures):
    config = load_config(fixtures / "rlvr_config_async.yaml", [
        "actor_train.training_args.learning_rate=2e-6",
        "response_length=4096",  # flows into ${response_length}
        "init_kl_coef=0.05",  # not in the file, but a schema field
        "actor_train.device_mapping=list(range(0,8))",
        "+actor_train.data_args.domain_interleave_probs={math_rule: 1.0}",
        "~actor_infer.strategy_args.strategy_config.load_format",
    ])
    assert config.actor_train.training_args.learning_rate == pytest.approx(2e-6)
    assert config.actor_infer.generating_args.max_new_tokens == 4096
    assert config.init_kl_coef == 0.05
    assert config.actor_train.device_mapping == list(range(8))
    assert config.actor_train.data_args.domain_interleave_probs == {"math_rule": 1.0}
    assert "load_format" not in config.actor_infer.strategy_args.strategy_config


def test_override_edits_an_interpolated_section_in_place(fixtures):
    config = load_config(fixtures / LAYOUT_DIR / "agent_val_sokoban.yaml", [
        "custom_envs.FrozenLake.env_config.is_slippery=true",
        "max_actions_per_traj=7",  # a variable: reaches every place that interpolates it
        "train_env_manager.tags=[FrozenLake,SimpleSokoban]",
    ])
    lake = config.custom_envs["FrozenLake"]
    assert lake.env_type == "frozen_lake" and lake.env_config["is_slippery"] is True
    assert lake.max_steps == 7 and config.custom_envs["SimpleSokoban"].env_config["max_steps"] == 7
    assert config.train_env_manager.tags == ["FrozenLake", "SimpleSokoban"]


@pytest.mark.parametrize("override, expected", [
    ("actor_train.training_args.learning_rat=1e-6",
     r"Cannot override 'actor_train\.training_args\.learning_rat'.*Did you mean "
     r"'actor_train\.training_args\.learning_rate'\?.*\+actor_train\.training_args\.learning_rat=1e-6"),
    ("actor_train.strategy_args.strategy_config.tensor_model_paralel_size=2",
     r"no key 'tensor_model_paralel_size'.*Did you mean '.*tensor_model_parallel_size'"),
    ("adv_estimater=grpo", r"Did you mean 'adv_estimator'"),
    ("just_a_word", r"Cannot read the override 'just_a_word'"),
    ("~not_there", r"Cannot remove 'not_there'"),
])
def test_bad_overrides(fixtures, override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(fixtures / "rlvr_config_async.yaml", [override])


def test_plus_adds_keys_that_validation_then_judges(fixtures):
    config = load_config(fixtures / "agent_val_frozen_lake_async.yaml",
                         ["+custom_envs.Grid.env_type=grid", "+custom_envs.Grid.max_steps=3"])
    assert config.custom_envs["Grid"].max_steps == 3
    with pytest.raises(ConfigError, match=r"Invalid config .*: adv_estimater: unknown key"):
        load_config(fixtures / "agent_val_frozen_lake_async.yaml", ["+adv_estimater=gae"])


# -- interpolation and YAML errors ----------------------------------------------------------------

def test_interpolation_errors_name_the_key(tmp_path):
    path = write(tmp_path, "c.yaml", """
        sequence_length: 128
        actor_infer:
          generating_args:
            max_new_tokens: ${response_lenght}
    """)
    with pytest.raises(ConfigError, match=r"Cannot resolve actor_infer\.generating_args\.max_new_tokens .*"
                                          r"'response_lenght' not found"):
        load_config(path)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "c.yaml", "sequence_length: 128\nactor_train: [1, 2\n")
    with pytest.raises(ConfigError, match=r"not valid YAML: .*line \d+, column \d+"):
        load_config(path)


def test_ignores_hydra_block_and_accepts_none_strings(tmp_path):
    path = write(tmp_path, "c.yaml", """
        hydra: {run: {dir: .}, output_subdir: null}
        sequence_length: 128
        norm_mean_type: None
        resume_from_checkpoint: false
        model_name: ${exp_name}-${now:%Y}
        exp_name: demo
        tracker_kwargs: {name: "${model_name}"}
    """)
    config = load_config(path)
    assert config.norm_mean_type is None and config.resume_from_checkpoint is False
    assert config.tracker_kwargs["name"].startswith("demo-20")  # the `now` resolver works without Hydra


def test_validate_config_is_pure_and_frozen():
    config = validate_config({"sequence_length": 64, "actor_train": {"device_mapping": [1, 0]}})
    assert isinstance(config, AgenticConfig) and config.actor_train.device_mapping == [1, 0]
    with pytest.raises(ValidationError, match="frozen"):
        config.seed = 1


def test_plain_configs_stay_import_light(fixtures):
    code = (
        "import sys; from roll_core.config import load_config;"
        f"load_config({str(fixtures / 'rlvr_config_async.yaml')!r});"
        "heavy = [m for m in ('torch', 'ray', 'hydra', 'transformers', 'vllm') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
