"""roll_core.testing: check_env finds contract breaks, smoke_rollout reports, the pytest fixtures."""

import pytest
from roll_tiny_envs import CounterEnv, HashOrderEnv, NondeterministicEnv

from roll_core.envs import StepOutcome
from roll_core.registry import Registration, Registry
from roll_core.testing import EnvCheckError, check_env, smoke_rollout


def _registry():
    registry = Registry()
    registry.add(Registration(kind="env", name="counter", target="roll_tiny_envs:CounterEnv", plugin="tests",
                              tags=("Counter",), options={"defaults": {"goal": 3}}))
    return registry


def test_a_good_env_passes_every_check():
    report = check_env(CounterEnv)
    assert report.ok and "determinism across processes" in report.passed and len(report.passed) == 10


def test_by_tag_from_a_registry_with_preset_defaults():
    report = check_env("Counter", registry=_registry())
    assert report.ok and report.env == "Counter"


def test_ignoring_the_seed_is_caught():
    with pytest.raises(EnvCheckError, match="seed determinism"):
        check_env(NondeterministicEnv, subprocess_check=False)


def test_hash_order_dependence_is_caught_across_processes():
    report = check_env(HashOrderEnv, raise_on_failure=False)
    assert [f.split(":")[0] for f in report.failures] == ["determinism across processes"]
    assert "other PYTHONHASHSEED" in report.failures[0]


def test_every_failure_is_listed_at_once():
    class Broken(CounterEnv):
        def _step(self, action):  # a NaN reward
            return StepOutcome(reward=float("nan"))

        def render_rgb(self):
            raise NotImplementedError

    report = check_env(Broken, raise_on_failure=False)
    failed = {f.split(":")[0] for f in report.failures}
    assert {"reset/step types", "render modes"} <= failed
    assert any("not importable" in n for n in report.notes)  # a local class cannot be replayed elsewhere
    with pytest.raises(EnvCheckError) as info:
        check_env(Broken)
    assert "reset/step types" in str(info.value) and "render modes" in str(info.value)


def _prompt_failure(cls) -> str:
    report = check_env(cls, raise_on_failure=False, subprocess_check=False)
    failures = [f for f in report.failures if f.startswith("prompt:")]
    assert len(failures) == 1, report
    return failures[0]


def test_a_formatted_example_action_is_caught_as_doubled_tags():
    class Doubled(CounterEnv):
        def example_action(self):  # the mistake of issue 23: the parser-formatted action
            return self.parser.format("Inc")

    failure = _prompt_failure(Doubled)
    assert "'<answer><answer>Inc</answer></answer>'" in failure and "return the bare action word ('Inc')" in failure


def test_an_example_action_outside_the_lookup_is_caught():
    class Unknown(CounterEnv):
        def example_action(self):
            return "Increment"

    assert "'Increment' is not an action word of action_lookup (Inc, Dec)" in _prompt_failure(Unknown)


def test_an_instruction_showing_other_tags_than_the_parser_reads_is_caught():
    class OtherTags(CounterEnv):
        def default_instruction(self):
            return f"Reach {self.config.goal}. Answer <action>Inc</action> or <action>Dec</action>."

    assert "shows answers as <action>" in _prompt_failure(OtherTags)


@pytest.mark.parametrize(("text", "expected"), [
    ("Reach {goal} by counting.", "'{goal}', a format placeholder that was never filled"),
    ("<|im_start|>system Reach the goal.", "the chat-template token '<|im_start|>'"),
    ("   ", "the instruction is empty"),
])
def test_malformed_instructions_are_caught(text, expected):
    class Malformed(CounterEnv):
        def default_instruction(self):
            return text

    assert expected in _prompt_failure(Malformed)


def test_an_empty_observation_after_a_step_is_caught():
    class Blank(CounterEnv):
        def render_text(self):
            return "" if self.num_steps else f"value={self.value}"

        def observation(self):
            return self.render_text()

    report = check_env(Blank, raise_on_failure=False, subprocess_check=False)
    assert any("the observation of turn 2 is empty" in f for f in report.failures), report


def test_smoke_rollout_random_and_scripted():
    random_stats = smoke_rollout(CounterEnv, episodes=5)
    assert random_stats.episodes == 5 and random_stats.valid_action_rate == 1.0
    scripted = smoke_rollout(CounterEnv, {"goal": 4}, episodes=8, policy="scripted")
    assert scripted.success_rate == 1.0 and scripted.mean_reward == 1.0
    assert scripted.to_dict()["steps"] == scripted.steps


def test_pytest_fixtures(roll_check_env, roll_smoke_rollout):
    assert roll_check_env(CounterEnv, subprocess_check=False).ok
    assert roll_smoke_rollout(CounterEnv, episodes=2).episodes == 2
