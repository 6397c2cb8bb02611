"""The generated config reference (docs/hooks/config_reference.py) has a row for every field.

The page is generated at every docs build, so it cannot drift from the schema; these tests check,
without mkdocs, that the generator leaves no field out, marks compatibility-only and one-value
fields as such, and picks a new field up by itself.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from pydantic import Field

from roll_core.config.base import compat, is_compat, is_fixed
from roll_core.config.pipeline import AgenticConfig, RLVRConfig

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path, name: str):
    """A module from a file that is not on sys.path (the docs hooks, the fields meta-test)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_hook(name: str):
    return load(ROOT / "docs" / "hooks" / f"{name}.py", f"docs_hook_{name}")


@pytest.fixture(scope="module")
def ref():
    return load_hook("config_reference")


def schema_fields(roots) -> set[tuple[type, str]]:
    """(section class, field name) for every field a config can set, walked as the fields meta-test walks."""
    meta = load(ROOT / "tests" / "config" / "test_config_fields.py", "docs_config_fields_walk")
    return {(cls, name) for cls in set().union(*(meta.schema_models(r) for r in roots)) for name in cls.model_fields}


def documented(rows, cls: type, name: str):
    """The row that documents ``cls.name``: its own, or that of the base class declaring it."""
    by_key = {(r.section, r.name): r for r in rows}
    for klass in cls.__mro__:
        if (klass.__name__, name) in by_key:
            return by_key[(klass.__name__, name)]
    return None


def test_every_field_of_both_pipelines_has_a_row(ref):
    rows = ref.rows()
    fields = schema_fields([AgenticConfig, RLVRConfig])
    assert len(fields) > 300
    missing = sorted(f"{cls.__name__}.{name}" for cls, name in fields if documented(rows, cls, name) is None)
    assert not missing, f"fields without a row in the generated config reference: {missing}"
    page = ref.config_reference_markdown()
    for row in rows:
        label = "" if row.status == "real" else f"**{ref.STATUS[row.status]}**"
        assert f"| `{row.name}` | {row.type} | {row.default} | {label}" in page


def test_compat_and_fixed_fields_are_marked_with_what_roll_does_instead(ref):
    rows = ref.rows()
    for cls, name in schema_fields([AgenticConfig, RLVRConfig]):
        field = cls.model_fields[name]
        row = documented(rows, cls, name)
        expected = "compat" if is_compat(field) else "fixed" if is_fixed(field) else "real"
        # the row found first along the MRO is the declaration in force (env managers redeclare model_args)
        assert row.status == expected, f"{cls.__name__}.{name}: {row.status}, declared {expected}"
    by_key = {(r.section, r.name): r for r in rows}
    ulysses = by_key[("ModelArgs", "ulysses_size")]
    assert (ulysses.status, ulysses.default, ulysses.type) == ("compat", "`1`", "`int`")
    assert ulysses.description == "Ulysses sequence parallelism is not implemented; sequences stay on one rank."
    beams = by_key[("GeneratingArgs", "num_beams")]
    assert beams.status == "fixed" and beams.description.startswith("Only 1 is supported")
    kl = by_key[("AlgorithmConfig", "init_kl_coef")]
    assert (kl.status, kl.default, kl.type) == ("real", "`0.0`", "`float`")
    assert by_key[("AgenticConfig", "custom_envs")].type == "map of [CustomEnvConfig](#customenvconfig)"
    penalty = by_key[("AlgorithmConfig", "kl_penalty")]
    assert penalty.type == "choice"
    assert penalty.description.endswith("One of `kl`, `abs`, `mse`, `k3`, `k1`, `k2`, `low_var_kl`, `full`.")
    assert by_key[("ModelArgs", "dtype")].type == "choice or null"
    assert by_key[("RunSettings", "pipeline_type")].default == "required"
    model_args = by_key[("EnvManagerConfig", "model_args")]
    assert model_args.status == "compat" and "actor_infer's" in model_args.description


def test_the_roll_table_lists_every_field_roll_does_not_use(ref):
    table = ref.roll_compat_markdown()
    odd = [r for r in ref.rows() if r.status != "real"]
    assert len(odd) > 90  # about a hundred of ROLL's fields (fewer as they become real)
    listed = {(section, name) for section, block in re.findall(r"^### (\w+)\n(.*?)(?=^### |\Z)", table, re.M | re.S)
              for name in re.findall(r"^\| `(\w+)` \|", block, re.M)}
    assert listed == {(r.section, r.name) for r in odd}
    assert "| `num_beams` | **one value**: Only 1 is supported:" in table
    assert "| `ulysses_size` | Ulysses sequence parallelism is not implemented; sequences stay on one rank. |" in table


def test_a_new_field_appears_without_touching_the_generator(ref, monkeypatch):
    class WithKnob(AgenticConfig):
        zz_turbo_knob: int = Field(3, description="A knob nobody documented by hand.")
        zz_old_knob: bool = compat(False, "roll does something better.")

    monkeypatch.setattr(ref, "ROOTS", (WithKnob, RLVRConfig))
    page = ref.config_reference_markdown()
    assert "| `zz_turbo_knob` | `int` | `3` | A knob nobody documented by hand. |" in page
    assert "| `zz_old_knob` | `bool` | `false` | **ROLL compat**: roll does something better. |" in page
    assert "### WithKnob" in ref.roll_compat_markdown()
    assert "| `zz_old_knob` | roll does something better. |" in ref.roll_compat_markdown()


def test_the_cli_reference_covers_every_command():
    cli = load_hook("cli_reference")
    page = cli.cli_markdown()
    headings = re.findall(r"^#+ `(roll[^`]*)`$", page, re.M)
    assert headings[0] == "roll"
    for command in ("roll run", "roll rollout", "roll config show", "roll plugins new", "roll env play",
                    "roll examples copy"):
        assert command in headings
        assert f"usage: {command}" in page
