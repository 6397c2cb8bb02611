"""``check_env``: does an env honour roll's text-env contract?

Plugin authors call it from their tests (or through the pytest fixture ``roll_check_env``). It
runs every check, then raises one :class:`EnvCheckError` listing every problem, so a new env is
fixed in one pass. The checks are what roll relies on at scale:

* types of ``reset``/``step``/``render`` and the per-step metrics;
* seed determinism: the same seed gives the same instance and observations on a fresh instance,
  on the same instance after play, and in another Python process (with another hash seed);
* ``max_steps`` truncation, and ``step`` after the end raising;
* an invalid response costs ``format_penalty`` and leaves the state unchanged;
* the parser round trip (``format`` an action word, ``parse`` it back, any case);
* the prompt the model sees: ``example_action()`` is a bare action word (not already wrapped in
  the action pattern, which would double the tags in every prompt) that parses back to itself;
  the instruction and observations are non-empty, show the answer format with the parser's own
  tags, and hold no unfilled ``{placeholder}`` or chat-template token (``<|im_start|>``);
* the ``text`` and ``rgb_array`` render modes;
* the config model rejects unknown keys; the env (and the plugin entry module) import no torch/ray.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from roll_core.envs.base import EnvConfig, TextEnv
from roll_core.registry import Registry

#: modules an env or a plugin entry module must never import
HEAVY_MODULES = ("torch", "ray", "vllm", "transformers", "deepspeed", "sglang", "megatron")
METRIC_KEYS = ("success", "action_is_valid", "action_is_effective")
#: ``{name}`` left in a prompt: a format string that was never filled (a missing ``f`` prefix)
UNFILLED_PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
#: chat-template control tokens (``<|im_start|>``, ``<|eot_id|>``): in env text they break the chat format
CHAT_TOKEN = re.compile(r"<\|[^|<>\s]{1,40}\|>")
#: ``<tag>...</tag>`` pairs, to compare the format an instruction shows with the parser's pattern
TAG_PAIR = re.compile(r"<([A-Za-z_][\w-]*)>.*?</\1>", re.DOTALL)
INVALID_RESPONSE = "I am not sure what to do here."


class EnvCheckError(AssertionError):
    """An env broke the contract; the message lists every failed check."""


class SkipCheck(Exception):
    """A check that cannot run here; its reason becomes a note instead of a failure."""


@dataclass
class CheckReport:
    """What a contract check found: checks that passed, failures, and notes (skipped checks)."""

    #: the check's name in the summary line
    CHECK = "check"

    subject: str
    passed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def run(self, checks: Sequence[tuple[str, Callable[[], object]]]) -> None:
        """Run every ``(label, check)``: all of them, so that all problems are reported at once."""
        for label, check in checks:
            try:
                check()
            except SkipCheck as skip:
                self.notes.append(f"{label}: skipped, {skip}")
            except Exception as exc:  # noqa: BLE001  # a check's failure is reported, never raised here
                detail = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
                self.failures.append(f"{label}: {detail}")
            else:
                self.passed.append(label)

    def __str__(self) -> str:
        lines = [f"{self.CHECK}({self.subject}): {len(self.passed)} passed, {len(self.failures)} failed"]
        lines += [f"  FAIL {f}" for f in self.failures]
        lines += [f"  note {n}" for n in self.notes]
        return "\n".join(lines)


def check_import_light(module: str) -> None:
    """Importing ``module`` (a plugin's entry module) in a fresh process imports none of :data:`HEAVY_MODULES`."""
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            f"print(','.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"importing {module} failed: {out.stderr.strip().splitlines()[-1:]}"
    heavy = out.stdout.strip()
    assert not heavy, f"importing {module} imported {heavy}; import heavy libraries only where the component is"


class EnvCheckReport(CheckReport):
    """What :func:`check_env` found."""

    CHECK = "check_env"

    @property
    def env(self) -> str:
        return self.subject


@dataclass
class _Subject:
    """The env under test: how to build it and how another process can build it too."""

    label: str
    cls: type[TextEnv]
    config: EnvConfig
    target: str | None  # "module:Class" importable by a subprocess, when there is one
    plugin_module: str | None = None

    def make(self, **overrides: Any) -> TextEnv:
        config = self.config.model_copy(update=overrides) if overrides else self.config
        return self.cls(config)


def _resolve(env: str | type[TextEnv], env_config: Mapping[str, Any] | EnvConfig | None,
             registry: Registry | None) -> _Subject:
    from roll_core.envs.binding import env_class
    from roll_core.envs.factory import env_config_for, resolve_env

    if isinstance(env, type):
        if not issubclass(env, TextEnv):
            raise EnvCheckError(f"{env!r} is not a subclass of roll_core.envs.TextEnv")
        config = env_config if isinstance(env_config, EnvConfig) else env.config_model.model_validate(
            dict(env_config or {}))
        importable = env.__module__ != "__main__" and "<locals>" not in env.__qualname__
        target = f"{env.__module__}:{env.__qualname__}" if importable else None
        return _Subject(env.__qualname__, env, config, target)
    reg = resolve_env(env, registry=registry)
    plugin_module = None
    if registry is None:
        from roll_core.plugins import get_plugin_manager

        info = get_plugin_manager().get_plugin(reg.plugin)
        plugin_module = info.module if info is not None else None
    return _Subject(env, env_class(reg), env_config_for(env, env_config, registry=registry), reg.target,
                    plugin_module)


# -- trajectories (also run in a subprocess) -------------------------------------------------
def record_trajectory(env: TextEnv, seed: int, steps: int) -> dict[str, Any]:
    """Reset ``env`` with ``seed`` and play ``steps`` random actions drawn from a ``seed``-ed rng."""
    observation, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    record: dict[str, Any] = {"instruction": info.get("instruction"), "observations": [observation],
                              "actions": [], "rewards": [], "ends": []}
    for _ in range(steps):
        action = env.sample_action(rng)
        observation, reward, terminated, truncated, _ = env.step(action)
        record["actions"].append(action)
        record["observations"].append(observation)
        record["rewards"].append(float(reward))
        record["ends"].append([bool(terminated), bool(truncated)])
        if terminated or truncated:
            break
    return record


def _subprocess_main(spec_json: str) -> None:
    """Entry of the cross-process check: rebuild the env from its import path, print trajectories."""
    import importlib

    from roll_core.registry import import_target

    spec = json.loads(spec_json)
    if spec.get("plugin_module"):
        importlib.import_module(spec["plugin_module"])
    obj: Any = import_target(spec["target"])
    trajectories = [record_trajectory(obj(spec["config"]), seed, spec["steps"]) for seed in spec["seeds"]]
    heavy = [m for m in HEAVY_MODULES if m in sys.modules]
    print(json.dumps({"trajectories": trajectories, "heavy": heavy}))


def _run_in_subprocess(subject: _Subject, seeds: Sequence[int], steps: int) -> dict[str, Any]:
    spec = {"target": subject.target, "config": subject.config.model_dump(mode="json"), "seeds": list(seeds),
            "steps": steps, "plugin_module": subject.plugin_module}
    hash_seed = (int(os.environ.get("PYTHONHASHSEED", "0") or 0) + 1) % (1 << 32)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "PYTHONHASHSEED": str(hash_seed)}
    code = "import sys; from roll_core.testing.env_checks import _subprocess_main; _subprocess_main(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"subprocess failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _normalise(record: dict[str, Any]) -> dict[str, Any]:
    """JSON round trip, so in-process and subprocess records compare alike."""
    return json.loads(json.dumps(record))


