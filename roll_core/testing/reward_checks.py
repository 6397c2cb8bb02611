"""``check_reward``: does a registered RLVR reward function honour roll's reward contract?

The counterpart of :func:`~roll_core.testing.check_env` and :func:`~roll_core.testing.check_strategy`
for ``roll_register_rewards`` plugins. Every check runs, then one :class:`RewardCheckError`
lists every problem. What roll relies on when it scores every response of every step:

* the registration loads a callable, and the plugin's entry module imports none of the heavy
  libraries (``torch``, ``ray``, ``vllm`` ...). A registration naming a *class* (the built-in
  ``code_sandbox``, ``llm_judge``, ``reward_model``) is built as the pipeline builds it,
  ``cls.from_reward_config(section, seed=..., **services)`` with ``section`` the domain's
  ``rewards.<domain>`` settings (``config``), and the instance is checked;
* the signature takes ``(prompt, response, reference)`` positionally and the ``pattern`` keyword
  (a domain's ``format_pattern``), as :class:`roll_core.rewards.dispatch.RewardDispatcher` calls it;
* every score is a finite real number (not a string, None, NaN or inf), within ``bounds`` when given;
* ``expected`` scores (the author's worked examples) come out exactly;
* determinism: the same samples score the same in three more calls, off the main thread (the RLVR
  rollout may score in a thread), and in another Python process with another hash seed;
* row order: scores do not depend on which samples were scored before (no state carried over);
* malformed responses (empty, whitespace, unclosed tags, chat-template tokens, long garbage, a
  missing reference) never raise and never count as correct (a score > 0 is "correct" in roll's
  accuracy metrics).
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from roll_core.errors import did_you_mean
from roll_core.registry import Registry
from roll_core.testing.env_checks import CheckReport, SkipCheck, check_import_light

#: (prompt, response, reference)
Sample = tuple[str, str, "str | None"]

#: samples scored by the determinism and row-order checks when the caller gives none: answers in
#: roll's default answer format and bare, right and wrong
DEFAULT_SAMPLES: tuple[Sample, ...] = (
    ("What is 3 + 4?", "<answer>7</answer>", "7"),
    ("What is 3 + 4?", "<answer>8</answer>", "7"),
    ("What is 12 - 5?", "7", "7"),
    ("Name the capital of France.", "<think>It is Paris.</think> <answer>Paris</answer>", "Paris"),
    ("What is 2 * 6?", "I think it is 12, so <answer>12</answer>", "12"),
    ("What is 2 * 6?", "<answer>twelve</answer> or <answer>13</answer>", "12"),
)
#: responses a policy produces early in training; none may raise or count as correct
MALFORMED: tuple[Sample, ...] = (
    ("What is 3 + 4?", "", "7"),
    ("What is 3 + 4?", "   \n\t ", "7"),
    ("What is 3 + 4?", "<answer>", "7"),
    ("What is 3 + 4?", "</answer></answer><answer", "7"),
    ("What is 3 + 4?", "<|im_end|><|im_start|>assistant", "7"),
    ("What is 3 + 4?", "}{\\frac{" * 200, "7"),
    ("What is 3 + 4?", "ab\x00\ufffd\U0001f600 " * 500, "7"),
    ("What is 3 + 4?", "no reference to compare with", None),
)


class RewardCheckError(AssertionError):
    """A reward function broke the contract; the message lists every failed check."""


class RewardCheckReport(CheckReport):
    """What :func:`check_reward` found."""

    CHECK = "check_reward"


_Skip = SkipCheck  # a check that cannot run here becomes a note


def check_reward(name: str, *, samples: Sequence[Sample] | None = None,
                 expected: Sequence[tuple[str, str, str | None, float]] = (),
                 malformed: Sequence[Sample] = MALFORMED, options: Mapping[str, Any] | None = None,
                 bounds: tuple[float, float] | None = None, config: Any = None, seed: int = 0,
                 services: Mapping[str, Any] | None = None, registry: Registry | None = None,
                 raise_on_failure: bool = True) -> RewardCheckReport:
    """Check the registered reward ``name`` (see the module docstring).

    ``samples``: ``(prompt, response, reference)`` triples in your task's format (default: short
    arithmetic answers in roll's ``<answer>`` format); ``expected``: ``(prompt, response, reference,
    score)`` rows that must score exactly so; ``malformed``: responses that must neither raise nor
    score > 0; ``options``: the keywords a config passes (``{"pattern": ...}`` for a
    ``format_pattern``); ``bounds``: ``(low, high)`` every score must lie in; ``config``: the
    domain's ``rewards.<domain>`` settings (a mapping of its YAML keys, or a
    :class:`~roll_core.config.rlvr.RewardConfig`) a reward class is built from, with ``seed`` and
    ``services`` (what a reward worker hands it, e.g. a judge model's ``generate``); its
    ``format_pattern`` becomes the ``pattern`` option, as in a run. Raises
    :class:`RewardCheckError` listing every failure (or returns the report with ``raise_on_failure=False``).
    """
    if registry is None:
        from roll_core.plugins import get_plugin_manager

        manager = get_plugin_manager()
        registry = manager.registry
    else:
        manager = None
    reg = registry.get("reward", name)
    report = RewardCheckReport(name)
    samples = list(samples or DEFAULT_SAMPLES) + [(p, r, ref) for p, r, ref, _ in expected]
    section = _reward_section(config)
    options = {**({"pattern": section.format_pattern} if section.format_pattern else {}), **(options or {})}
    services = dict(services or {})
    state: dict[str, Any] = {}

    def fn() -> Callable[..., Any]:
        if "fn" not in state:
            if "unbuilt" in state:  # reported once, by the first check
                raise _Skip("the registration gave no reward to call")
            state["unbuilt"] = True
            state["fn"] = _build(reg.target, reg.load(), section, seed, services)
        return state["fn"]

    def in_another_process() -> None:
        if isinstance(reg.load(), type) and services:
            raise _Skip(f"the services given ({', '.join(services)}) do not cross processes")
        _check_subprocess(reg.target, first(), samples, options,
                          {"config": section.model_dump(mode="json", exclude_unset=True), "seed": seed})

    def scores(rows: Sequence[Sample]) -> list[float]:
        return [_score(fn(), row, options, bounds) for row in rows]

    def first_scores() -> list[float]:
        state["first"] = scores(samples)  # the very first calls: later ones must repeat them
        return state["first"]

    def first() -> list[float]:
        if "first" not in state:
            raise _Skip("the samples did not score as finite numbers")
        return state["first"]

    checks: list[tuple[str, Callable[[], Any]]] = [("registration loads a callable", fn)]
    info = manager.get_plugin(reg.plugin) if manager is not None else None
    if info is not None:
        checks.append(("entry module stays import-light", lambda: check_import_light(info.module)))
    checks += [
        ("signature", lambda: _check_signature(fn())),
        ("scores are finite numbers", first_scores),
        ("expected scores", lambda: _check_expected(fn(), expected, options)),
        ("malformed responses", lambda: _check_malformed(fn(), malformed, options, bounds)),
        ("deterministic", lambda: _check_repeats(scores, first(), samples)),
        ("deterministic off the main thread", lambda: _check_threads(fn(), first(), samples, options, bounds)),
        ("deterministic in another process", in_another_process),
        ("independent of row order", lambda: _check_order(scores, first(), samples)),
    ]
    report.run(checks)
    if report.failures and raise_on_failure:
        raise RewardCheckError(str(report))
    return report


def _reward_section(config: Any) -> Any:
    """``config`` as the :class:`~roll_core.config.rlvr.RewardConfig` a run hands a reward class."""
    from pydantic import ValidationError

    from roll_core.config.rlvr import RewardConfig

    if isinstance(config, RewardConfig):
        return config
    try:
        return RewardConfig.model_validate(dict(config or {}))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(str(part) for part in error["loc"])
            hint = did_you_mean(key, RewardConfig.model_fields) if error["type"] == "extra_forbidden" else ""
            problems.append(f"{key}: {error['msg']}.{hint}")
        detail = " ".join(problems)
    except (TypeError, ValueError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
    raise ValueError(f"check_reward(config=...) is not a valid rewards.<domain> section (the keys of one domain "
                     f"under `rewards:` in a config): {detail}")


def _build(target: str, obj: Any, section: Any, seed: int, services: Mapping[str, Any]) -> Callable[..., Any]:
    """What a run scores with: a function as registered, a reward class built from ``section`` as
    :func:`roll_core.rewards.dispatch.build_reward` builds it."""
    if not isinstance(obj, type):
        assert callable(obj), f"{target} is a {type(obj).__name__}, not a callable"
        return obj
    if not hasattr(obj, "from_reward_config"):
        raise AssertionError(f"{target} is a class without a from_reward_config(section, *, seed) classmethod: roll "
                             "builds a reward class with it once per process, then calls the instance as "
                             "reward(prompt, response, reference, ...); add it, or register a function")
    from roll_core.rewards.dispatch import build_reward

    try:
        built = build_reward(obj, section, seed, **services)
    except Exception as exc:
        raise AssertionError(
            f"{target}.from_reward_config(section, seed={seed}) raised {type(exc).__name__}: {exc}; give the "
            "domain's settings as check_reward(..., config={...}) (its keys under rewards.<domain>), and what a "
            "reward worker would hand it (a judge model's generate) as services={...}") from exc
    assert callable(built), f"{target}.from_reward_config returned a {type(built).__name__}, not a callable"
    return built


# -- the checks ------------------------------------------------------------------------------
def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _score(fn: Callable[..., Any], row: Sample, options: Mapping[str, Any],
           bounds: tuple[float, float] | None) -> float:
    prompt, response, reference = row
    try:
        value = fn(prompt, response, reference, **options)
    except Exception as exc:
        raise AssertionError(f"raised {type(exc).__name__}: {exc} on response {_short(response)}") from exc
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AssertionError(f"returned {_short(value)} ({type(value).__name__}) for response {_short(response)}; "
                             "a reward is a real number (roll counts > 0 as correct)")
    value = float(value)
    if not math.isfinite(value):
        raise AssertionError(f"returned {value} for response {_short(response)}; NaN or inf would poison the "
                             "advantages of the whole group")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise AssertionError(f"returned {value} for response {_short(response)}, outside bounds {bounds}")
    return value


def _check_signature(fn: Callable[..., Any]) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: the calls below still check it
    try:
        signature.bind("prompt", "response", "reference", pattern="x")
    except TypeError as exc:
        name = getattr(fn, "__name__", type(fn).__name__)
        raise AssertionError(f"{name}{signature} cannot be called as reward(prompt, response, reference, "
                             f"pattern=...), as roll calls it ({exc}); take **options for what you do not use") from None


def _check_expected(fn: Callable[..., Any], expected: Sequence[tuple[str, str, str | None, float]],
                    options: Mapping[str, Any]) -> None:
    wrong = []
    for prompt, response, reference, score in expected:
        got = _score(fn, (prompt, response, reference), options, None)
        if got != score:
            wrong.append(f"{_short(response)} -> {got}, expected {score}")
    assert not wrong, "; ".join(wrong)


def _same(first: Sequence[float], second: Sequence[float], rows: Sequence[Sample], how: str) -> None:
    differ = [f"{_short(row[1])}: {a} then {b}" for row, a, b in zip(rows, first, second, strict=True) if a != b]
    assert not differ, f"scores changed in {how}: {'; '.join(differ)}"


def _check_repeats(scores: Callable[[Sequence[Sample]], list[float]], first: Sequence[float],
                   rows: Sequence[Sample], calls: int = 3) -> None:
    """``calls`` more calls score ``rows`` as the first did (a 0/1 coin flip on six samples repeats
    once in 64 calls, so one repeat is not enough)."""
    for n in range(2, calls + 2):
        _same(first, scores(rows), rows, f"call {n}")


def _check_threads(fn: Callable[..., Any], first: Sequence[float], rows: Sequence[Sample],
                   options: Mapping[str, Any], bounds: tuple[float, float] | None) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda row: _score(fn, row, options, bounds), rows))
    _same(first, threaded, rows, "worker threads")


def _check_order(scores: Callable[[Sequence[Sample]], list[float]], first: Sequence[float],
                 rows: Sequence[Sample]) -> None:
    backward = scores(list(reversed(rows)))[::-1]
    interleaved = [i for pair in zip(range(len(rows)), reversed(range(len(rows))), strict=True) for i in pair]
    mixed = dict(zip(interleaved, scores([rows[i] for i in interleaved]), strict=True))  # the last score counts
    _same(first, backward, rows, "reversed order")
    _same(first, [mixed[i] for i in range(len(rows))], rows, "interleaved order")


def _check_malformed(fn: Callable[..., Any], rows: Sequence[Sample], options: Mapping[str, Any],
                     bounds: tuple[float, float] | None) -> None:
    problems = []
    for row in rows:
        try:
            value = _score(fn, row, options, bounds)
        except AssertionError as exc:
            problems.append(str(exc))
            continue
        if value > 0:
            problems.append(f"scored {value} (> 0: counted as correct) for the malformed response {_short(row[1])} "
                            f"with reference {_short(row[2])}")
    assert not problems, "; ".join(problems)


#: the cross-process check's program: import the target by its path (a reward class: build it from the
#: domain's settings), print its scores as JSON (it imports nothing of roll's testing kit, so a fresh
#: process starts in well under a second)
_SUBPROCESS = """
import importlib, json, sys
spec = json.loads(sys.argv[1])
module, _, attr = spec["target"].partition(":")
fn = importlib.import_module(module)
for part in attr.split("."):
    fn = getattr(fn, part)
if isinstance(fn, type) and hasattr(fn, "from_reward_config"):  # a reward class: built as in a run
    from roll_core.config.rlvr import RewardConfig
    fn = fn.from_reward_config(RewardConfig.model_validate(spec["config"]), seed=spec["seed"])
print(json.dumps([float(fn(*row, **spec["options"])) for row in spec["rows"]]))
"""


def _check_subprocess(target: str, first: Sequence[float], rows: Sequence[Sample],
                      options: Mapping[str, Any], build: Mapping[str, Any]) -> None:
    spec = {"target": target, "rows": [list(r) for r in rows], "options": dict(options), **build}
    hash_seed = (int(os.environ.get("PYTHONHASHSEED", "0") or 0) + 1) % (1 << 32)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONHASHSEED": str(hash_seed)}
    proc = subprocess.run([sys.executable, "-c", _SUBPROCESS, json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=300)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise AssertionError(f"scoring in a fresh process failed (exit {proc.returncode}): {last}")
    _same(first, json.loads(proc.stdout.strip().splitlines()[-1]), rows,
          f"another process (PYTHONHASHSEED={hash_seed})")
