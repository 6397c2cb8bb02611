"""RLVR prompts (JSON lines, chat template, domains, prompt_length) and per-domain reward dispatch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from roll_core.config import load_config
from roll_core.config.workers import DataArgs
from roll_core.data import PromptSampler, load_prompts
from roll_core.errors import ConfigError, RollError, UnknownComponentError
from roll_core.rewards.dispatch import RewardDispatcher

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "rlvr" / "arithmetic.yaml"


@pytest.fixture(scope="module")
def tokenizer():
    from roll_core.models.policy_tokenizer import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="module")
def config():
    return load_config(str(EXAMPLE))


def write(path: Path, rows: list) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_example_data_loads_with_chat_template_and_domains(tokenizer, config, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = config.actor_train.data_args
    rows = load_prompts(args.file_name, tokenizer, data_args=args, rewards=config.rewards,
                        prompt_length=config.prompt_length)
    assert len(rows) == 240
    assert Counter(r.domain for r in rows) == {"arithmetic": 120, "number_format": 120}
    # every sum equally frequent: answering one number to everything earns 1/10, nothing more
    assert set(Counter(r.reference for r in rows if r.domain == "arithmetic").values()) == {12}
    first = rows[0]
    rendered = tokenizer.decode(list(first.prompt_ids))
    assert rendered == f"<|im_start|>user\n{first.text}<|im_end|>\n<|im_start|>assistant\n"
    a, b = first.text.rstrip("=").split("+")
    assert first.reference == str(int(a) + int(b))
    assert max(len(r.prompt_ids) for r in rows) <= config.prompt_length


def test_messages_column_plain_template_and_reference_fallback(tokenizer, config, tmp_path):
    path = write(tmp_path / "d.jsonl", [
        {"messages": [{"role": "system", "content": "Add."}, {"role": "user", "content": "2+2="}],
         "ground_truth": "4", "domain": "arithmetic", "test_cases": [{"assert_code": "assert True"}]},
    ])
    rows = load_prompts(path, tokenizer, data_args=DataArgs(template="plain"), rewards=config.rewards,
                        prompt_length=64)
    assert tokenizer.decode(list(rows[0].prompt_ids)) == "Add.\n2+2="
    assert (rows[0].text, rows[0].reference, rows[0].domain) == ("2+2=", "4", "arithmetic")
    # the other columns reach reward functions that take `row` (the prompt itself is not repeated)
    assert rows[0].fields == {"ground_truth": "4", "domain": "arithmetic",
                              "test_cases": [{"assert_code": "assert True"}]}


def test_prompt_length_filters_and_errors_when_nothing_fits(tokenizer, config, tmp_path, caplog):
    path = write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "tag": "arithmetic"},
                                        {"prompt": "1+1=" * 20, "tag": "arithmetic"}])
    rows = load_prompts(path, tokenizer, data_args=DataArgs(), rewards=config.rewards, prompt_length=16)
    assert len(rows) == 1 and "1 prompt(s)" in caplog.text
    with pytest.raises(ConfigError, match=r"longer than prompt_length \(4 tokens; the longest has \d+\); raise"):
        load_prompts(path, tokenizer, data_args=DataArgs(), rewards=config.rewards, prompt_length=4)


@pytest.mark.parametrize(("lines", "message"), [
    (['{"prompt": "1+1=", "tag": "arithmetic"}', "{not json"], r"d.jsonl:2 is not valid JSON"),
    (["[1, 2]"], r"d.jsonl:1 is a JSON list, not an object"),
    (['{"question": "1+1=", "tag": "arithmetic"}'], r"no 'prompt' column \(keys: question, tag\)"),
    (['{"prompt": "1+1=", "tag": "arithmetc"}'], r"'arithmetc' belongs to no reward domain.*'arithmetic'"),
])
def test_bad_rows_are_errors_that_name_the_line(tokenizer, config, tmp_path, lines, message):
    path = write(tmp_path / "d.jsonl", lines)
    with pytest.raises(ConfigError, match=message):
        load_prompts(path, tokenizer, data_args=DataArgs(), rewards=config.rewards, prompt_length=64)


def test_missing_file_and_unknown_template(tokenizer, config, tmp_path):
    with pytest.raises(ConfigError, match="does not exist.*relative to the directory"):
        load_prompts(str(tmp_path / "nope.jsonl"), tokenizer, data_args=DataArgs(), rewards=config.rewards,
                     prompt_length=8)
    path = write(tmp_path / "d.jsonl", [{"prompt": "1+1=", "tag": "arithmetic"}])
    with pytest.raises(ConfigError, match="template is 'qwen25'.*Did you mean 'qwen2_5'"):
        load_prompts(path, tokenizer, data_args=DataArgs(template="qwen25"), rewards=config.rewards,
                     prompt_length=8)


def test_sampler_follows_domain_probs_and_resumes_identically(tokenizer, config, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = config.actor_train.data_args
    rows = load_prompts(args.file_name, tokenizer, data_args=args, rewards=config.rewards, prompt_length=16)
    sampler = PromptSampler(rows, seed=1, probs={"arithmetic": 0.75, "number_format": 0.25})
    drawn = [sampler.sample(16) for _ in range(20)]
    share = sum(r.domain == "arithmetic" for batch in drawn for r in batch) / (20 * 16)
    assert 0.68 < share < 0.82
    # one pass over a domain's rows draws each row once
    first_pass = [r.index for batch in drawn for r in batch if r.domain == "arithmetic"][:55]
    assert len(set(first_pass)) == 55
    again = PromptSampler(rows, seed=1, probs={"arithmetic": 0.75, "number_format": 0.25})
    [again.sample(16) for _ in range(10)]
    resumed = PromptSampler(rows, seed=1, probs={"arithmetic": 0.75, "number_format": 0.25})
    resumed.load_state_dict(again.state_dict())
    assert [r.index for r in resumed.sample(16)] == [r.index for r in drawn[10]]
    with pytest.raises(ConfigError, match=r"names \['geometry'\], which have no rows"):
        PromptSampler(rows, seed=1, probs={"geometry": 1.0})


def test_rewards_dispatch_per_domain(config):
    from roll_core.config import resolve

    run = resolve(config)  # binds each domain's reward function
    rewards = RewardDispatcher(run.config.rewards, run.rewards)
    assert rewards.score("arithmetic", "3+4=", " 7", "7") == (1.0, True)
    assert rewards.score("arithmetic", "3+4=", "x8y", "7") == (0.0, False)
    assert rewards.score("arithmetic", "3+4=", "<answer>7.0</answer>", "7") == (1.0, True)
    # the regex domain uses the domain's format_pattern: one digit, whatever it is
    assert rewards.score("number_format", "3+4=", "ab 2 c", "7") == (1.0, True)
    assert rewards.score("number_format", "3+4=", "12", "7") == (0.0, False)  # "5555" must not pass
    assert rewards.score("number_format", "3+4=", "1 and 2", "7") == (0.0, False)
    with pytest.raises(RollError, match="no reward for domain 'arithmetc'.*Did you mean 'arithmetic'"):
        rewards.score("arithmetc", "3+4=", "7", "7")


def test_length_penalty_and_unknown_reward_type(config):
    from roll_core.config import resolve
    from roll_core.config.rlvr import RewardConfig

    math = RewardConfig(reward_type="math_verify", response_length_penalty_coef=0.01, tag_included=["arithmetic"])
    run = resolve(config.model_copy(update={"rewards": {**config.rewards, "arithmetic": math}}))
    rewards = RewardDispatcher(run.config.rewards, run.rewards)
    score, correct = rewards.score("arithmetic", "1+1=", "2", "2", response_tokens=10)
    assert correct and score == pytest.approx(0.9)
    # the format paid only with the answer: a correct reply in another form keeps part of its score,
    # a bare wrong number earns nothing, and "correct" is the answer's (before the format and the penalty)
    strict = math.model_copy(update={"response_length_penalty_coef": 0.0, "required_format": r"^\s*-?\d+\s*$",
                                     "format_pattern": r"(-?\d+)\D*$", "unformatted_credit": 0.25})
    run = resolve(config.model_copy(update={"rewards": {**config.rewards, "arithmetic": strict}}))
    rewards = RewardDispatcher(run.config.rewards, run.rewards)
    assert rewards.score("arithmetic", "1+1=", " 2\n", "2") == (1.0, True)
    assert rewards.score("arithmetic", "1+1=", "1 + 1 = 2", "2") == (0.25, True)
    assert rewards.score("arithmetic", "1+1=", "3", "2") == (0.0, False)
    assert rewards.score("arithmetic", "1+1=", "1 + 1 = 3", "2") == (0.0, False)
    # the length penalty charged to paid samples only: a shorter wrong reply gains nothing
    paid_only = strict.model_copy(update={"response_length_penalty_coef": 0.01, "length_penalty_scope": "paid"})
    run = resolve(config.model_copy(update={"rewards": {**config.rewards, "arithmetic": paid_only}}))
    rewards = RewardDispatcher(run.config.rewards, run.rewards)
    assert rewards.score("arithmetic", "1+1=", "2", "2", response_tokens=1) == (pytest.approx(0.99), True)
    assert rewards.score("arithmetic", "1+1=", "1 + 1 = 2", "2", response_tokens=5) == (pytest.approx(0.20), True)
    assert rewards.score("arithmetic", "1+1=", "3", "2", response_tokens=1) == (0.0, False)
    assert rewards.score("arithmetic", "1+1=", "1 + 1 = 3", "2", response_tokens=5) == (0.0, False)
    charged = paid_only.model_copy(update={"length_penalty_scope": "all"})
    run = resolve(config.model_copy(update={"rewards": {**config.rewards, "arithmetic": charged}}))
    rewards = RewardDispatcher(run.config.rewards, run.rewards)
    assert rewards.score("arithmetic", "1+1=", "1 + 1 = 3", "2", response_tokens=5) == (pytest.approx(-0.05), False)
    with pytest.raises(ValidationError, match="unformatted_credit"):
        RewardConfig(reward_type="math_verify", required_format="^x$", unformatted_credit=1.5)
    typo = math.model_copy(update={"reward_type": "math_verfy"})
    with pytest.raises(UnknownComponentError, match="rewards.arithmetic.reward_type"):
        resolve(config.model_copy(update={"rewards": {**config.rewards, "arithmetic": typo}}))
