"""roll plugin entry point: registers the ``frozen_lake`` env (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_envs(register):
    register(
        "frozen_lake",
        "roll_env_frozenlake.env:FrozenLakeEnv",
        tags=["FrozenLake"],
        description="Walk across a frozen lake to the goal without falling into a hole",
    )
