"""Hostile and careless configs: refused with one paragraph before anything starts, never expanded,
never a traceback, never silently ignored (issue 19)."""

from __future__ import annotations

import textwrap
import time

import pytest
import yaml

from roll_core.cli import main
from roll_core.config import load_config, resolve, validate_config
from roll_core.errors import ConfigError

BASE = {"sequence_length": 1024}


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def clean_error(capsys, *argv) -> str:
    """``roll ARGV`` fails with exit code 1 and one paragraph on stderr, nothing on stdout."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 1 and out == "", (code, out, err)
    assert err.startswith("roll: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def invalid(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config({**BASE, **data}, source="run.yaml")
    assert "\n" not in str(info.value)
    return str(info.value)


# -- roll config show never tracebacks ---------------------------------------------------------------

@pytest.mark.parametrize("override, fragments", [
    ("train_env_manager.tags=[X", ["not valid YAML", "expected ',' or ']'", "train_env_manager.tags='[X'"]),
    ("actor_train.device_mapping='list(range(0, 100000000000000000000000000))'",
     ["names 100000000000000000000000000 devices (at most 65536)"]),
    ("actor_train.device_mapping='" + "+".join(f"[{i}]" for i in range(5000)) + "'",
     ["characters long (at most 4096)"]),
    ("actor_train.device_mapping='" + "(" * 900 + "[0]" + ")" * 900 + "'", ["cannot parse"]),
])
def test_config_show_reports_bad_overrides_in_one_paragraph(capsys, fixtures, override, fragments):
    err = clean_error(capsys, "config", "show", str(fixtures / "rlvr_config_async.yaml"), override, "--no-resolve")
    assert all(f in err for f in fragments), err


def test_device_mapping_in_a_file_with_a_huge_range(capsys, tmp_path):
    path = write(tmp_path / "c.yaml", """
        sequence_length: 64
        actor_train: {device_mapping: "list(range(0, 10**26))"}
        actor_infer: {device_mapping: "list(range(0, 100000000000000000000000000))"}
    """)
    err = clean_error(capsys, "config", "show", str(path), "--no-resolve")
    assert "actor_train.device_mapping" in err and "actor_infer.device_mapping" in err


# -- YAML alias bombs --------------------------------------------------------------------------------

def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\nsequence_length: 64\n"


def test_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())  # 9**9 = 387 million values once expanded
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"expands to more than 200,000 values through its YAML anchors"):
        load_config(path)
    assert time.perf_counter() - started < 5


def test_alias_bomb_in_an_included_file_is_refused_too(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "bomb.yaml").write_text(alias_bomb())
    main_file = write(tmp_path / "main.yaml", """
        defaults: [shared/bomb, _self_]
        sequence_length: 64
    """)
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb\.yaml expands to more than"):
        load_config(main_file)
    assert time.perf_counter() - started < 5


def test_a_few_aliases_still_load(tmp_path):
    path = write(tmp_path / "c.yaml", """
        sequence_length: 64
        actor_train: {training_args: &common {learning_rate: 0.001}}
        critic: {training_args: *common}
    """)
    config = load_config(path)
    assert config.actor_train.training_args.learning_rate == config.critic.training_args.learning_rate == 0.001


# -- included files: a typo is an error, a variable is not --------------------------------------------

def test_typo_in_an_included_file_is_an_error(tmp_path):
    write(tmp_path / "shared.yaml", """
        rollout_batch_sise: 64
        unused_preset: {a: 1}
    """)
    path = write(tmp_path / "main.yaml", """
        defaults: [shared, _self_]
        sequence_length: 64
    """)
    with pytest.raises(ConfigError, match=r"rollout_batch_sise: unknown key in a file included through the "
                                          r"defaults: list.*Did you mean 'rollout_batch_size'"):
        load_config(path)


# -- accepted but ignored before: now read, or refused -------------------------------------------------

def test_val_batch_size_zero_is_refused():
    assert "val_batch_size is 0, which would validate on nothing" in invalid({"val_batch_size": 0})
    assert validate_config({**BASE, "val_batch_size": -1}).val_batch_size == -1


def test_partition_giving_a_tag_no_group_is_refused():
    message = invalid({"train_env_manager": {"tags": ["A", "B"], "num_groups_partition": [4, 0],
                                             "num_env_groups": 4}})
    assert "train_env_manager.num_groups_partition [4, 0] gives 'B' no env group" in message


def test_rpc_timeout_is_a_real_field():
    from roll_core.config import RunSettings

    field = RunSettings.model_fields["rpc_timeout"]
    assert not (field.json_schema_extra or {}).get("roll_compat")
    assert "rpc_timeout should be greater than or equal to 1" in invalid({"rpc_timeout": 0})


# -- what used to surface only after the warm start ----------------------------------------------------

def test_unknown_lr_scheduler_type_is_a_config_error():
    message = invalid({"actor_train": {"training_args": {"lr_scheduler_type": "cosin"}}})
    assert "actor_train.training_args.lr_scheduler_type: unknown scheduler 'cosin'" in message
    assert "Did you mean 'cosine'" in message


def test_scheduler_names_are_transformers_names():
    from transformers import SchedulerType

    from roll_core.config.workers import LR_SCHEDULER_TYPES

    assert set(LR_SCHEDULER_TYPES) == {t.value for t in SchedulerType}


def test_the_refused_schedulers_are_those_transformers_cannot_build_or_step_so():
    """METRIC_SCHEDULERS and SCHEDULER_KWARGS (refused at validation) match what transformers does in
    the train worker: every other schedule builds and steps as roll builds and steps it."""
    import torch
    from transformers import get_scheduler

    from roll_core.config.workers import LR_SCHEDULER_TYPES, METRIC_SCHEDULERS, SCHEDULER_KWARGS

    def build_and_step(kind, **kwargs):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        scheduler = get_scheduler(kind, optimizer, num_warmup_steps=1, num_training_steps=10,
                                  scheduler_specific_kwargs=kwargs)
        optimizer.step()
        scheduler.step()  # as hf_train steps it: once per optimiser step, no metric

    for kind in LR_SCHEDULER_TYPES:
        if kind in METRIC_SCHEDULERS:
            with pytest.raises(TypeError, match="metrics"):
                build_and_step(kind)
        elif kind in SCHEDULER_KWARGS:
            with pytest.raises((TypeError, ValueError)):
                build_and_step(kind)
            for key in SCHEDULER_KWARGS[kind]:
                build_and_step(kind, **{key: 0.1 if "lr" in key else 2})
        else:
            build_and_step(kind)


def test_unknown_reward_normalization_grouping_is_a_config_error():
    message = invalid({"reward_normalization": {"grouping": "tags"}})
    assert "reward_normalization.grouping: unknown grouping 'tags'. Did you mean 'tag'" in message


def test_grouping_keys_are_keys_of_the_batches():
    from roll_core.chat.trajectory import Trajectory, Turn
    from roll_core.config.algorithm import GROUPING_KEYS
    from roll_core.rollout.engine.batch import build_batch

    turn = Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.1], version=0, finish_reason="stop",
                observation="o", prompt_text="p", response_text="r", reward=1.0, metrics={})
    traj = Trajectory(traj_id="t", traj_group_id="g", group_id=0, episode_id=0, member=0, tag="T", seed=1,
                      mode="train", turns=[turn], incremental=True, terminated=True, truncated=False,
                      end_reason="terminated", episode_reward=1.0, metrics={}, messages=[])
    keys = set(build_batch([traj], granularity="trajectory", pad_id=0).keys())
    keys |= set(build_batch([traj], granularity="step", pad_id=0).keys())
    assert set(GROUPING_KEYS) - {"batch"} <= keys


def test_invalid_reward_regex_is_a_config_error():
    message = invalid({"rewards": {"fmt": {"reward_type": "regex", "format_pattern": "<answer>(.*</answer>"}}})
    assert "rewards.fmt.format_pattern: '<answer>(.*</answer>' is not a valid regular expression" in message


def test_all_zero_domain_probabilities_are_a_config_error():
    message = invalid({"rewards": {"math": {}}, "actor_train": {
        "data_args": {"domain_interleave_probs": {"math": 0.0}}}})
    assert "gives every domain probability 0, so no prompt could be drawn" in message


# -- env_config keys of the env's model need no `+`; a typo there is still caught ---------------------------

GRID_CONFIG = """
    sequence_length: 512
    pretrain: tiny
    adv_estimator: cfgtest_adv
    rollout_batch_size: 4
    actor_train: {pg_variant: cfgtest_loss, strategy_args: {strategy_name: cfgtest_train}}
    actor_infer: {strategy_args: {strategy_name: cfgtest_infer}}
    custom_envs:
      Grid: {env_type: cfgtest_grid, env_config: {max_steps: 3}}
    train_env_manager: {tags: [Grid], num_env_groups: 1, group_size: 4}
    val_env_manager: {tags: [Grid], num_env_groups: 1}
