"""Code rewards: run the model's program against the row's tests in :mod:`roll_core.sandbox`.

The row format is ROLL's code-sandbox format (its ``code_sandbox`` reward domain):

==============  =====================================================================================
``case_type``   how ``test_cases`` are run (default ``assert``):
                ``assert``      a list of ``{"assert_code": "assert f(2) == 4"}``: each runs after the code
                ``input``       a list of ``{"stdin": "...", "expected_stdout": "..."}``: the code is a program;
                                its stdout must equal the expected one (trailing whitespace per line ignored)
                ``pytest``      ``{"assert_code": "def test_a(): ..."}`` (or a list of them): each ``test_*``
                                function is one test, called after the code (no pytest needed)
                ``check_based`` ``{"assert_code": "def check(candidate): ...", "entry_point": "Solution().f",
                                "import_prefix": "import math"}``: ``check(entry_point)`` after the code
                ``text``        ``{"assert_code": "... {response} ..."}``: the response is data, not code;
                                ``{response}`` becomes its Python literal
``test_cases``  the tests, as a list/dict or its JSON text
``test_case_function``  ROLL's name of the function under test (informational; ``entry_point`` decides)
==============  =====================================================================================

The tests come from the dataset row (a reward function declaring ``row`` receives it) or, when
the row has no ``test_cases``, from the reference column holding the same JSON.

Scoring follows ROLL: 1 when every test passes, else 0; ``partial_credit=True`` gives the
fraction passed instead. Each test runs in a fresh sandbox (no state shared between tests), so a
test's verdict is decided by the trainer from the program's exit status, never by anything the
program prints. Every failure has a reason (see :data:`TEST_REASONS`), counted in
:data:`reason_counts` (per process).

Where the code runs follows ROLL's fields of the domain's ``rewards`` section: ``use_local: true``
(the default) runs it in the local sandbox; ``use_local: false`` sends each test to the sandbox
service at ``code_url`` (:mod:`roll_core.rewards.code_remote`; roll's own is ``roll sandbox
serve``). Both give the same reasons and scores; a service that cannot be reached or answers
garbage costs the response (``RewardFailure``, counted), not the run.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roll_core.errors import ConfigError
from roll_core.rewards.failures import RewardFailure
from roll_core.sandbox import CODE_LIMITS, Limits, python_executable, run_sandboxed

if TYPE_CHECKING:
    from roll_core.rewards.code_remote import RemoteSandbox

logger = logging.getLogger("roll.rewards.code")

#: why one test failed (or ``passed``); the sandbox's reasons plus the checks made here
TEST_REASONS = ("passed", "wrong_answer", "error", "timeout", "cpu_limit", "memory_limit", "output_limit", "signal",
                "no_code", "bad_tests")
#: limits for one test's run
DEFAULT_LIMITS = CODE_LIMITS
#: failures per reason in this process, across every scored response (a reward worker reports them)
reason_counts: Counter[str] = Counter()
_counts_lock = threading.Lock()

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(response: str) -> str:
    """The model's program: the last ```python (or ```py) block, else the last fenced block, else
    the whole response; anything before a ``</think>`` is reasoning and is dropped."""
    text = (response or "").split("</think>")[-1]
    blocks = _FENCE.findall(text)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if python or blocks:
        return (python or [b for _, b in blocks])[-1].strip("\n")
    return text.strip()


@dataclass
class CodeScore:
    """One response's result: the reward, and each test's reason in order."""

    reward: float
    reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return self.reasons.count("passed")

    @property
    def reason(self) -> str:
        """``passed`` when all passed, else the first failing test's reason."""
        return next((r for r in self.reasons if r != "passed"), "passed")


@dataclass(frozen=True)
class _Test:
    program: str
    stdin: str | None = None
    expected_stdout: str | None = None


def _load(test_cases: Any) -> Any:
    return json.loads(test_cases) if isinstance(test_cases, str) else test_cases


def _as_list(cases: Any) -> list[Mapping[str, Any]]:
    cases = [cases] if isinstance(cases, Mapping) else list(cases)
    if not all(isinstance(c, Mapping) for c in cases):
        raise ValueError("test_cases must be an object or a list of objects")
    return cases


def _assert_tests(code: str, cases: Any, response: str) -> list[_Test]:
    return [_Test(f"{code}\n\n{c['assert_code']}\n") for c in _as_list(cases)]


def _input_tests(code: str, cases: Any, response: str) -> list[_Test]:
    return [_Test(code, str(c.get("stdin", "")), str(c["expected_stdout"])) for c in _as_list(cases)]


