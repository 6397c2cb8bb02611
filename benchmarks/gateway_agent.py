"""The agent of bench_gateway.py: examples/agents' FrozenLake agent, with an expert that reads its live game.

The benchmark plays the same moves on both paths at the same cost: the env path's scripted policy
asks the env's solver, and this agent's expert asks the solver of the game the agent is playing
(shared through a dict in the env-manager process) instead of replaying the game from the seed.
Registered as a plugin module (``PluginManager(extra_modules=["gateway_agent"])``); the benchmarks
directory is on the Ray workers' PYTHONPATH (``measure.setup_env``).
"""

from __future__ import annotations

from roll_agent_examples import frozen_lake
from roll_env_frozenlake.env import FrozenLakeEnv

from roll_core.hookspecs import hookimpl

GAMES: dict[tuple, FrozenLakeEnv] = {}


def _key(task) -> tuple:
    return (task.mode, task.group_id, task.episode_id, task.member)


async def play(task, client) -> dict:
    game = GAMES[_key(task)] = FrozenLakeEnv(task.config)
    try:
        return await frozen_lake.play(task, client, game=game)
    finally:
        GAMES.pop(_key(task), None)


def expert(task, messages, tools) -> str:
    game = GAMES[_key(task)]
    plan = game.solve()
    return game.parser.format(plan[0] if plan else "Left")


@hookimpl
def roll_register_agents(register):
    register("bench_lake_agent", "gateway_agent:play", expert="gateway_agent:expert",
             config_model="roll_agent_examples.frozen_lake:AgentConfig",
             description="FrozenLake agent whose expert reads its live game (bench_gateway.py)")
