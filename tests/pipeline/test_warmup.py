"""The warm start's pure helpers: ungrouped demonstrations, the solver schedule, RLVR demonstrations."""

from __future__ import annotations

import pytest
from pipeline_helpers import EXAMPLES

from roll_core.config import load_config
from roll_core.errors import ConfigError
from roll_core.pipeline.warmup import demonstration_config, prompt_demonstrations, solver_step


def test_demonstrations_play_one_instance_per_env():
    config = load_config(str(EXAMPLES / "sokoban" / "starpo.yaml"), [
        "train_env_manager.num_env_groups=4", "train_env_manager.group_size=8",
        "train_env_manager.group_size_redundancy=2", "+train_env_manager.num_groups_partition=[3,1]",
        "train_env_manager.tags=[SimpleSokoban,LargerSokoban]"])
    manager = demonstration_config(config).train_env_manager
    assert (manager.num_env_groups, manager.group_size, manager.group_size_redundancy) == (32, 1, 0)
    assert manager.num_groups_partition == [24, 8]  # each tag keeps its share of the envs
    assert config.train_env_manager.group_size == 8  # the run's own config is untouched


def test_slip_rate_goes_to_the_solvers_demonstrations_only():
    from roll_core.pipeline.warmup import POLICY_OPTIONS

    config = load_config(str(EXAMPLES / "sokoban" / "starpo.yaml"), ["+warmup_sft.slip_rate=0.25"])
    assert POLICY_OPTIONS["scripted"](config.warmup_sft) == {"slip_rate": 0.25}
    assert POLICY_OPTIONS["random"](config.warmup_sft) == {}
    plain = load_config(str(EXAMPLES / "sokoban" / "starpo.yaml"))
    assert POLICY_OPTIONS["scripted"](plain.warmup_sft) == {}  # the example's demonstrations are unchanged
    with pytest.raises(ConfigError, match="no demonstration is the solver's"):
        load_config(str(EXAMPLES / "frozen_lake" / "grpo.yaml"), ["warmup_sft.policy=random",
                                                                   "warmup_sft.solver_fraction=0",
                                                                   "+warmup_sft.slip_rate=0.25"])


def test_solver_steps_are_spread_evenly():
    assert [solver_step(s, 0.25) for s in range(8)] == [False, False, False, True] * 2
    assert sum(solver_step(s, 0.5) for s in range(10)) == 5
    assert not any(solver_step(s, 0.0) for s in range(10))


class CharTokenizer:
    """One id per character (ord), enough to check what the demonstrations contain."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(ch) for ch in text]}


def prompt_rows():
    from roll_core.data import PromptRow

    facts = [(a, b) for a in range(5) for b in range(5)]
    rows = [PromptRow(i, (1, 100 + a, 200 + b), f"{a}+{b}=", str(a + b), "arithmetic")
            for i, (a, b) in enumerate(facts)]
    rows.append(PromptRow(len(rows), (1, 300), "say x", "x", "letters"))
    return rows


def decode(data):
    """Each row's (prompt ids, response text) from the padded tensors."""
    out = []
    for ids, attention, response in zip(data["input_ids"].tolist(), data["attention_mask"].tolist(),
                                        data["response_mask"].tolist()):
        prompt = [t for t, a, r in zip(ids, attention, response) if a and not r]
        answer = [t for t, r in zip(ids, response) if r]
        assert answer[-1] == 0  # ends with end-of-sequence, which is trained on too
        out.append((tuple(prompt), "".join(chr(t) for t in answer[:-1])))
    return out


def test_rlvr_random_demonstrations_answer_with_another_row_of_the_same_domain():
    rows = prompt_rows()
    by_prompt = {tuple(r.prompt_ids): r for r in rows}
    demos = prompt_demonstrations(rows, eos_id=0, tokenizer=CharTokenizer(), batch_size=400, seed=3)
    data, metrics = demos(False)
    pairs = decode(data)
    assert len(pairs) == 400
    answers = {r.domain: {x.reference for x in rows if x.domain == r.domain} for r in rows}
    for prompt, answer in pairs:
        row = by_prompt[prompt]
        assert answer in answers[row.domain]  # the format and the answers of the prompt's domain
    arithmetic = [(by_prompt[p], a) for p, a in pairs if by_prompt[p].domain == "arithmetic"]
    right = sum(row.reference == a for row, a in arithmetic) / len(arithmetic)
    assert right < 0.3  # about P(two random facts share a sum) = 0.15: not the task
    assert metrics["sft_demos/correct"] == sum(by_prompt[p].reference == a for p, a in pairs) / 400
    assert len({a for _, a in arithmetic}) == 9  # every sum 0..8 is demonstrated