"""


def test_env_config_fields_are_overridable_without_plus(tmp_path):
    from cfgtest_plugin import MODULE  # noqa: F401 (the registrations point at it)

    from roll_core.plugins import PluginManager

    registry = PluginManager(extra_modules=["cfgtest_plugin"]).registry
    path = write(tmp_path / "run.yaml", GRID_CONFIG)
    run = resolve(load_config(path, ["custom_envs.Grid.env_config.size=6"]), registry=registry)
    assert run.envs["Grid"].config.size == 6
    with pytest.raises(ConfigError, match=r"custom_envs\.Grid\.env_config\.siz: unknown key\. Did you mean 'size'"):
        resolve(load_config(path, ["custom_envs.Grid.env_config.siz=6"]), registry=registry)
    with pytest.raises(ConfigError, match=r"Cannot override 'custom_envs\.Grd"):  # the entry itself must exist
        load_config(path, ["custom_envs.Grd.env_config.size=6"])


def test_overrides_may_follow_options(capsys, fixtures):
    code = main(["config", "show", str(fixtures / "rlvr_config_async.yaml"), "--no-resolve", "response_length=512"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert yaml.safe_load(out)["actor_infer"]["generating_args"]["max_new_tokens"] == 512
    with pytest.raises(SystemExit):  # an unknown option is still an error
        main(["config", "show", str(fixtures / "rlvr_config_async.yaml"), "--no-such-option"])
