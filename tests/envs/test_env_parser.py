"""The action parser: the regex's answers, in time linear in the response (issue 19)."""

from __future__ import annotations

import random
import re
import time

import pytest

from roll_core.envs.parser import MAX_REGEX_CHARS, ActionParser


@pytest.mark.parametrize("response, action", [
    ("<answer>Left</answer>", 1),
    ("I think... <ANSWER>  left </Answer> done", 1),
    ("<answer>up</answer><answer>Left</answer>", None),  # the first match counts
    ("<answer><answer>Left</answer>", None),  # the first opening tag starts the match
    ("no tags at all", None),
    ("<answer>Left", None),
])
def test_default_pattern(response, action):
    assert ActionParser({"Left": 1, "Right": 2}).parse(response).action == action


def test_many_unclosed_tags_parse_in_linear_time():
    parser = ActionParser({"Left": 1})
    timings = {}
    for size in (128_000, 1_024_000):
        text = "<answer>" * (size // 8)
        started = time.perf_counter()
        assert parser.parse(text).content is None
        timings[size] = time.perf_counter() - started
    assert timings[1_024_000] < 0.5  # re.search took 15 s at 128 kB; 8x the text must not cost 64x
    closed = "<answer>" * 16_000 + "Left</answer>"
    assert parser.parse(closed).content.endswith("Left")  # the regex's own answer, from the first tag


@pytest.mark.parametrize("pattern", [r"<answer>(.*?)</answer>", r"\[\[(.*?)\]\]", r"Action: (.*?)\.", r"<a>(.*?)a>"])
def test_fast_path_returns_what_the_regex_returns(pattern):
    parser, regex = ActionParser(None, pattern=pattern), re.compile(pattern, re.IGNORECASE | re.DOTALL)
    rng = random.Random(0)
    pieces = ["<answer>", "</answer>", "<ANSWER>", "</Answer>", "[[", "]]", "Action: ", ".", "<a>", "a>", "x", "\n"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        match = regex.search(text)
        assert parser.find(text) == (match.group(1) if match else None), text


def test_other_patterns_are_searched_in_a_bounded_prefix():
    parser = ActionParser(None, pattern=r"<think>.*?</think>\s*<answer>(.*?)</answer>")
    assert parser.parse("<think>hm</think> <answer>go</answer>").action == "go"
    started = time.perf_counter()
    assert parser.parse("<think>" * 200_000).action is None
    assert time.perf_counter() - started < 5
    assert parser.parse("x" * MAX_REGEX_CHARS + "<think>a</think><answer>go</answer>").action is None
