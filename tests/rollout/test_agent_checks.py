"""An agent's episodes played in-process by its expert (no Ray): ``check_agent``, ``play_agent``, and
what an author sees of them (issue 38: expert replies over the cap, token counts, the dump of
tool-call turns, refused calls, misspelt names)."""

from __future__ import annotations

import pytest

from roll_core.cli import main
from roll_core.cli.rollout_cmd import trajectory_record
from roll_core.errors import ConfigError
from roll_core.testing import AgentCheckError, check_agent, play_agent

SEARCH = dict(max_steps=4, max_tokens=48, sequence_length=512)  # examples/agents/number_search.yaml


@pytest.fixture(scope="module")
def registry():
    from roll_core.plugins import PluginManager

    return PluginManager(extra_modules=["roll_rollout_testagents"]).registry


@pytest.fixture(scope="module")
def searches():
    return play_agent("number_search", seeds=(0, 1), **SEARCH)


def test_check_agent_passes_the_example_and_reports_what_a_reply_costs():
    report = check_agent("number_search", seeds=(0, 1), **SEARCH)
    assert report.ok and "episodes with its expert" in report.passed and "seed determinism" in report.passed
    assert report.reply_tokens and max(report.reply_tokens) <= 48
    assert any(note.startswith("expert replies: ") and "per-call cap 48" in note for note in report.notes)


def test_an_expert_reply_over_the_cap_stops_the_episodes_with_the_numbers(searches):
    longest = max(len(turn.response_ids) for trajectories in searches for t in trajectories for turn in t.turns)
    with pytest.raises(ConfigError, match=rf"at most {longest - 1} .*max_tokens_per_step.*at least \d+"):
        play_agent("number_search", seeds=(0, 1), **{**SEARCH, "max_tokens": longest - 1})
    with pytest.raises(AgentCheckError, match="episodes with its expert: ExpertReplyTooLong"):
        check_agent("number_search", seeds=(0,), **{**SEARCH, "max_tokens": longest - 1})


def test_the_dump_shows_tool_call_replies_with_their_token_counts(searches):
    record = trajectory_record(searches[0][0], batch=1)
    first = record["turns"][0]
    assert first["response"].startswith('<tool_call>{"name": "guess"') and first["response"].endswith("</tool_call>")
    assert first["response_tokens"] == len(searches[0][0].turns[0].response_ids)


def test_roll_rollout_says_what_replies_cost_per_tag(searches):
    from roll_core.cli.rollout_cmd import reply_lines

    trajectories = [t for episode in searches for t in episode]
    tokens = [len(turn.response_ids) for t in trajectories for turn in t.turns]
    (line,) = reply_lines(trajectories)
    assert line == (f"  replies/CheckedAgent: {len(tokens)} replies, tokens min {min(tokens)} mean "
                    f"{sum(tokens) / len(tokens):.1f} max {max(tokens)} | cut at the cap 0")


def test_a_refused_call_the_agent_does_not_catch_truncates_and_is_counted(registry):
    # the rewriting test agent makes 3 calls and catches nothing: with max_steps=1 its second call is
    # refused, the BadRequestError ends its code, and the episode is truncated with reward 0
    (trajectory,) = play_agent("test_rewriting_agent", max_steps=1, registry=registry)[0]
    assert (trajectory.end_reason, trajectory.truncated, trajectory.episode_reward) == ("max_steps", True, 0.0)
    assert trajectory.metrics["uncaught_refusal"] == 1.0 and trajectory.metrics["refused"] == 1.0
    assert trajectory.metrics["calls"] == 1.0
    report = check_agent("test_rewriting_agent", seeds=(0,), registry=registry)
    assert any("BadRequestError" in note for note in report.notes)


def test_a_misspelt_agent_name_gets_did_you_mean():
    from roll_core.config import resolve, validate_config

    config = {"pretrain": "roll-tiny", "sequence_length": 256, "custom_envs": {"X": {"env_type": "number_serch"}},
              "train_env_manager": {"tags": ["X"]}, "val_env_manager": {"tags": ["X"]}}
    with pytest.raises(Exception, match=r"Unknown env or agent 'number_serch'.*Did you mean 'number_search'"):
        resolve(validate_config(config), roles=())


def test_env_play_on_an_agent_tag_says_what_plays_agents(capsys):
    assert main(["env", "play", "NumberSearch", "--policy", "scripted"]) == 1
    err = capsys.readouterr().err
    assert "'NumberSearch' is an agent (number_search" in err and "roll rollout CONFIG --policy scripted" in err
    assert main(["env", "play", "NumberSerch"]) == 1
    assert "Did you mean 'NumberSearch'" in capsys.readouterr().err
