"""The llm_judge reward against real loopback endpoints: verdicts parsed, garbage counted, the key
never shown (repr, errors, logs, output, the saved config)."""

from __future__ import annotations

import logging
import os
import sys
from types import SimpleNamespace

import pytest

from roll_core.config import load_config
from roll_core.errors import ConfigError
from roll_core.rewards.dispatch import RewardDispatcher
from roll_core.rewards.failures import RewardFailure
from roll_core.rewards.judge import (
    UNPARSABLE,
    UNREACHABLE,
    LLMJudge,
    judge_template,
    parse_verdict,
    render_judge_prompt,
)
from roll_core.run import dump_config

sys.path.insert(0, os.path.dirname(__file__))
from judge_servers import RuleJudge, TinyModelJudge  # noqa: E402

KEY = "sk-test-3f9a0c71d2"


def section(**fields):
    base = dict(judge_prompt="yes_no", judge_model_type="api", judge_model_name="rule", judge_api_url=None,
                judge_api_key=None, score_timeout=10.0, generating_args=None, format_pattern=None,
                response_length_penalty_coef=0.0, required_format=None, length_penalty_scope="all")
    return SimpleNamespace(**{**base, **fields})


def test_verdicts_parse_to_scores():
    assert parse_verdict("YES") == 1.0
    assert parse_verdict("no.") == 0.0
    assert parse_verdict("The answer matches.\nScore: 7") == 0.7
    assert parse_verdict("Score: 15") == 1.0  # clipped
    assert parse_verdict("Score: 3 then Score: 8.5") == 0.85  # the last score
    with pytest.raises(RewardFailure) as err:
        parse_verdict("Nobody knows")
    assert err.value.reason == UNPARSABLE
    with pytest.raises(RewardFailure):
        parse_verdict("")


def test_templates_fill_only_their_placeholders():
    text = render_judge_prompt("Q={question} R={response} A={reference} keep {this}", "2+2", "4", "4")
    assert text == "Q=2+2 R=4 A=4 keep {this}"
    assert judge_template("Qwen2.5-7B-Instruct-RLVR-prompt") == judge_template("yes_no")
    with pytest.raises(ConfigError, match="response"):
        judge_template("Judge_this_typo")


def test_api_judge_scores_against_a_real_endpoint_and_never_shows_its_key(caplog, capsys):
    server = RuleJudge(key=KEY)
    try:
        judge = LLMJudge.from_reward_config(section(judge_api_url=server.url, judge_api_key=KEY))
        assert judge("What is 3+4?", "so it is 7", "7") == 1.0
        assert judge("What is 3+4?", "so it is 8", "7") == 0.0
        assert server.requests[0]["model"] == "rule"
        assert KEY not in repr(judge.ask)
        # a wrong key: the server refuses and echoes the header; the failure says neither
        caplog.set_level(logging.DEBUG)
        os.environ["ROLL_JUDGE_API_KEY"] = "sk-wrong-key-0000"
        try:
            bad = LLMJudge.from_reward_config(section(judge_api_url=server.url))  # key from the environment
            dispatcher = RewardDispatcher({"judge": section(judge_api_url=server.url)},
                                          {"judge": SimpleNamespace(name="llm_judge", load=lambda: LLMJudge)})
            with pytest.raises(RewardFailure) as err:
                bad("q", "7", "7")
            assert err.value.reason == UNREACHABLE and "401" in str(err.value)
            assert dispatcher.score_checked("judge", "q", "7", "7") == (0.0, False, UNREACHABLE)
        finally:
            del os.environ["ROLL_JUDGE_API_KEY"]
        out = capsys.readouterr()
        shown = out.out + out.err + caplog.text + str(err.value)
        assert KEY not in shown and "sk-wrong-key-0000" not in shown
    finally:
        server.close()


def test_a_judge_that_answers_garbage_scores_zero_counted():
    """A real model behind a real endpoint: roll's tiny random model says no verdict."""
    server = TinyModelJudge()
    try:
        judge_section = section(judge_api_url=server.url)
        dispatcher = RewardDispatcher({"judge": judge_section},
                                      {"judge": SimpleNamespace(name="llm_judge", load=lambda: LLMJudge)})
        results = [dispatcher.score_checked("judge", "What is 3+4?", answer, "7") for answer in ("7", "8", "x")]
        assert len(server.requests) == 3
        assert results == [(0.0, False, UNPARSABLE)] * 3
    finally:
        server.close()


def test_the_key_is_not_saved_with_the_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(f"""
pipeline_type: rlvr
pretrain: roll-tiny
prompt_length: 32
response_length: 32
rewards:
  judge:
    reward_type: llm_judge
    judge_api_url: http://127.0.0.1:1/v1
    judge_api_key: {KEY}
""")
    config = load_config(str(path))
    assert config.rewards["judge"].judge_api_key.get_secret_value() == KEY
    assert KEY not in dump_config(config) and KEY not in repr(config)
