"""The resolved Run: one object with every component bound, the plugins it uses, version checks."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from roll_core.config import Run, load_config, resolve
from roll_core.errors import PluginError
from roll_core.run import installed_version

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "frozen_lake" / "grpo.yaml"


@pytest.fixture(scope="module")
def run() -> Run:
    return resolve(load_config(str(DEMO)))


def test_every_component_is_bound_once(run):
    assert run.estimator.name == "grpo" and run.policy_loss.kind == "policy_loss"
    assert set(run.strategies) == {"actor_train", "actor_infer"}  # no critic, no KL term: no reference
    assert run.strategy("actor_train").name == "hf_train" and run.strategy("actor_infer").name == "hf_infer"
    binding = run.envs["FrozenLake4x4"]
    assert binding.registration.name == "frozen_lake" and binding.config.size == 4
    from roll_core.envs.binding import build_env

    env = build_env(binding)  # built from the bound registration and the validated config, no look-up
    assert type(env).__name__ == "FrozenLakeEnv" and env.config is binding.config
    assert run.granularity == "trajectory" and not run.needs_critic
    with pytest.raises(PluginError, match="builds no 'critic' worker"):
        run.strategy("critic")


def test_the_plugins_used_are_listed_with_versions(run, tmp_path):
    assert run.plugins == {"roll-core": installed_version("roll-core"),
                           "roll-env-frozenlake": installed_version("roll-env-frozenlake")}
    text = run.save(tmp_path / "config.yaml").read_text()
    first = text.splitlines()[0]
    assert re.fullmatch(r"# resolved by roll; plugins: roll-core \S+, roll-env-frozenlake \S+", first)
    assert load_config(str(tmp_path / "config.yaml")) == run.config  # the header is a comment


def test_a_worker_with_other_plugin_versions_refuses_to_start(run):
    run.check_plugins("test")  # the same installation: fine
    other = Run(**{**run.__dict__, "plugins": {**run.plugins, "roll-env-frozenlake": "0.0.1"}})
    with pytest.raises(PluginError, match=r"actor_train worker process runs with other plugin versions than the "
                                          r"driver: roll-env-frozenlake \S+ \(the driver has 0\.0\.1\)"):
        other.check_plugins("actor_train worker")
    missing = Run(**{**run.__dict__, "plugins": {"roll-env-nowhere": "1.0"}})
    with pytest.raises(PluginError, match="roll-env-nowhere not installed"):
        missing.check_plugins("env manager")


def test_the_run_pickles_with_its_bindings(run):
    clone = pickle.loads(pickle.dumps(run))
    assert clone.envs["FrozenLake4x4"].config == run.envs["FrozenLake4x4"].config
    assert clone.strategy("actor_train").options == run.strategy("actor_train").options


def test_a_model_free_rollout_binds_no_strategy():
    rollout_run = resolve(load_config(str(DEMO)), roles=())
    assert dict(rollout_run.strategies) == {} and set(rollout_run.envs) == {"FrozenLake4x4"}