# -- the checks ----------------------------------------------------------------------------
def _check_config(s: _Subject) -> None:
    if not issubclass(s.cls.config_model, EnvConfig):
        raise AssertionError(f"config_model {s.cls.config_model!r} does not extend roll_core.envs.EnvConfig")
    try:
        s.cls.config_model.model_validate({**s.config.model_dump(), "__not_a_field__": 1})
    except ValidationError:
        pass
    else:
        raise AssertionError("config_model accepts unknown keys; keep EnvConfig's extra='forbid'")


def _check_reset_and_step(s: _Subject, seeds: Sequence[int]) -> None:
    env = s.make()
    observation, info = env.reset(seed=seeds[0])
    _expect(isinstance(observation, str) and observation, f"reset() observation must be non-empty text, got {observation!r}")
    _expect(isinstance(info, dict), f"reset() info must be a dict, got {type(info).__name__}")
    instruction = info.get("instruction")
    _expect(isinstance(instruction, str) and instruction.strip(), "reset() info['instruction'] must be non-empty text")
    result = env.step(env.sample_action(np.random.default_rng(0)))
    _expect(isinstance(result, tuple) and len(result) == 5, "step() must return a 5-tuple")
    observation, reward, terminated, truncated, info = result
    _expect(isinstance(observation, str), f"step() observation must be text, got {type(observation).__name__}")
    _expect(isinstance(reward, float) and math.isfinite(reward), f"step() reward must be a finite float, got {reward!r}")
    _expect(isinstance(terminated, bool) and isinstance(truncated, bool), "terminated/truncated must be bools")
    _check_metrics(info)
    _expect(info["metrics"]["action_is_valid"] == 1.0, "a sample_action() response was not a valid action")


