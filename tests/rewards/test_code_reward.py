"""The code_sandbox reward on real model-style responses: correct, wrong and hostile code, run for real."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from roll_core.plugins import PluginManager
from roll_core.rewards.code import code_sandbox_reward, extract_code, reason_counts, score_code
from roll_core.rewards.dispatch import RewardDispatcher
from roll_core.sandbox import Limits

pytestmark = pytest.mark.sandbox

ADD_TESTS = [{"assert_code": "assert add(2, 3) == 5"}, {"assert_code": "assert add(-1, 1) == 0"},
             {"assert_code": "assert add(10, 5) == 15"}]
FAST = Limits(wall_s=30, cpu_s=1,  # wall: room for a loaded machine (the CPU limit stops a loop first)
               memory_mb=256, processes=16, output_bytes=4096)


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt adds the numbers."


def test_extract_code_takes_the_last_python_block_after_any_thinking():
    response = "<think>```python\nbad()\n```</think>First:\n```\nx = 1\n```\nFinal:\n```python\ny = 2\n```\n"
    assert extract_code(response) == "y = 2"
    assert extract_code("```\nprint(1)\n```") == "print(1)"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1"


def test_correct_code_scores_1_and_wrong_code_0_or_its_fraction():
    assert code_sandbox_reward("q", fenced("def add(a, b):\n    return a + b"), None, row={"test_cases": ADD_TESTS}) == 1
    wrong = fenced("def add(a, b):\n    return a + b if a > 0 else a - b")  # passes 2 of 3
    assert code_sandbox_reward("q", wrong, None, row={"test_cases": json.dumps(ADD_TESTS)}) == 0
    score = score_code(wrong, ADD_TESTS, partial_credit=True)
    assert score.reward == pytest.approx(2 / 3) and score.reasons == ["passed", "wrong_answer", "passed"]


def test_input_output_pytest_check_based_and_text_cases():
    io = [{"stdin": "3\n1 2 3\n", "expected_stdout": "6\n"}, {"stdin": "1\n7\n", "expected_stdout": "7"}]
    program = "input()\nprint(sum(map(int, input().split())))"
    assert score_code(fenced(program), io, "input").reward == 1
    wrong = score_code(fenced("print(0)"), io, "input")
    assert wrong.reward == 0 and wrong.reason == "wrong_answer"
    pytest_cases = {"assert_code": "def test_small():\n    assert sq(3) == 9\n\ndef test_zero():\n    assert sq(0) == 0\n"}
    assert score_code(fenced("def sq(x):\n    return x * x"), pytest_cases, "pytest", partial_credit=True).passed == 2
    check = {"assert_code": "def check(candidate):\n    assert candidate(nums=[1, 3, 5], target=5) == 2\n",
             "import_prefix": "from typing import *\n", "entry_point": "Solution().search"}
    solution = "class Solution:\n    def search(self, nums: List[int], target: int) -> int:\n        return nums.index(target)"
    assert score_code(fenced(solution), check, "check_based").reward == 1
    text = [{"assert_code": "assert '<<' in {response} and '>>' in {response}"}]
    assert score_code("<<A title>> and text", text, "text").reward == 1
    assert score_code("no title", text, "text").reward == 0


@pytest.mark.parametrize(("program", "reason"), [
    ("def add(a, b):\n    while True: pass", "cpu_limit"),
    ("import os\ndef add(a, b):\n    while True:\n        try: os.fork()\n        except OSError: pass", "timeout"),
    ("def add(a, b):\n    x = bytearray(1 << 30)\n    return a + b", "memory_limit"),
    ("def add(a, b):\n    print('x' * (100 << 20))", "output_limit"),
    ("def add(a, b):\n    return int(open('/etc/shadow').read(1)) or a + b", "error"),
    ("import socket\ndef add(a, b):\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n    return a + b", "error"),
    ("import os\ndef add(a, b):\n    assert 'OPENAI_API_KEY' in os.environ\n    return a + b", "wrong_answer"),
])
def test_hostile_code_scores_0_with_its_reason_and_scoring_goes_on(program, reason, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    before = reason_counts[reason]
    limits = FAST.with_(wall_s=3) if reason == "timeout" else FAST
    score = score_code(fenced(program), ADD_TESTS[:1], limits=limits)
    assert (score.reward, score.reasons) == (0.0, [reason])
    assert reason_counts[reason] == before + 1


def test_missing_code_and_malformed_tests_score_0_with_a_reason():
    assert score_code("", ADD_TESTS).reasons == ["no_code"]
    assert score_code(fenced("x = 1"), [{"stdin": "1"}], "input").reasons == ["bad_tests"]
    assert score_code(fenced("x = 1"), ADD_TESTS, "fortran").reasons == ["bad_tests"]


def test_registered_and_dispatched_with_the_rows_columns():
    registry = PluginManager(autoload=False).registry
    reg = registry.get("reward", "code_sandbox")
    assert reg.name == "code_sandbox" and registry.get("reward", "code").name == "code_sandbox"
    dispatcher = RewardDispatcher({"code": SimpleNamespace(format_pattern=None, response_length_penalty_coef=0, required_format=None, length_penalty_scope="all")},
                                  {"code": reg})
    row = {"case_type": "input", "test_cases": [{"stdin": "2 3", "expected_stdout": "5"}]}
    answer = fenced("print(sum(map(int, input().split())))")
    assert dispatcher.score("code", "q", answer, None, 10, row) == (1.0, True)
    assert dispatcher.score("code", "q", fenced("print(6)"), None, 10, row) == (0.0, False)
