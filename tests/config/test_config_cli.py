"""``roll config show`` and ``roll run``: resolved YAML out, one-paragraph errors, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from roll_core.cli import main, run_cmd
from roll_core.config import Run
from roll_core.plugins import reset_plugin_manager

HERE = os.path.dirname(__file__)

CFGTEST_CONFIG = """
    sequence_length: 512
    pretrain: tiny
    adv_estimator: cfgtest_adv
    rollout_batch_size: 4
    actor_train:
      pg_variant: cfgtest_loss
      strategy_args: {strategy_name: cfgtest_train}
    actor_infer:
      strategy_args: {strategy_name: cfgtest_infer}
    train_env_manager: {tags: [CfgtestGrid], num_env_groups: 1, group_size: 4}
    val_env_manager: {tags: [CfgtestGrid], num_env_groups: 1}
"""


@pytest.fixture
def cfgtest_plugins(monkeypatch):
    """The process registry holds roll-core's built-ins plus the throwaway test plugin only."""
    monkeypatch.setenv("ROLL_PLUGINS", "cfgtest_plugin")
    monkeypatch.setenv("ROLL_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    yield
    reset_plugin_manager()


@pytest.fixture
def cfgtest_config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(CFGTEST_CONFIG))
    return path


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, err, *fragments):
    assert code == 1
    assert err.startswith("roll: error: ") and err.count("\n") == 1, err  # one paragraph
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


def test_show_without_resolving(capsys, fixtures):
    code, out, err = run_main(capsys, "config", "show", str(fixtures / "rlvr_config_async.yaml"),
                              "response_length=1024", "--no-resolve")
    assert code == 0 and err == ""
    shown = yaml.safe_load(out)
    assert shown["pipeline_type"] == "rlvr"
    assert shown["actor_infer"]["generating_args"]["max_new_tokens"] == 1024
    assert shown["actor_train"]["device_mapping"] == list(range(16))


def test_show_resolves_through_the_process_registry(capsys, cfgtest_plugins, cfgtest_config):
    code, out, err = run_main(capsys, "config", "show", str(cfgtest_config))
    assert code == 0, err
    shown = yaml.safe_load(out)
    assert shown["custom_envs"]["CfgtestGrid"]["env_type"] == "cfgtest_grid"
    assert shown["custom_envs"]["CfgtestGrid"]["env_config"]["size"] == 4
    assert shown["actor_train"]["model_args"]["model_name_or_path"] == "tiny"


def test_show_prints_the_layout_as_comments(capsys, cfgtest_plugins, cfgtest_config):
    code, out, err = run_main(capsys, "config", "show", str(cfgtest_config), "+actor_train.device_mapping=[0,1,2,3]",
                              "+actor_train.num_gpus_per_worker=2", "+actor_infer.device_mapping=[2,3]",
                              "+actor_infer.ray_resources={roll_infer: 1}")
    assert code == 0, err
    lines = out.splitlines()
    comments = lines[lines.index(next(x for x in lines if x.startswith("# layout (roles -> ranks -> devices"))) + 1:]
    assert comments == [
        "#   actor_train: 2 ranks x 2 GPUs on devices 0-3 (shared with actor_infer)",
        "#     rank 0: devices 0, 1 (bundle 0)",
        "#     rank 1: devices 2, 3 (bundle 1)",
        "#   actor_infer: 2 ranks x 1 GPU on devices 2-3 (shared with actor_train)",
        "#     rank 0: device 2 (bundle 1, ray_resources {'roll_infer': 1.0})",
        "#     rank 1: device 3 (bundle 1, ray_resources {'roll_infer': 1.0})",
    ]
    assert yaml.safe_load(out)["actor_train"]["num_gpus_per_worker"] == 2  # still one YAML document
    # a contradiction is refused before anything is printed (and before Ray, in roll run)
    code, out, err = run_main(capsys, "config", "show", str(cfgtest_config), "+actor_train.device_mapping=[0,1,2,3]",
                              "+actor_train.num_gpus_per_worker=2", "+actor_train.world_size=4")
    assert out == ""
    assert_clean_error(code, err, "actor_train.world_size is 4, but device_mapping has 4 devices and "
                                  "num_gpus_per_worker is 2, which makes 2 ranks")