def _check_metrics(info: dict[str, Any]) -> None:
    metrics = info.get("metrics") if isinstance(info, dict) else None
    _expect(isinstance(metrics, dict), "step() info['metrics'] must be a dict")
    for key in METRIC_KEYS:
        _expect(metrics.get(key) in (0.0, 1.0), f"metrics[{key!r}] must be 0.0 or 1.0, got {metrics.get(key)!r}")


def _check_determinism(s: _Subject, seeds: Sequence[int], steps: int) -> None:
    for seed in seeds:
        first = _normalise(record_trajectory(s.make(), seed, steps))
        second = _normalise(record_trajectory(s.make(), seed, steps))
        _expect(first == second, f"seed {seed}: two fresh envs gave different episodes\n{_diff(first, second)}")
        reused = s.make()
        record_trajectory(reused, seed + 1, steps)
        again = _normalise(record_trajectory(reused, seed, steps))
        _expect(first == again, f"seed {seed}: reset(seed) on a used env differs from a fresh env\n{_diff(first, again)}")


def _check_cross_process(s: _Subject, seeds: Sequence[int], steps: int, report: EnvCheckReport) -> None:
    if s.target is None:
        report.notes.append("cross-process determinism skipped: the env class is not importable by path")
        return
    records = [_normalise(record_trajectory(s.make(), seed, steps)) for seed in seeds]
    out = _run_in_subprocess(s, seeds, steps)
    for seed, mine, theirs in zip(seeds, records, out["trajectories"]):
        _expect(mine == theirs, f"seed {seed}: another process (other PYTHONHASHSEED) gave a different "
                f"episode\n{_diff(mine, theirs)}")
    _expect(not out["heavy"], f"building and stepping the env imported heavy modules: {out['heavy']}")


def _check_invalid_action(s: _Subject, seeds: Sequence[int]) -> None:
    env = s.make()
    responses = []
    if env.config.require_action_pattern:
        responses.append(INVALID_RESPONSE)
    if env.action_lookup is not None:
        responses.append(env.parser.format("\u00a7not-an-action\u00a7"))
    for response in responses:
        observation, _ = env.reset(seed=seeds[0])
        before = env.render_text()
        obs2, reward, terminated, truncated, info = env.step(response)
        _check_metrics(info)
        _expect(info["metrics"]["action_is_valid"] == 0.0, f"{response!r} was accepted as a valid action")
        _expect(info["metrics"]["action_is_effective"] == 0.0, f"invalid {response!r} counted as effective")
        _expect(reward == env.config.format_penalty,
                f"invalid {response!r} must cost format_penalty={env.config.format_penalty}, got {reward}")
        _expect(not terminated, f"invalid {response!r} terminated the episode")
        _expect(env.render_text() == before and obs2 == observation,
                f"invalid {response!r} changed the state")


def _check_truncation(s: _Subject, seeds: Sequence[int]) -> None:
    limit = 3
    env = s.make(max_steps=limit)
    env.reset(seed=seeds[0])
    rng = np.random.default_rng(0)
    invalid_only = env.config.require_action_pattern
    for step in range(1, limit + 1):
        _, _, terminated, truncated, _ = env.step(INVALID_RESPONSE if invalid_only else env.sample_action(rng))
        if terminated:
            _expect(not invalid_only, "an invalid action terminated the episode")
            break
        _expect(truncated == (step == limit), f"with max_steps={limit}, step {step} gave truncated={truncated}")
    try:
        env.step(INVALID_RESPONSE)
    except RuntimeError:
        pass
    else:
        raise AssertionError("step() after the episode ended must raise RuntimeError")


