"""What a run checks before Ray starts (issue 19): envs, templates, first-prompt length, directories,
the model; each problem one paragraph with its YAML path, and no Ray started."""

from __future__ import annotations

import pytest
from pipeline_helpers import EXAMPLES

from roll_core.config import load_config, resolve
from roll_core.errors import ConfigError, RollError
from roll_core.pipeline.preflight import preflight

CONFIG = EXAMPLES / "frozen_lake" / "grpo.yaml"


def checked(tmp_path, *overrides):
    config = load_config(str(CONFIG), [f"output_dir={tmp_path / 'out'}", f"logging_dir={tmp_path / 'logs'}",
                                       "render_save_dir=null", *overrides])
    return preflight(resolve(config))


def test_demo_config_passes_and_creates_its_directories(tmp_path):
    assert checked(tmp_path) is not None  # the rollout tokenizer, for reuse
    assert (tmp_path / "out").is_dir() and (tmp_path / "logs").is_dir()


def test_unknown_template_field_is_caught_before_any_episode(tmp_path):
    with pytest.raises(ConfigError, match=r"custom_envs\.FrozenLake4x4: The agent_template '\{observation\}' cannot "
                                          r"be filled \(KeyError: 'observation'\); it may use \{turn_idx\}"):
        checked(tmp_path, "custom_envs.FrozenLake4x4.agent_template='{observation}'")


def test_first_prompt_longer_than_the_sequence_is_caught(tmp_path):
    with pytest.raises(ConfigError, match=r"custom_envs\.FrozenLake4x4: the first prompt of a FrozenLake4x4 episode is "
                                          r"\d+ tokens .* but sequence_length is 48"):
        checked(tmp_path, "sequence_length=48", "custom_envs.FrozenLake4x4.max_tokens_per_step=16")


def test_output_dir_that_is_a_file(tmp_path):
    (tmp_path / "taken").write_text("not a directory")
    config = load_config(str(CONFIG), [f"output_dir={tmp_path / 'taken'}", f"logging_dir={tmp_path / 'logs'}"])
    with pytest.raises(ConfigError, match=r"output_dir: '.*taken' is a file \(or lies under one\), not a directory"):
        preflight(resolve(config))


def test_wrong_pretrain_path_stops_the_run_before_ray(tmp_path):
    import ray

    from roll_core.pipeline import launch

    running = ray.is_initialized()  # the session's cluster may be up already; none may be started
    config = load_config(str(CONFIG), [f"pretrain={tmp_path / 'no_such_model'}", f"output_dir={tmp_path / 'out'}",
                                       f"logging_dir={tmp_path / 'logs'}"])
    with pytest.raises(RollError, match=r"pretrain '.*no_such_model' is neither a model directory"):
        launch(resolve(config))
    assert ray.is_initialized() == running
