"""roll_core's import layers: no import runs up the layers, and no two modules import each other in a circle.

Read from the source with ``ast`` (nothing is imported), so it also sees imports inside functions:
a lazy import up the layers is still a dependency up the layers. Imports under
``if TYPE_CHECKING:`` are annotations only and are not counted (that is how a lower layer names
``Run`` in its signatures). Run it alone with ``pytest -q tests/core/test_layers.py``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "roll_core"

#: bottom to top: a module may import its own layer and the layers below it, never one above.
#: An entry names a package or module; the longest entry that prefixes a module is its layer.
LAYERS: list[tuple[str, ...]] = [
    # what everything raises, and how a pydantic validation error reads to the user (no schema)
    ("roll_core.errors", "roll_core.validation"),
    # the plugin machinery: hook specs, the registry of named components, plugin discovery
    ("roll_core.hookspecs", "roll_core.registry", "roll_core.plugins", "roll_core"),
    # leaf libraries that know nothing of runs: models and tokenizers, prompt data, the RL maths, the sandbox
    ("roll_core.models", "roll_core.data", "roll_core.algorithms", "roll_core.sandbox", "roll_core.rewards",
     "roll_core.scaffold",
     "roll_core.examples"),
    # where a process runs: the local Ray cluster, placement, ranks, process groups, env Pythons
    ("roll_core.distributed",),
    # the training and inference backends (they run inside ranks)
    ("roll_core.strategies",),
    # the resolved run: the data every part below the driver receives (it binds strategies' settings)
    ("roll_core.run",),
    # text environments and their bindings (built from a Run's env bindings)
    ("roll_core.envs",),
    # chat templates and token-level trajectories: shared by the gateway and the rollout, below both
    ("roll_core.chat",),
    # the OpenAI-compatible agent gateway (the rollout's agents start it; it never imports the rollout)
    ("roll_core.gateway",),
    # the Ray actors hosting strategies and their groups, the generate scheduler
    ("roll_core.workers",),
    # rollouts: the agentic engine, agents, RLVR
    ("roll_core.rollout",),
    # the training loops, driving workers and rollouts
    ("roll_core.pipeline",),
    # the config schema, loading, and resolve (which builds the Run from the plugins)
    ("roll_core.config",),
    # what users and plugin authors call on top of everything
    ("roll_core.builtin", "roll_core.testing", "roll_core.cli", "roll_core.__main__"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, entries in enumerate(LAYERS):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and len(entry) > best:
                best, rank = len(entry), i
    assert rank is not None, f"{module} is in no layer: add it to LAYERS in {__file__}"
    return rank


def _known(name: str) -> str:
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Ids of import nodes inside ``if TYPE_CHECKING:`` blocks."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports(module: str) -> list[tuple[str, int]]:
    """``(imported roll_core module, line)`` for every import of ``module`` that runs."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(_known(a.name), node.lineno) for a in node.names if a.name.split(".")[0] == "roll_core"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            if base.split(".")[0] != "roll_core":
                continue
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in MODULES else _known(base), node.lineno))
    # importing a.b.c first runs the packages a.b and a: their __init__ is a dependency too
    found += [(parent, line) for target, line in list(found) for parent in _parents(target)]
    return [(target, line) for target, line in found if target != module and not module.startswith(target + ".")]


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


GRAPH = {module: imports(module) for module in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_runs_up_the_layers():
    up = [f"{module}:{line} imports {target} ({LAYERS[layer_of(target)][0]} is above "
          f"{LAYERS[layer_of(module)][0]})"
          for module, targets in GRAPH.items() for target, line in targets
          if layer_of(target) > layer_of(module)]
    assert not up, "imports up the layers (tests/core/test_layers.py says why each layer sits where it does):\n" \
        + "\n".join(sorted(up))


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    edges = defaultdict(set)
    for module, targets in GRAPH.items():
        for target, _ in targets:
            # a package's __init__ re-exporting its submodules, and those importing siblings through
            # it, is one unit; only circles between different modules of different packages count
            edges[module].add(target)
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles() == []


@pytest.mark.parametrize("package,forbidden", [
    ("roll_core.rollout", "roll_core.config"),
    ("roll_core.pipeline", "roll_core.config"),
    ("roll_core.gateway", "roll_core.config"),
    ("roll_core.gateway", "roll_core.rollout"),
    ("roll_core.strategies", "roll_core.config"),
])
def test_the_issue_30_boundaries(package, forbidden):
    """The boundaries issue 30 drew, spelled out (the layer table implies them)."""
    crossing = [f"{m}:{line} -> {t}" for m, targets in GRAPH.items() if m.startswith(package + ".") or m == package
                for t, line in targets if t == forbidden or t.startswith(forbidden + ".")]
    assert crossing == []