def test_show_roll_style_directory_and_name(capsys, fixtures):
    code, out, _ = run_main(capsys, "config", "show", "--config_path",
                            str(fixtures / "roll_layout/qwen2.5-0.5B-agentic"), "--config_name",
                            "agent_val_sokoban", "max_steps=3", "--no-resolve")
    assert code == 0 and yaml.safe_load(out)["max_steps"] == 3
    code, out, _ = run_main(capsys, "config", "show", str(fixtures / "roll_layout/qwen2.5-0.5B-agentic"),
                            "--config-name", "agent_val_sokoban", "--no-resolve")
    assert code == 0 and yaml.safe_load(out)["exp_name"] == "agentic_sokoban_8x"


@pytest.mark.parametrize("argv, fragments", [
    (["rollout_batch_size=3"], ["Invalid config", "rollout_batch_size (3) is not a multiple of "
                                                  "train_env_manager.group_size (4)"]),
    (["actor_train.training_args.learning_rat=1"], ["Did you mean 'actor_train.training_args.learning_rate'"]),
    (["adv_estimator=cfgtest_ad"], ["Unknown advantage estimator 'cfgtest_ad' (at adv_estimator)",
                                    "Did you mean 'cfgtest_adv'"]),
    (["train_env_manager.num_groups_partition=[2,2]"], ["num_groups_partition [2, 2] sums to 4"]),
])
def test_show_errors_are_one_paragraph(capsys, cfgtest_plugins, cfgtest_config, argv, fragments):
    code, out, err = run_main(capsys, "config", "show", str(cfgtest_config), *argv)
    assert out == ""
    assert_clean_error(code, err, *fragments)


def test_missing_or_misplaced_config_argument(capsys, fixtures):
    assert_clean_error(*run_main(capsys, "config", "show", "max_steps=3")[::2], "looks like an override")
    assert_clean_error(*run_main(capsys, "config", "show", str(fixtures / "roll_layout"))[::2],
                       "is a directory; name the config in it with --config-name")


def test_warnings_go_to_stderr(capsys, cfgtest_config):
    code, out, err = run_main(capsys, "config", "show", str(cfgtest_config),
                              "val_env_manager.group_size=2", "--no-resolve")
    assert code == 0 and out
    assert err.startswith("roll: warning: val_env_manager.group_size is 2; 1 is recommended")


def test_run_hands_the_resolved_config_to_the_pipeline(capsys, monkeypatch, cfgtest_plugins, cfgtest_config):
    import cfgtest_plugin

    monkeypatch.setattr(run_cmd, "PIPELINE_MODULE", "cfgtest_plugin")
    cfgtest_plugin.LAUNCHES.clear()
    code, _, err = run_main(capsys, "run", str(cfgtest_config), "max_steps=2", "--address", "ray://head:10001")
    assert code == 0, err
    (config, address), = cfgtest_plugin.LAUNCHES
    assert isinstance(config, Run) and config.config.max_steps == 2
    # the run keeps its command line, for the resume advice of a stop (pipeline/stop.py)
    assert config.argv == ("run", str(cfgtest_config), "max_steps=2", "--address", "ray://head:10001")
    assert address == "ray://head:10001"

    cfgtest_plugin.LAUNCHES.clear()
    code, _, err = run_main(capsys, "run", str(cfgtest_config), "adv_estimator=nope")
    assert_clean_error(code, err, "Unknown advantage estimator 'nope'")
    assert cfgtest_plugin.LAUNCHES == []  # nothing starts with an invalid config


def test_run_without_a_pipeline_says_so(capsys, monkeypatch, cfgtest_plugins, cfgtest_config):
    monkeypatch.setattr(run_cmd, "PIPELINE_MODULE", "cfgtest_no_such_pipeline_module")
    code, _, err = run_main(capsys, "run", str(cfgtest_config))
    assert_clean_error(code, err, "The config is valid", "no training pipeline yet")


def test_cli_process_shows_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sequence_length: 64\nactor_train:\n  device_mapping: \"__import__('os').getcwd()\"\n")
    env = {**os.environ, "PYTHONPATH": HERE}
    proc = subprocess.run([sys.executable, "-m", "roll_core", "config", "show", str(bad)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "actor_train.device_mapping" in proc.stderr and "never evaluates code" in proc.stderr
