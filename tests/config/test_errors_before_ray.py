"""Config errors that used to surface only after Ray had started are refused by ``roll config show``.

Each case is a config that validated and resolved before, then failed in the pipeline's start-up
(in the driver, with Ray running) or inside a worker; now ``roll config show`` (which is what
``roll run`` does before it starts anything) names the YAML key in one paragraph.
"""

from __future__ import annotations

import textwrap

import pytest
import yaml

from roll_core.cli import main
from roll_core.plugins import reset_plugin_manager

AGENTIC = """
    pretrain: roll-tiny
    adv_estimator: grpo
    sequence_length: 512
    rollout_batch_size: 4
    train_env_manager: {tags: [FrozenLake], num_env_groups: 1, group_size: 4}
    val_env_manager: {tags: [FrozenLake], num_env_groups: 2}
"""
RLVR = """
    pipeline_type: rlvr
    pretrain: roll-tiny
    adv_estimator: grpo
    sequence_length: 96
    prompt_length: 64
    rollout_batch_size: 4
    rewards: {arithmetic: {reward_type: math_verify}}
    actor_train:
      data_args: {file_name: train.jsonl}
"""

#: id -> (base config, overrides, the message's fragments); every case passed `roll config show` before
CASES = {
    "max_steps -1": (AGENTIC, ["max_steps=-1"], ["max_steps is -1 (no limit), which roll's pipelines do not support",
                                                 "set max_steps to a positive number"]),
    "rlvr without data": (RLVR, ["~actor_train.data_args"], ["actor_train.data_args.file_name is not set"]),
    "rlvr data file missing": (RLVR, ["actor_train.data_args.file_name=missing.jsonl"], [
        "actor_train.data_args.file_name: data file 'missing.jsonl' does not exist",
        "relative to the directory `roll run` is started in"]),
    "rlvr validation file missing": (RLVR, ["+validation.data_args.file_name=[train.jsonl,val.jsonl]"], [
        "validation.data_args.file_name: data file 'val.jsonl' does not exist"]),
    "rlvr eval file missing": (RLVR, ["+actor_train.data_args.eval_file_name=val.jsonl"], [
        "actor_train.data_args.eval_file_name: data file 'val.jsonl' does not exist"]),
    "rlvr unknown template": (RLVR, ["+actor_train.data_args.template=qwen9"], [
        "actor_train.data_args.template is 'qwen9', which roll does not know", "Did you mean 'qwen3'"]),
    "metric scheduler": (AGENTIC, ["+actor_train.training_args.lr_scheduler_type=reduce_lr_on_plateau"], [
        "actor_train.training_args.lr_scheduler_type: reduce_lr_on_plateau steps on a validation metric"]),
    "scheduler without its kwargs": (AGENTIC, ["+actor_train.training_args.lr_scheduler_type=cosine_with_min_lr"], [
        "lr_scheduler_type cosine_with_min_lr needs min_lr or min_lr_rate in lr_scheduler_kwargs"]),
    "world_size against device_mapping": (AGENTIC, ["+actor_train.device_mapping=[0,1,2,3]",
                                                   "+actor_train.world_size=2"], [
        "actor_train.world_size is 2, but device_mapping has 4 devices"]),
    "tensor parallel split": (AGENTIC, ["+actor_train.device_mapping=[0,1,2]",
                                        "+actor_train.strategy_args.strategy_name=hf_train",
                                        "+actor_train.strategy_args.strategy_config.tensor_model_parallel_size=2"], [
        "actor_train: 3 ranks do not split into tensor-parallel groups of 2"]),
    "unknown rollout policy": (AGENTIC, ["+train_env_manager.llm_proxy.proxy_type=openai"], [
        "Unknown rollout policy 'openai'; use one of"]),
    "group larger than a worker": (AGENTIC, ["+train_env_manager.group_size_redundancy=2",
                                             "+train_env_manager.max_env_num_per_worker=4"], [
        "train_env_manager.group_size (6 with redundancy) is larger than max_env_num_per_worker (4)"]),
}


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    """A run directory with a training data file; the registry of the installed plugins."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1=", "ground_truth": "2", "domain": "arithmetic"}\n')
    reset_plugin_manager()
    yield tmp_path
    reset_plugin_manager()


def show(capsys, base: str, overrides: list[str]) -> tuple[int, str, str]:
    path = "run.yaml"
    with open(path, "w") as f:
        f.write(textwrap.dedent(base))
    code = main(["config", "show", path, *overrides])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_base_configs_pass(config_dir, capsys):
    for base in (AGENTIC, RLVR):
        code, out, err = show(capsys, base, [])
        assert code == 0, err
        assert yaml.safe_load(out)["max_steps"] == 500


@pytest.mark.parametrize("case", CASES)
def test_refused_by_config_show(config_dir, capsys, case):
    base, overrides, fragments = CASES[case]
    code, _, err = show(capsys, base, overrides)
    assert code == 1 and err.startswith("roll: error: ") and err.count("\n") == 1, err  # one paragraph
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def test_files_the_run_does_not_read_are_not_required(config_dir, capsys):
    """Validation files are read only when the run validates."""
    code, _, err = show(capsys, RLVR, ["+validation.data_args.file_name=val.jsonl", "eval_steps=0"])
    assert code == 0, err


def test_a_rollout_without_training_does_not_check_training(config_dir):
    """``roll rollout`` resolves only the roles it needs; what only training uses stays unchecked."""
    from roll_core.config import load_config, resolve

    (config_dir / "run.yaml").write_text(textwrap.dedent(AGENTIC))
    config = load_config("run.yaml", ["+actor_train.device_mapping=[0,1,2,3]", "+actor_train.world_size=2"])
    assert resolve(config, roles=()).config.actor_train.world_size == 2
