"""roll plugin entry point: registers the ``terminal`` env (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_envs(register):
    register(
        "terminal",
        "roll_env_terminal.env:TerminalEnv",
        tags=["Terminal"],
        description="Solve small tasks in a sandboxed Linux shell: one command per turn, then submit",
    )
    register(
        "terminal_easy",
        "roll_env_terminal.env:TerminalEnv",
        tags=["TerminalEasy"],
        defaults={"tiers": [1], "max_steps": 4},
        description="The terminal env's tier 1 tasks only (one command answers them)",
    )
