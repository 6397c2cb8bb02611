"""check_reward passes roll's own rewards and catches each broken reward of roll_broken_rewards (a plugin)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from roll_core.plugins import PluginManager
from roll_core.testing import RewardCheckError, check_reward

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # the cross-process check imports the broken rewards by name
    sys.path.insert(0, HERE)
#: many samples where a broken reward is random: a chance pass is then out of the question
MANY = [(f"What is {i} + 1?", f"<answer>{i + 1 if i % 2 else i}</answer>", str(i + 1)) for i in range(40)]


@pytest.fixture(scope="module")
def registry():
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    return PluginManager(extra_modules=["roll_broken_rewards"]).registry


def failed(report) -> set[str]:
    return {line.split(":")[0] for line in report.failures}


@pytest.mark.parametrize("name", ["math_verify", "regex"])
def test_roll_rewards_honour_the_contract(roll_check_reward, name):
    report = roll_check_reward(name)
    assert report.ok and "entry module stays import-light" in report.passed and len(report.passed) == 10, str(report)


def test_a_reward_that_honours_it_and_its_worked_examples(registry):
    report = check_reward("exact_answer", registry=registry, bounds=(0.0, 1.0),
                          expected=[("1+1=", "<answer>2</answer>", "2", 1.0), ("1+1=", "<answer>3</answer>", "2", 0.0)])
    assert report.ok and len(report.passed) == 9, str(report)
    wrong = check_reward("exact_answer", registry=registry, bounds=(0.0, 0.5), raise_on_failure=False,
                         expected=[("1+1=", "<answer>2</answer>", "2", 0.5)])
    assert failed(wrong) == {"scores are finite numbers", "expected scores"}
    assert "returned 1.0 for response '<answer>7</answer>', outside bounds (0.0, 0.5)" in str(wrong)
    assert "'<answer>2</answer>' -> 1.0, expected 0.5" in str(wrong)


#: broken reward -> (the checks it fails, a fragment of the report)
BROKEN = {
    "raises_on_empty": ({"malformed responses"}, "raised IndexError: string index out of range on response ''"),
    "returns_text": ({"scores are finite numbers", "malformed responses"}, "returned 'wrong' (str)"),
    "returns_nan": ({"scores are finite numbers", "malformed responses"}, "returned nan"),
    "random_score": ({"deterministic", "deterministic off the main thread", "deterministic in another process",
                   "independent of row order", "malformed responses"}, "scores changed in call 2"),
    "remembers": ({"deterministic", "deterministic off the main thread", "independent of row order"},
                  "'<answer>2</answer>': 1.0 then 0.0"),
    "hash_based": ({"deterministic in another process", "malformed responses"},
                   "scores changed in another process (PYTHONHASHSEED="),
    "two_args": ({"signature", "scores are finite numbers", "malformed responses"},
                 "two_args(prompt, response) cannot be called as reward(prompt, response, reference, pattern=...)"),
    "no_options": ({"signature"}, "got an unexpected keyword argument 'pattern'"),
    "main_thread_only": ({"deterministic off the main thread"}, "signal only works in main thread"),
    "lenient": ({"malformed responses"}, "scored 1.0 (> 0: counted as correct) for the malformed response ''"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_reward_is_caught(registry, name):
    checks, fragment = BROKEN[name]
    report = check_reward(f"broken_{name}", registry=registry, samples=MANY, raise_on_failure=False)
    assert failed(report) == checks, str(report)
    assert fragment in str(report)
    assert "Traceback" not in str(report)


def test_failures_raise_one_error_listing_them(registry):
    with pytest.raises(RewardCheckError, match=r"check_reward\(broken_lenient\): 8 passed, 1 failed\n  FAIL malformed"):
        check_reward("broken_lenient", registry=registry)


ANSWER = r"<answer>(.*?)</answer>"


def test_a_reward_class_is_built_from_its_settings_as_a_run_builds_it(registry):
    worked = [("1+1=", "<answer>2</answer>", "2", 1.0), ("1+1=", "<answer>3</answer>", "2", 0.0)]
    report = check_reward("pattern_class", registry=registry, config={"format_pattern": ANSWER}, expected=worked)
    assert report.ok and len(report.passed) == 9, str(report)  # in another process too: built there as well
    wrong = check_reward("pattern_class", registry=registry, config={"format_pattern": ANSWER}, raise_on_failure=False,
                         expected=[("1+1=", "<answer>2</answer>", "2", 0.0)])
    assert failed(wrong) == {"expected scores"} and "'<answer>2</answer>' -> 1.0, expected 0.0" in str(wrong)
    # without the settings it needs: one failure saying what to pass, the other checks skipped
    unbuilt = check_reward("pattern_class", registry=registry, raise_on_failure=False)
    assert failed(unbuilt) == {"registration loads a callable"} and not unbuilt.passed, str(unbuilt)
    assert ("roll_broken_rewards:PatternReward.from_reward_config(section, seed=0) raised ValueError: pattern_class "
            "needs format_pattern") in str(unbuilt) and "check_reward(..., config={...})" in str(unbuilt)
    nobuild = check_reward("broken_no_builder", registry=registry, raise_on_failure=False)
    assert failed(nobuild) == {"registration loads a callable"}, str(nobuild)
    assert "roll_broken_rewards:NoBuilder is a class without a from_reward_config(section, *, seed)" in str(nobuild)
    with pytest.raises(ValueError, match=r"not a valid rewards.<domain> section .*: format_patern: Extra inputs are "
                       r"not permitted. Did you mean 'format_pattern'\?"):
        check_reward("pattern_class", registry=registry, config={"format_patern": ANSWER})


ADD = json.dumps([{"assert_code": "assert add(2, 3) == 5"}])


@pytest.mark.sandbox
def test_the_built_in_code_sandbox_class(roll_check_reward):
    right, wrong = "```python\ndef add(a, b):\n    return a + b\n```", "```python\ndef add(a, b):\n    return a - b\n```"
    code = [("Write add(a, b).", right, ADD), ("Write add(a, b).", wrong, ADD)]
    report = roll_check_reward("code_sandbox", samples=code, config={"use_local": True}, bounds=(0.0, 1.0),
                               expected=[(*code[0], 1.0), (*code[1], 0.0)])
    assert report.ok and len(report.passed) == 10, str(report)
    with pytest.raises(RewardCheckError, match=r"expected scores: .*-> 0.0, expected 1.0"):
        roll_check_reward("code_sandbox", samples=code, expected=[(*code[1], 1.0)])
