"""A throwaway roll plugin for the config tests.

It provides env classes with real pydantic ``config_model``s and registers components under
``cfgtest_*`` names, so it never clashes with roll-core's built-ins whatever they register.
Tests that need ROLL's names (grpo, vllm, FrozenLake ...) build a :class:`Registry` by hand with
:func:`roll_names_registry`, pointing at the classes below.
"""

from __future__ import annotations

from pydantic import Field

from roll_core.envs.base import EnvConfig
from roll_core.hookspecs import hookimpl
from roll_core.registry import Registration, Registry

MODULE = __name__


class GridConfig(EnvConfig):
    size: int = Field(4, ge=2)
    is_slippery: bool = False


class BoxConfig(EnvConfig):
    dim_room: tuple[int, int] = (6, 6)
    num_boxes: int = Field(1, ge=1)
    search_depth: int = 30


class GridEnv:
    """A FrozenLake stand-in; resolve only reads ``config_model``."""

    config_model = GridConfig


class BoxEnv:
    """A Sokoban stand-in."""

    config_model = BoxConfig


def estimate(batch, config):  # pragma: no cover - never called by config tests
    return batch


@hookimpl
def roll_register_envs(register):
    register("cfgtest_grid", f"{MODULE}:GridEnv", tags=["CfgtestGrid"])


@hookimpl
def roll_register_advantage_estimators(register):
    register("cfgtest_adv", f"{MODULE}:estimate")


@hookimpl
def roll_register_policy_losses(register):
    register("cfgtest_loss", f"{MODULE}:estimate")


@hookimpl
def roll_register_strategies(register):
    register("cfgtest_train", f"{MODULE}:estimate", role="train")
    register("cfgtest_infer", f"{MODULE}:estimate", role="infer")


class AllFailed:
    """A third-party group filter: drop groups in which no episode succeeded, under its own reason."""

    def filter(self, group_id, episode_id, group):
        return "none_succeeded" if not any(t.metrics.get("success") for t in group) else False


@hookimpl
def roll_register_group_filters(register):
    register("cfgtest_all_failed", f"{MODULE}:AllFailed", description="Drop groups where nothing succeeded")


def roll_names_registry() -> Registry:
    """ROLL's component names, registered as a ROLL user's installation would have them."""
    registry = Registry()
    entries = [
        ("advantage_estimator", "grpo", {}),
        ("advantage_estimator", "reinforce", {}),
        ("advantage_estimator", "gae", {"needs_critic": True}),
        ("advantage_estimator", "gigpo", {"granularity": "step"}),
        ("policy_loss", "ppo", {}),
        ("policy_loss", "tis", {}),
        ("strategy", "hf_train", {"role": "train", "critic": "roll_core.strategies.critic:HFCriticStrategy"}),
        ("strategy", "hf_infer", {"role": "infer"}),
        ("strategy", "megatron_train", {"role": "train"}),
        ("strategy", "deepspeed_train", {"role": "train"}),
        ("strategy", "vllm", {"role": "infer"}),
        ("strategy", "sglang", {"role": "infer"}),
        ("reward", "math_rule", {}),
    ]
    for kind, name, options in entries:
        registry.add(Registration(kind=kind, name=name, target=f"{MODULE}:estimate", plugin="cfgtest",
                                  options=options))
    registry.add(Registration(kind="env", name="frozen_lake", target=f"{MODULE}:GridEnv", plugin="cfgtest",
                              tags=("FrozenLake",)))
    registry.add(Registration(kind="env", name="sokoban", target=f"{MODULE}:BoxEnv", plugin="cfgtest",
                              tags=("SimpleSokoban",), options={"defaults": {"dim_room": [5, 5]}}))
    registry.add(Registration(kind="env", name="larger_sokoban", target=f"{MODULE}:BoxEnv", plugin="cfgtest",
                              tags=("LargerSokoban",),
                              options={"defaults": {"dim_room": [10, 10], "num_boxes": 2}}))
    registry.add(Registration(kind="env", name="sokoban_vocab", target=f"{MODULE}:BoxEnv", plugin="cfgtest",
                              tags=("SokobanDifferentGridVocab",)))
    return registry


#: calls of :func:`launch`, for ``roll run`` tests that point the CLI at this module as the pipeline
LAUNCHES: list[tuple[object, object]] = []


def launch(config, *, address=None):
    LAUNCHES.append((config, address))
    return 0
