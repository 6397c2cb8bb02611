"""Every config field does something or says it does not.

The meta-test walks the whole schema (both pipelines, every nested section) and fails on a field
that is neither read by roll's code nor declared with ``compat(...)`` (accepted so ROLL configs
load, warned about when set) or ``fixed(...)`` (one value supported, any other refused). "Read" is decided from the source the way datasette checks that
every hook is documented: the field's name must appear as an attribute (``config.field``) or as a
key or dotted path in a string (``cfg_get(worker, "model_args.field")``) somewhere in roll-core or
a plugin, outside the schema modules themselves; docstrings, comments and f-string text do not
count. A name shared with another field can hide an unread one, so a new field also needs a test
showing its effect.

Read on one pipeline's path and not on the other's: a name-based check cannot see that (the name
``do_sample`` was read, by the converter ``hf_infer`` used, while the agentic rollout built its
sampling without it), because both pipelines share most modules and read the config in Ray
actors. So where the two pipelines build settings from one shared section through their own code,
the check is by effect: every field of ``actor_infer.generating_args`` must change the sampling
each pipeline's rollout builds from a config, or be listed in :data:`NOT_SAMPLING` with the reason
(``test_every_generating_args_field_reaches_both_pipelines_sampling``). The rest of the shared
sections (``actor_train``, the algorithm, ``critic``, ``reference``) are read by the one training
loop both pipelines run, so the name-based check covers them.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from roll_core.config import load_config, resolve, validate_config
from roll_core.config.base import compat, compat_warnings, is_compat, is_fixed
from roll_core.config.pipeline import AgenticConfig, RLVRConfig

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_MODULES = {"pipeline.py", "workers.py", "envs.py", "algorithm.py", "rlvr.py", "base.py"}


def code_files() -> list[Path]:
    schema = {ROOT / "roll_core" / "config" / name for name in SCHEMA_MODULES}
    files = [p for p in (ROOT / "roll_core").rglob("*.py") if p not in schema]
    return files + sorted((ROOT / "plugins").glob("*/src/**/*.py"))


def names_read(files: list[Path]) -> set[str]:
    """Attribute names and string-key parts used in code (not in docstrings or messages)."""
    names: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        text_only = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant):
                text_only.add(id(body[0].value))  # docstring
            if isinstance(node, ast.JoinedStr):
                text_only.update(id(v) for v in node.values)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in text_only:
                names.update(node.value.split("."))
    return names


def schema_models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """Every section class reachable from ``root`` through fields that are not compat fields."""
    seen: set[type[BaseModel]] = set()

    def walk(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for field in cls.model_fields.values():
            if is_compat(field):
                continue
            for arg in _types(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    walk(arg)

    walk(root)
    return seen


def _types(annotation):
    yield annotation
    for arg in typing.get_args(annotation):
        yield from _types(arg)


def unread_fields(roots, read: set[str]) -> list[str]:
    problems = []
    for cls in sorted(set().union(*(schema_models(r) for r in roots)), key=lambda c: c.__name__):
        for name, field in cls.model_fields.items():
            if not (is_compat(field) or is_fixed(field)) and name not in read:
                problems.append(f"{cls.__name__}.{name}")
    return problems


@pytest.fixture(scope="module")
def read() -> set[str]:
    return names_read(code_files())


def test_every_schema_field_is_read_or_marked_compat(read):
    problems = unread_fields([AgenticConfig, RLVRConfig], read)
    assert not problems, (
        "config fields that no code reads and that are not marked compat(...) (a user setting them would "
        f"silently get nothing): {', '.join(problems)}. Read each one, or declare it with "
        "roll_core.config.base.compat(default, 'why roll ignores it')."
    )


def test_the_meta_test_fails_on_a_new_unread_field(read):
    class WithKnob(AgenticConfig):
        zz_turbo_knob: int = Field(0, description="a new field nobody reads")

    class WithCompatKnob(AgenticConfig):
        zz_turbo_knob: int = compat(0, "accepted and ignored, said out loud")

    assert unread_fields([WithKnob], read) == ["WithKnob.zz_turbo_knob"]
    assert unread_fields([WithCompatKnob], read) == []


def test_a_compat_field_set_to_a_non_default_value_warns_once(roll_registry):
    def run(**extra):
        data = {"sequence_length": 256, "pretrain": "tiny", "adv_estimator": "grpo", "rollout_batch_size": 8,
                "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2, "group_size": 4},
                "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2}, **extra}
        return resolve(validate_config(data), registry=roll_registry)

    quiet = run(actor_train={"model_args": {"ulysses_size": 1}, "training_args": {"seed": 42}}, rpc_timeout=3600)
    assert not [w for w in quiet.warnings if "ROLL compatibility" in w]  # defaults written out: silent
    with pytest.warns(UserWarning) as caught:
        loud = run(actor_train={"model_args": {"ulysses_size": 2, "moe_aux_loss_coef": 0.01}})
    lines = [w for w in loud.warnings if "ROLL compatibility" in w]
    assert lines == [
        "actor_train.model_args.moe_aux_loss_coef (0.01) is accepted for ROLL compatibility and has no effect "
        "in roll: roll's built-in backends train dense models.",
        "actor_train.model_args.ulysses_size (2) is accepted for ROLL compatibility and has no effect in roll: "
        "Ulysses sequence parallelism is not implemented; sequences stay on one rank.",
    ]
    assert sum("ulysses_size" in str(w.message) for w in caught) == 1


def test_compat_warnings_reach_into_lists_and_maps():
    config = validate_config({
        "sequence_length": 256, "prompt_length": 128, "rewards": {"math": {"worker_cls": "roll.Math", "tag_included": ["m"]}},
        "validation": {"world_size": 2},
    })
    assert [line.split(" (")[0] for line in compat_warnings(config)] == ["rewards.math.worker_cls",
                                                                          "validation.world_size"]


def test_seed_configs_name_only_what_roll_ignores(fixtures):
    """ROLL's own example config loads; what it sets that roll ignores is named, nothing else."""
    config = load_config(fixtures / "roll_layout/qwen2.5-0.5B-agentic/agent_val_sokoban.yaml")
    fields = {line.split(" (")[0] for line in compat_warnings(config)}
    assert fields == {"custom_envs.SimpleSokoban.env_manager_cls", "custom_envs.FrozenLake.env_manager_cls"}


