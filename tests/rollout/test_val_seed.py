"""``val_seed``: runs of different seeds validate on the same env instances when it is set.

Without it (ROLL's behaviour) the validation instances follow ``seed``, so a comparison over seeds
mixes how well each policy plays with how hard its own validation maps happen to be.
"""

from __future__ import annotations

from roll_core.config import resolve, validate_config
from roll_core.rollout.engine.spec import episode_seed


def agentic(**extra):
    return validate_config({
        "sequence_length": 256, "pretrain": "roll-tiny", "rollout_batch_size": 4,
        "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 1, "group_size": 4},
        "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 8}, **extra})


def seeds(config, mode, registry):
    from roll_core.rollout.engine.spec_from_run import rollout_spec

    spec = rollout_spec(resolve(config, registry=registry, roles=()), mode)
    return [episode_seed(spec, group, 0) for group in range(8)]


def test_validation_instances_follow_seed_unless_val_seed_is_set(roll_registry):
    assert seeds(agentic(seed=1), "val", roll_registry) != seeds(agentic(seed=2), "val", roll_registry)
    fixed_1 = seeds(agentic(seed=1, val_seed=7), "val", roll_registry)
    assert fixed_1 == seeds(agentic(seed=2, val_seed=7), "val", roll_registry)
    assert fixed_1 == seeds(agentic(seed=7), "val", roll_registry)  # val_seed N validates as seed N does
    # training instances still follow the run's seed
    assert seeds(agentic(seed=1, val_seed=7), "train", roll_registry) == seeds(agentic(seed=1), "train", roll_registry)
    assert seeds(agentic(seed=1, val_seed=7), "train", roll_registry) != seeds(agentic(seed=2, val_seed=7), "train",
                                                                               roll_registry)
