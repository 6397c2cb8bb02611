"""Built-in RLVR rewards on real answers, and their registration."""

import threading

import pytest

from roll_core.plugins import PluginManager
from roll_core.rewards import math_verify_reward, regex_reward


@pytest.mark.parametrize(("response", "reference", "expected"), [
    ("Adding gives <answer>19</answer>", "19", 1.0),
    ("<answer>0.5</answer>", "\\frac{1}{2}", 1.0),
    ("The result is $\\boxed{\\frac{3}{6}}$", "1/2", 1.0),
    ("<answer>20</answer>", "19", 0.0),
    ("first <answer>3</answer> then <answer>4</answer>", "4", 1.0),  # the last answer counts
    ("I have no idea", "19", 0.0),
    ("", "19", 0.0),
    ("<answer>}{{\\frac</answer>", "2", 0.0),  # malformed never raises
])
def test_math_verify_reward(response, reference, expected):
    assert math_verify_reward("q", response, reference) == expected


def test_math_verify_reward_works_off_the_main_thread():
    results = []
    thread = threading.Thread(target=lambda: results.append(math_verify_reward("q", "<answer>4</answer>", "2+2")))
    thread.start()
    thread.join()
    assert results == [1.0]


def test_math_verify_verdicts_are_kept_and_equal_math_verifys_own():
    """The kept verdicts are math-verify's, asked once per (answer, reference): a repeated sample
    is not parsed again, and each verdict is what parse + verify give without the cache."""
    from math_verify import parse, verify

    from roll_core.rewards.math import _equivalent

    _equivalent.cache_clear()
    pairs = [(str(a), str(b)) for a in range(12) for b in range(10)] + [("0.5", "\\frac{1}{2}"), ("2+2", "4")]
    for _ in range(3):  # every pair three times, as a run scores the same sums again and again
        for answer, reference in pairs:
            gold, got = parse(reference), parse(answer)
            expected = 1.0 if gold and got and verify(gold, got) else 0.0
            assert math_verify_reward("q", f"<answer>{answer}</answer>", reference) == expected
    info = _equivalent.cache_info()
    assert (info.misses, info.hits) == (len(pairs), 2 * len(pairs))
    assert math_verify_reward("q", "<answer>0.5</answer>", "\\frac{1}{2}") == 1.0
    assert math_verify_reward("q", "<answer>7</answer>", "7") == 1.0
    assert math_verify_reward("q", "<answer>7</answer>", "8") == 0.0


def test_regex_reward():
    assert regex_reward("q", "<think>12+7</think> <answer>19</answer>") == 1.0
    assert regex_reward("q", "<answer>19</answer>") == 1.0
    assert regex_reward("q", "19") == 0.0
    assert regex_reward("q", "<answer>19</answer> trailing words") == 0.0
    assert regex_reward("q", "ok", pattern=r"^ok$", match=2.0) == 2.0


def test_rewards_are_registered_by_name_and_tag():
    registry = PluginManager(autoload=False).registry
    assert registry.get("reward", "math_rule").name == "math_verify"
    assert registry.load("reward", "math_verify") is math_verify_reward
    assert registry.load("reward", "format") is regex_reward


def test_math_verify_answer_pattern_stops_an_evaluated_restatement():
    """math-verify evaluates expressions: restating the question scores as its answer unless the
    answer is pinned down by a pattern (a domain's format_pattern reaches the reward as ``pattern``)."""
    last_number = r"(-?\d+)\D*$"
    assert math_verify_reward("What is 32 plus 43?", "32 + 43", "75") == 1.0  # the hole
    assert math_verify_reward("q", "32 + 43", "75", pattern=last_number) == 0.0
    assert math_verify_reward("q", "32 + 43 = 75", "75", pattern=last_number) == 1.0
    assert math_verify_reward("q", "The answer is 75.", "75", pattern=last_number) == 1.0
    assert math_verify_reward("q", "32 + 43 = 74", "75", pattern=last_number) == 0.0
