"""make_env: names, tags, preset defaults, config validation, helpful errors."""

import pytest
from roll_tiny_envs import CounterEnv

from roll_core.envs import env_config_for, make_env, resolve_env
from roll_core.errors import ConfigError, PluginError, UnknownComponentError
from roll_core.registry import Registration, Registry


@pytest.fixture
def registry():
    registry = Registry()
    registry.add(Registration(kind="env", name="counter", target="roll_tiny_envs:CounterEnv", plugin="tests",
                              tags=("Counter",)))
    registry.add(Registration(kind="env", name="counter_far", target="roll_tiny_envs:CounterEnv", plugin="tests",
                              tags=("FarCounter",), options={"defaults": {"goal": 9, "max_steps": 30}}))
    registry.add(Registration(kind="env", name="not_an_env", target="roll_tiny_envs:CounterConfig",
                              plugin="tests"))
    return registry


def test_by_name_and_tag(registry):
    assert type(make_env("counter", registry=registry)) is CounterEnv
    assert resolve_env("Counter", registry=registry).name == "counter"
    assert resolve_env("counter", registry=registry).name == "counter"


def test_preset_defaults_then_env_config_then_overrides(registry):
    assert make_env("FarCounter", registry=registry).config.goal == 9
    env = make_env("counter_far", {"goal": 4}, registry=registry, max_steps=7)
    assert (env.config.goal, env.config.max_steps) == (4, 7)
    config = env_config_for("counter", {"goal": 2}, registry=registry)
    assert make_env("counter", config, registry=registry, goal=3).config.goal == 3


def test_invalid_env_config_names_the_field(registry):
    with pytest.raises(ConfigError, match=r"custom_envs\.Counter\.env_config\.goal"):
        make_env("counter", {"goal": 0}, registry=registry, config_key="custom_envs.Counter")
    with pytest.raises(ConfigError, match="golf"):
        make_env("counter", {"golf": 1}, registry=registry)


def test_unknown_env_suggests(registry):
    with pytest.raises(UnknownComponentError, match="(?i)did you mean 'counter'"):
        make_env("countr", registry=registry)


def test_target_must_be_a_text_env(registry):
    with pytest.raises(PluginError, match="not a subclass"):
        make_env("not_an_env", registry=registry)


def test_installed_plugins_resolve_through_the_global_registry():
    assert resolve_env("SimpleSokoban").name == "sokoban"
    assert resolve_env("FrozenLake").name == "frozen_lake"


def test_assigning_in_a_validator_of_a_frozen_env_config_says_which_validator_to_use(registry):
    registry.add(Registration(kind="env", name="assigning", target="roll_tiny_envs:AssigningEnv", plugin="tests"))
    with pytest.raises(ConfigError) as info:
        make_env("assigning", {"goal": 3}, registry=registry)
    message = str(info.value)
    assert "env_config.goal: a validator of AssigningConfig assigned to it, but configs are frozen" in message
    assert "field_validator" in message and "model_validator(mode='before')" in message