# -- read on one pipeline's path and not on the other's ------------------------------------------
def agentic_sampling(config, mode):
    from roll_core.rollout.engine.spec_from_run import sampling_from_config

    return sampling_from_config(config, mode)


def rlvr_sampling(config, mode):
    from roll_core.pipeline.rlvr_pipeline import rlvr_sampling

    return rlvr_sampling(config, mode)


#: pipeline -> (a minimal config of it, the code that builds its rollout's sampling from a config)
SAMPLING_BUILDERS = {
    "agentic": ({"sequence_length": 256, "train_env_manager": {"tags": ["FrozenLake"]}}, agentic_sampling),
    "rlvr": ({"pipeline_type": "rlvr", "sequence_length": 256, "prompt_length": 128}, rlvr_sampling),
}
#: generating_args fields that are no sampling setting, and where each pipeline reads them instead
NOT_SAMPLING = {
    "num_return_sequences": "responses per prompt: RLVR sets it from num_return_sequences_in_group at resolve; "
                            "agentic groups come from train_env_manager.group_size (a warning says so)",
}


def changed(name, field):
    """A valid value of ``field`` other than its default."""
    default = field.get_default(call_default_factory=True)
    if isinstance(default, bool):
        return not default
    if isinstance(default, float):
        return default / 2
    if isinstance(default, int):
        return default + 1
    if default is None and "list" in str(field.annotation):
        return ["</stop>"]
    raise AssertionError(f"generating_args.{name}: teach changed() a value of {field.annotation}")


def unread_generating_args(base, build) -> list[str]:
    """The sampling fields of ``generating_args`` that do not change what ``build(config, "train")`` returns."""
    from roll_core.config.workers import GeneratingArgs

    default = build(validate_config(base), "train")
    unread = []
    for name, field in GeneratingArgs.model_fields.items():
        if is_compat(field) or is_fixed(field) or name in NOT_SAMPLING:
            continue
        config = validate_config({**base, "actor_infer": {"generating_args": {name: changed(name, field)}}})
        if build(config, "train") == default:
            unread.append(name)
    return unread


@pytest.mark.parametrize("pipeline", SAMPLING_BUILDERS)
def test_every_generating_args_field_reaches_both_pipelines_sampling(pipeline):
    base, build = SAMPLING_BUILDERS[pipeline]
    unread = unread_generating_args(base, build)
    assert not unread, (f"actor_infer.generating_args fields the {pipeline} rollout's sampling ignores: {unread}; "
                        "build it with roll_core.strategies.generating_args.sampling_from_generating_args")


def test_the_per_pipeline_check_catches_a_builder_that_ignores_a_field():
    """The agentic builder as it was before the shared converter: it never read do_sample."""
    from roll_core.strategies.base import SamplingParams

    def old_agentic(config, mode):
        args = config.actor_infer.generating_args
        return SamplingParams(max_new_tokens=args.max_new_tokens or 128, temperature=args.temperature,
                              top_p=args.top_p, top_k=max(args.top_k, 0), stop_strings=tuple(args.stop_strings or ()))

    assert unread_generating_args(SAMPLING_BUILDERS["agentic"][0], old_agentic) == ["do_sample"]
