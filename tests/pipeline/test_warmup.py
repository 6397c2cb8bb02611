"""The warm start's pure helpers: ungrouped demonstrations and the solver schedule."""

from __future__ import annotations

from pipeline_helpers import EXAMPLES

from roll_core.config import load_config
from roll_core.pipeline.warmup import demonstration_config, solver_step


def test_demonstrations_play_one_instance_per_env():
    config = load_config(str(EXAMPLES / "sokoban" / "starpo.yaml"), [
        "train_env_manager.num_env_groups=4", "train_env_manager.group_size=8",
        "train_env_manager.group_size_redundancy=2", "+train_env_manager.num_groups_partition=[3,1]",
        "train_env_manager.tags=[SimpleSokoban,LargerSokoban]"])
    manager = demonstration_config(config).train_env_manager
    assert (manager.num_env_groups, manager.group_size, manager.group_size_redundancy) == (32, 1, 0)
    assert manager.num_groups_partition == [24, 8]  # each tag keeps its share of the envs
    assert config.train_env_manager.group_size == 8  # the run's own config is untouched


def test_solver_steps_are_spread_evenly():
    assert [solver_step(s, 0.25) for s in range(8)] == [False, False, False, True] * 2
    assert sum(solver_step(s, 0.5) for s in range(10)) == 5
    assert not any(solver_step(s, 0.0) for s in range(10))
