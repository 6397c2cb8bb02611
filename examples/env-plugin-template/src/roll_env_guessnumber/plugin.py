"""The plugin's entry point (``[project.entry-points.roll]`` in pyproject.toml).

Registration only: the env is named by its import path and imported when a config selects it, so
loading this module costs nothing and never imports torch, ray or the env itself.
"""

from roll_core import hookimpl


@hookimpl
def roll_register_envs(register):
    register(
        "guess_number",  # what `env_type:` selects
        "roll_env_guessnumber.env:GuessNumberEnv",
        tags=["GuessNumber"],  # what `tags:` / `roll env play` can select it by too
        description="Find a hidden number from higher/lower hints",
    )