def _pytest_tests(code: str, cases: Any, response: str) -> list[_Test]:
    tests = []
    for case in _as_list(cases):
        source = case["assert_code"]
        names = [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
        tests += [_Test(f"{code}\n\n{source}\n\n{name}()\n") for name in names]
    return tests


def _check_based_tests(code: str, cases: Any, response: str) -> list[_Test]:
    return [_Test(f"{c.get('import_prefix', '')}\n{code}\n\n{c['assert_code']}\n\ncheck({c['entry_point']})\n")
            for c in _as_list(cases)]


def _text_tests(code: str, cases: Any, response: str) -> list[_Test]:
    return [_Test(c["assert_code"].replace("{response}", repr(response))) for c in _as_list(cases)]


#: ROLL's ``case_type`` -> how its ``test_cases`` become programs
CASE_TYPES = {"assert": _assert_tests, "input": _input_tests, "pytest": _pytest_tests,
              "check_based": _check_based_tests, "text": _text_tests}


def build_tests(case_type: str, test_cases: Any, code: str, response: str = "") -> list[_Test]:
    """The programs one response is scored with; ``ValueError`` names what is wrong with the tests."""
    if case_type not in CASE_TYPES:
        raise ValueError(f"unknown case_type {case_type!r}; known: {', '.join(CASE_TYPES)}")
    try:
        tests = CASE_TYPES[case_type](code, _load(test_cases), response)
    except (KeyError, TypeError, SyntaxError, json.JSONDecodeError) as exc:
        raise ValueError(f"test_cases do not fit case_type {case_type!r}: {type(exc).__name__}: {exc}") from None
    if not tests:
        raise ValueError(f"test_cases of case_type {case_type!r} hold no test")
    return tests


def _same_output(got: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip().splitlines()]
    return lines(got) == lines(expected)


def run_test(test: _Test, limits: Limits = DEFAULT_LIMITS, remote: RemoteSandbox | None = None) -> str:
    """One test in a fresh sandbox (``remote``: the service's); its reason (``passed`` or why not)."""
    if remote is not None:
        result = remote.run(test.program, test.stdin, limits)
    else:
        python, binds = python_executable()
        result = run_sandboxed([python, "-I", "main.py"], {"main.py": test.program}, stdin=test.stdin, limits=limits,
                               ro_binds=binds)
    if result.reason == "exit_nonzero":
        return "wrong_answer" if "AssertionError" in result.stderr else "error"
    if result.reason != "ok":
        return result.reason
    if test.expected_stdout is not None and not _same_output(result.stdout, test.expected_stdout):
        return "wrong_answer"
    return "passed"


def score_code(response: str, test_cases: Any, case_type: str = "assert", *, partial_credit: bool = False,
               limits: Limits = DEFAULT_LIMITS, workers: int = 4, remote: RemoteSandbox | None = None) -> CodeScore:
    """Score ``response`` against ``test_cases`` (the module docstring has the format); ``remote``
    runs the tests in a sandbox service, whose failure raises ``RewardFailure`` (counted here too)."""
    code = "" if case_type == "text" else extract_code(response)
    if case_type != "text" and not code.strip():
        return _counted(CodeScore(0.0, ["no_code"]))
    try:
        tests = build_tests(case_type or "assert", test_cases, code, response)
    except ValueError as exc:
        logger.warning("code reward: %s; the response scores 0", exc)
        return _counted(CodeScore(0.0, ["bad_tests"]))
    reasons: list[str | None] = [None] * len(tests)
    stop = threading.Event()  # all-or-nothing scoring stops at the first failure

    def one(i: int) -> None:
        if not stop.is_set():
            reasons[i] = run_test(tests[i], limits, remote)
            if reasons[i] != "passed" and not partial_credit:
                stop.set()

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(tests)))) as pool:
            list(pool.map(one, range(len(tests))))
    except RewardFailure as exc:  # the service failed, not the code: the sample is lost, counted
        _counted(CodeScore(0.0, [exc.reason]))
        raise
    done = [r for r in reasons if r is not None]
    passed = done.count("passed")
    reward = passed / len(tests) if partial_credit else float(passed == len(tests))
    return _counted(CodeScore(reward, done))


def _counted(score: CodeScore) -> CodeScore:
    with _counts_lock:
        reason_counts[score.reason] += 1
    return score


def code_sandbox_reward(prompt: str, response: str, reference: str | None, *, row: Mapping[str, Any] | None = None,
                        partial_credit: bool = False, remote: RemoteSandbox | None = None, **_: object) -> float:
    """ROLL's code-sandbox reward: 1 when the response's code passes every test of its row, else 0
    (``partial_credit``: the fraction passed). Tests: the row's ``test_cases`` (``case_type``), or
    the reference column holding them. ``remote``: a sandbox service runs them (``code_url``)."""
    row = row or {}
    cases = row.get("test_cases")
    if cases is None:
        cases = reference
    if cases is None:
        logger.warning("code reward: the row has neither test_cases nor a reference holding them; scores 0")
        return _counted(CodeScore(0.0, ["bad_tests"])).reward
    return score_code(response, cases, str(row.get("case_type") or "assert"), partial_credit=partial_credit,
                      remote=remote).reward


class CodeSandboxReward:
    """The registered ``code_sandbox`` reward: :func:`code_sandbox_reward` where the domain's
    ``use_local`` / ``code_url`` say (the module docstring)."""

    def __init__(self, remote: RemoteSandbox | None = None):
        self.remote = remote

    @classmethod
    def from_reward_config(cls, section: Any, *, seed: int = 0, **_: Any) -> CodeSandboxReward:
        from roll_core.rewards.code_remote import RemoteSandbox, shown_url

        url = getattr(section, "code_url", None)
        if getattr(section, "use_local", True):
            if url:
                logger.warning("code reward: code_url (%s) is set but use_local is true, so code runs in the local "
                               "sandbox, as in ROLL; set use_local: false to use the service", shown_url(url))
            return cls()
        if not url:
            raise ConfigError("use_local: false sends code to a sandbox service at code_url, which is not set; set "
                              "code_url (e.g. http://host:8080/run_code, served by `roll sandbox serve`) or "
                              "use_local: true")
        try:
            return cls(RemoteSandbox(url))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def __call__(self, prompt: str, response: str, reference: str | None, *, row: Mapping[str, Any] | None = None,
                 partial_credit: bool = False, **_: object) -> float:
        return code_sandbox_reward(prompt, response, reference, row=row, partial_credit=partial_credit,
                                   remote=self.remote)