def _check_episode(s: _Subject, seeds: Sequence[int]) -> None:
    env = s.make()
    rng = np.random.default_rng(seeds[0])
    env.reset(seed=seeds[0])
    success = 0.0
    for _ in range(env.config.max_steps):
        _, _, terminated, truncated, info = env.step(env.sample_action(rng))
        _check_metrics(info)
        _expect(info["metrics"]["success"] >= success, "metrics['success'] went back from 1 to 0 in an episode")
        success = info["metrics"]["success"]
        if terminated or truncated:
            return
    raise AssertionError(f"a random episode neither terminated nor truncated within max_steps={env.config.max_steps}")


def _check_render(s: _Subject, seeds: Sequence[int], rgb: bool, report: EnvCheckReport) -> None:
    env = s.make()
    env.reset(seed=seeds[0])
    text = env.render("text")
    _expect(isinstance(text, str) and text, "render('text') must return non-empty text")
    if rgb:
        try:
            frame = env.render("rgb_array")
        except NotImplementedError:
            raise AssertionError("render('rgb_array') is not implemented (pass rgb=False to skip)") from None
        _expect(isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3
                and frame.shape[2] == 3 and frame.shape[0] > 0 and frame.shape[1] > 0,
                f"render('rgb_array') must be an H x W x 3 uint8 array, got {getattr(frame, 'shape', frame)!r}")
    else:
        report.notes.append("rgb_array rendering not checked (rgb=False)")
    try:
        env.render("no-such-mode")
    except ValueError:
        pass
    else:
        raise AssertionError("render() with an unknown mode must raise ValueError")


def _check_parser(s: _Subject, seeds: Sequence[int]) -> None:
    env = s.make()
    env.reset(seed=seeds[0])
    lookup = env.action_lookup
    words = list(lookup) if lookup is not None else _free_form_words(env)
    for word in words:
        for variant in (word, word.upper(), word.lower()):
            response = f"Let me think.\n{env.parser.format(variant)}\n"
            parsed = env.parse(response)
            expected = lookup[word] if lookup is not None else variant
            _expect(parsed.is_valid and parsed.action == expected,
                    f"parse(format({variant!r})) gave {parsed.action!r}, expected {expected!r}")
    rng = np.random.default_rng(0)
    for _ in range(5):
        _expect(env.parse(env.sample_action(rng)).is_valid, "sample_action() produced an unparsable response")
    for junk in ("", "<answer></answer>", None, 42):
        parsed = env.parse(junk)  # must not raise
        _expect(not parsed.is_valid, f"parse({junk!r}) must be invalid")


def _check_prompt(s: _Subject, seeds: Sequence[int]) -> None:
    from roll_core.envs.parser import _pattern_tags
    from roll_core.envs.prompt import Conversation, format_example

    env = s.make()
    observation, info = env.reset(seed=seeds[0])
    example = env.example_action()
    _expect(isinstance(example, str) and example.strip(),
            f"example_action() must return a non-empty action word, got {example!r}")
    shown = format_example(env)
    inner = env.parser.parse(example)
    _expect(inner.content is None or not env.parser.pattern.search(example),
            f"example_action() returned {example!r}, which is already wrapped in the action pattern, so every "
            f"prompt shows the answer format as {shown!r}; return the bare action word ({inner.content!r}): "
            "roll wraps it with the env's action pattern itself")
    _expect(example == example.strip() and "\n" not in example,
            f"example_action() {example!r} has surrounding whitespace or a line break; the prompt shows {shown!r}")
    parsed = env.parse(shown)
    _expect(parsed.content == example,
            f"the answer format shown to the model, {shown!r}, parses back to {parsed.content!r} instead of "
            f"{example!r}; check action_pattern (one capture group around the action)")
    if env.action_lookup is not None:
        _expect(parsed.is_valid, f"example_action() {example!r} is not an action word of action_lookup "
                f"({', '.join(map(str, list(env.action_lookup)[:8]))}); the model would copy an invalid action")
    open_tag, _ = _pattern_tags(env.parser.pattern.pattern)
    tags = {f"<{t}>" for t in TAG_PAIR.findall(env.instruction)}
    _expect(not tags or open_tag.lower() in {t.lower() for t in tags},
            f"the instruction shows answers as {' / '.join(sorted(tags))}...; but the parser reads "
            f"{env.parser.pattern.pattern!r}, so a model following the instruction is never understood; write "
            "the format with the parser's tags (self.parser.format(word) builds it)")
    texts = [("the instruction", env.instruction), ("the reset observation", observation)]
    rng = np.random.default_rng(seeds[0])
    for turn in range(2, 5):  # a few steps in: observations after actions build prompts too
        observation, _, terminated, truncated, _ = env.step(env.sample_action(rng))
        if terminated or truncated:
            break
        texts.append((f"the observation of turn {turn}", observation))
    for what, text in texts:
        _expect(isinstance(text, str) and text.strip(), f"{what} is empty: the model would see no state")
        placeholder = UNFILLED_PLACEHOLDER.search(text)
        _expect(placeholder is None, f"{what} holds {placeholder.group(0) if placeholder else ''!r}, a format "
                f"placeholder that was never filled (a missing f-prefix?): {_excerpt(text, placeholder)}")
        token = CHAT_TOKEN.search(text)
        _expect(token is None, f"{what} holds the chat-template token {token.group(0) if token else ''!r}, which "
                "breaks the chat format the model is trained on; remove it from the env's text")
    conversation = Conversation.for_env(env)
    message = conversation.observe(texts[1][1], actions_left=env.config.max_steps)
    _expect(message["content"].count(shown) == 1,
            f"the first turn's prompt should show the answer format {shown!r} once:\n{message['content']}")