def test_rlvr_scripted_demonstrations_answer_with_the_prompts_own_reference_and_repeat_by_seed():
    rows = prompt_rows()
    by_prompt = {tuple(r.prompt_ids): r for r in rows}
    data, metrics = prompt_demonstrations(rows, eos_id=0, tokenizer=CharTokenizer(), batch_size=50, seed=3)(True)
    assert all(by_prompt[p].reference == a for p, a in decode(data)) and metrics["sft_demos/correct"] == 1.0
    again, _ = prompt_demonstrations(rows, eos_id=0, tokenizer=CharTokenizer(), batch_size=50, seed=3)(True)
    assert again["input_ids"].equal(data["input_ids"])


def test_rlvr_demonstrations_draw_prompts_like_rl_does():
    rows = prompt_rows()
    domains = {tuple(r.prompt_ids): r.domain for r in rows}
    demos = prompt_demonstrations(rows, eos_id=0, tokenizer=CharTokenizer(), batch_size=50, seed=3,
                                  probs={"arithmetic": 1.0, "letters": 0.0})
    pairs = decode(demos(False)[0]) + decode(demos(False)[0])
    assert {domains[p] for p, _ in pairs} == {"arithmetic"}  # a domain RL never draws is not demonstrated
    assert len({p for p, _ in pairs[:25]}) == 25  # shuffled passes over the rows, as in RL: no repeats in a pass


def test_rlvr_demonstrations_need_reference_answers():
    from roll_core.data import PromptRow

    with pytest.raises(ConfigError, match="warmup_sft needs reference answers"):
        prompt_demonstrations([PromptRow(0, (1, 2), "1+1=", None, "arithmetic")], eos_id=0,
                              tokenizer=CharTokenizer(), batch_size=4, seed=0)


class RecordingGroup:
    """A train group that reports a scripted pre-update NLL per step and records what it was asked."""

    def __init__(self, nlls):
        self.nlls, self.trained, self.saved = list(nlls), 0, None

    def train_sft(self, rows):
        self.trained += 1
        return {"sft/nll": self.nlls[self.trained - 1]}

    def save_model(self, path):
        self.saved = path

    def shutdown(self):
        pass


class WarmupPipeline:
    def __init__(self, config, group):
        self.config, self.group, self.printed = config, group, []
        self.resolved = type("Resolved", (), {"replace_config": staticmethod(lambda c: c)})()
        self.tracker = type("Tracker", (), {"print": self.printed.append})()

    def train_group(self, role, resolved, num_training_steps):
        return self.group


@pytest.mark.parametrize("stop_nll, trained", [(None, 8), (0.35, 5), (0.01, 8)])
def test_the_warm_start_stops_once_a_window_of_nlls_reaches_stop_nll(tmp_path, stop_nll, trained):
    from roll_core.pipeline.warmup import train_warmup

    config = load_config(str(EXAMPLES / "frozen_lake" / "grpo.yaml"), [
        f"output_dir={tmp_path}", "warmup_sft.steps=8", "warmup_sft.stop_window=2",
        f"warmup_sft.stop_nll={'null' if stop_nll is None else stop_nll}"])
    group = RecordingGroup([1.0, 0.8, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    out_dir, metrics = train_warmup(WarmupPipeline(config, group), lambda use_solver: ({}, {}))
    # steps 4 and 5 (0.4, 0.3) are the first window with a mean <= 0.35: no sixth step is trained
    assert group.trained == trained and metrics["sft/steps"] == trained
    assert metrics["sft/nll"] == group.nlls[trained - 1]  # the last trained step's figure
    assert group.saved == out_dir == str(tmp_path / "warmup_sft")


def test_the_warm_start_schedule_reaches_the_temporary_worker():
    from roll_core.pipeline.warmup import warmup_config

    config = load_config(str(EXAMPLES / "frozen_lake" / "grpo.yaml"), [
        "warmup_sft.steps=300", "warmup_sft.lr_scheduler_type=cosine"])
    targs = warmup_config(config).actor_train.training_args
    assert (targs.lr_scheduler_type, targs.max_steps, targs.learning_rate) == ("cosine", 300, 1.0e-3)
    assert config.actor_train.training_args.lr_scheduler_type == "constant"  # RL's own schedule is untouched
