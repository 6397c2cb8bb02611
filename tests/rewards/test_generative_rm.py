"""The generative reward model: a causal LM's probability of the positive verdict, checked by hand
against transformers on roll's tiny model, and served by a reward worker group."""

from __future__ import annotations

import math

import pytest

from roll_core.config.rlvr import RewardConfig
from roll_core.errors import ConfigError
from roll_core.rewards.generative_rm import GenerativeReward
from roll_core.rewards.judge import JUDGE_PROMPTS

SAMPLES = [("What is 2 + 3?", "The answer is 5.", "5"), ("What is 2 + 3?", "It is 7, I think", "5"),
           ("Name a colour.", "blue", "any colour")]
WORKER_OPTIONS = {"num_cpus": 0}  # the CPU device: torch picks cuda only where there is one


def section(**kw) -> RewardConfig:
    return RewardConfig(model_args={"model_name_or_path": "roll-tiny", "dtype": "fp32"}, **kw)


def by_hand(prompt: str, response: str, reference: str, verdicts=("YES", "NO"), template="yes_no") -> float:
    """p(positive) / (p(positive) + p(negative)), each the product of its tokens' probabilities
    after the chat-templated question, computed with transformers alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from roll_core.models import resolve_pretrain

    path = resolve_pretrain("roll-tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    text = JUDGE_PROMPTS[template].replace("{question}", prompt).replace("{response}", response) \
        .replace("{reference}", reference)
    question = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=False)
    q = tokenizer(question, add_special_tokens=False)["input_ids"]
    probs = []
    for verdict in verdicts:
        v = tokenizer(verdict, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            p = torch.softmax(model(torch.tensor([q + v])).logits[0], -1)
        probs.append(math.prod(float(p[len(q) - 1 + k, t]) for k, t in enumerate(v)))
    return probs[0] / (probs[0] + probs[1])


def test_scores_are_the_models_verdict_probabilities():
    grm = GenerativeReward.from_reward_config(section(), seed=0)
    assert grm.verdicts == [[63, 43, 57], [52, 53]]  # YES and NO are several tokens in the tiny vocabulary
    scores = [grm(*s) for s in SAMPLES]
    assert scores == pytest.approx([by_hand(*s) for s in SAMPLES], rel=1e-5, abs=1e-7)
    assert all(0 < x < 1 for x in scores) and len(set(scores)) == 3  # a function of the text
    # single-token verdicts take the one-forward path: the next-token distribution after the question
    single = GenerativeReward.from_reward_config(section(verdict_tokens=["N", "Y"], judge_prompt="score_10"))
    assert single.verdicts == [[52], [63]]
    assert [single(*s) for s in SAMPLES] == pytest.approx(
        [by_hand(*s, verdicts=("N", "Y"), template="score_10") for s in SAMPLES], rel=1e-5, abs=1e-7)


def test_bad_verdicts_are_refused_by_name():
    with pytest.raises(ConfigError, match="two different"):
        GenerativeReward.from_reward_config(section(verdict_tokens=["YES", "YES"]))
    with pytest.raises(ValueError, match="verdict_tokens"):
        RewardConfig(verdict_tokens=["YES"])
    with pytest.raises(ConfigError, match="model_name_or_path"):
        GenerativeReward.from_reward_config(RewardConfig())


@pytest.mark.usefixtures("ray_session")
def test_served_by_a_reward_worker_group():
    from types import SimpleNamespace

    from roll_core.plugins import get_registry
    from roll_core.rollout.rlvr.reward_scoring import RewardScoring, scored_in_workers

    reg = get_registry().get("reward", "generative_reward_model")
    assert get_registry().get("reward", "genrm").name == "generative_reward_model"
    sections = {"grm": section()}
    assert scored_in_workers(sections["grm"], reg.load())
    run = SimpleNamespace(config=SimpleNamespace(rewards=sections, seed=0), rewards={"grm": reg},
                          reward_strategies={}, plugins={})
    scoring = RewardScoring.start(run, worker_options=WORKER_OPTIONS)
    try:
        assert scoring.describe() == ["rewards.grm: scored in 1 reward worker"]
        assert "grm" not in scoring.dispatcher.domains  # the driver never loads the model
        pending = [scoring.submit("grm", p, r, ref, 0, {}) for p, r, ref in SAMPLES]
        results = [scoring.result(x) for x in pending]
    finally:
        scoring.shutdown()
    assert [f for _, _, f in results] == ["", "", ""] and all(c for _, c, _ in results)
    assert [s for s, _, _ in results] == pytest.approx([by_hand(*s) for s in SAMPLES], rel=1e-5, abs=1e-7)