def _excerpt(text: str, match: re.Match | None, width: int = 40) -> str:
    if match is None:
        return ""
    start, end = max(0, match.start() - width), min(len(text), match.end() + width)
    return repr(("..." if start else "") + text[start:end] + ("..." if end < len(text) else ""))


def _free_form_words(env: TextEnv) -> list[str]:
    try:
        return [str(w) for w in env.valid_actions()[:5]]
    except NotImplementedError:
        return []


def _expect(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    for key in a:
        if a.get(key) != b.get(key):
            left, right = a.get(key), b.get(key)
            if isinstance(left, list) and isinstance(right, list):
                for i, (x, y) in enumerate(zip(left, right)):
                    if x != y:
                        return f"  first difference in {key}[{i}]:\n    {x!r}\n  vs\n    {y!r}"
                return f"  {key} lengths differ: {len(left)} vs {len(right)}"
            return f"  {key}: {left!r} vs {right!r}"
    return "  (no difference found in the recorded fields)"


def check_env(env: str | type[TextEnv], env_config: Mapping[str, Any] | EnvConfig | None = None, *,
              seeds: Sequence[int] = (0, 1, 2), steps: int = 20, subprocess_check: bool = True,
              rgb: bool = True, registry: Registry | None = None,
              raise_on_failure: bool = True) -> EnvCheckReport:
    """Check that ``env`` (a registered name or tag, or a :class:`TextEnv` subclass) honours the contract.

    ``env_config`` is validated like a YAML ``env_config``; ``seeds`` and ``steps`` size the
    determinism checks; ``subprocess_check`` replays the seeds in a fresh interpreter; ``rgb``
    requires ``render("rgb_array")``. Raises :class:`EnvCheckError` listing every failure
    (or returns the report with ``raise_on_failure=False``).
    """
    if not seeds:
        raise ValueError("check_env needs at least one seed")
    subject = _resolve(env, env_config, registry)
    report = EnvCheckReport(subject.label)
    checks: list[tuple[str, Callable[[], Any]]] = [
        ("config", lambda: _check_config(subject)),
        ("reset/step types", lambda: _check_reset_and_step(subject, seeds)),
        ("invalid action", lambda: _check_invalid_action(subject, seeds)),
        ("truncation at max_steps", lambda: _check_truncation(subject, seeds)),
        ("random episode", lambda: _check_episode(subject, seeds)),
        ("render modes", lambda: _check_render(subject, seeds, rgb, report)),
        ("parser round trip", lambda: _check_parser(subject, seeds)),
        ("prompt", lambda: _check_prompt(subject, seeds)),
        ("seed determinism", lambda: _check_determinism(subject, seeds, steps)),
    ]
    if subprocess_check:
        checks.append(("determinism across processes", lambda: _check_cross_process(subject, seeds, steps, report)))
    report.run(checks)
    if report.failures and raise_on_failure:
        raise EnvCheckError(str(report))
    return report
