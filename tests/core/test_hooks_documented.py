"""Every hook in roll_core/hookspecs.py is documented and has a test that calls it through a plugin.

Where a hook is documented: its docstring in ``hookspecs.py`` is the reference (what ``help()``,
an IDE and the docs site's ``docs/reference/hooks.md``, rendered from it, show a plugin author,
next to the code); it must say what ``target`` names and describe
every registration option of its kind (``registry.KIND_OPTIONS``, the options roll checks).
``docs/architecture.md`` lists every hook and every option in its two tables, and ``docs/authoring.md`` is the
tutorial, which walks through the kinds most plugins provide rather than every hook.

A test per hook: :data:`HOOK_TESTS` names, for each hook, a test in which a plugin implementing it
(written by the test, or a test-plugin module the test loads by name) is loaded by a plugin
manager and what it registered is used. A new hook fails here until it has both.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from roll_core import hookspecs
from roll_core.registry import KIND_OPTIONS, KINDS

ROOT = Path(__file__).resolve().parents[2]
#: hook -> "path::test" of a test where a plugin implementing the hook is called and its component used
HOOK_TESTS = {
    "roll_register_envs": "tests/config/test_config_resolve.py::test_components_from_a_plugin_module_resolve",
    "roll_register_advantage_estimators":
        "tests/algorithms/test_algorithm_plugins.py::test_third_party_plugin_registers_an_estimator_selected_from_yaml",
    "roll_register_policy_losses":
        "tests/algorithms/test_algorithm_plugins.py::test_third_party_plugin_registers_a_policy_loss_selected_from_yaml",
    "roll_register_strategies": "tests/strategies/test_check_strategy.py::test_a_broken_backend_gets_every_problem_listed",
    "roll_register_rewards": "tests/rewards/test_check_reward.py::test_a_broken_reward_is_caught",
    "roll_register_agents": "tests/rollout/test_agent_rollout.py::test_agent_config_mistakes_are_named",
    "roll_register_group_filters":
        "tests/config/test_dynamic_sampling_config.py::test_a_third_party_filter_registers_through_the_hook",
}


def hooks() -> dict[str, object]:
    return {name: fn for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
            if hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec")}


def test_every_hook_has_a_kind_and_a_test_entry():
    assert set(hooks()) == set(KINDS.values()), "registry.KINDS must map a kind to every hook of hookspecs.py"
    assert set(HOOK_TESTS) == set(hooks()), (
        f"hooks without an entry in HOOK_TESTS: {sorted(set(hooks()) - set(HOOK_TESTS))}; name a test that "
        "loads a plugin implementing the hook and uses what it registers")


@pytest.mark.parametrize("hook", sorted(HOOK_TESTS))
def test_the_hook_is_documented_in_its_docstring(hook):
    doc = inspect.getdoc(hooks()[hook]) or ""
    kind = next(k for k, h in KINDS.items() if h == hook)
    assert len(doc.split()) >= 15 and "``target``" in doc, f"{hook}'s docstring must say what ``target`` names"
    undocumented = [option for option in KIND_OPTIONS[kind] if f"``{option}``" not in doc]
    assert not undocumented, f"{hook}'s docstring does not describe the {kind} options {undocumented}"


def test_the_architecture_page_lists_every_hook():
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = {m.group(2): m.group(1) for m in re.finditer(r"^\| `(\w+)` \| `(roll_register_\w+)` \|", text, re.M)}
    assert table == {hook: kind for kind, hook in KINDS.items()}
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| (.*) \|$", text, re.M) if m.group(1) in KINDS}
    assert set(rows) == set(KINDS), "the table of registration options has a row per kind"
    for kind, options in KIND_OPTIONS.items():
        missing = [o for o in options if f"`{o}`" not in rows[kind]]
        assert not missing and (options or rows[kind] == "none"), f"the options row of {kind} lacks {missing}"


def plugin_sources(test_file: Path) -> str:
    """The test file and every test-plugin module (a .py file next to it, or in tests/) it names."""
    text = test_file.read_text()
    sources = [text]
    names = {node.value for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier()}
    for directory in {test_file.parent, *test_file.parent.parent.glob("*/")}:
        sources += [p.read_text() for p in directory.glob("*.py") if p.stem in names]
    return "\n".join(sources)


@pytest.mark.parametrize("hook", sorted(HOOK_TESTS))
def test_the_hook_is_called_through_a_plugin_by_its_test(hook):
    path, _, name = HOOK_TESTS[hook].partition("::")
    test_file = ROOT / path
    tree = ast.parse(test_file.read_text())
    assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, f"{HOOK_TESTS[hook]} does not exist"
    assert re.search(rf"@hookimpl\s+def {hook}\(register\)", plugin_sources(test_file)), (
        f"neither {path} nor a test-plugin module it names implements {hook}")
