"""Envs and agents built from a run's bindings: the :class:`~roll_core.run.Run` describes them,
this module makes them (an env manager builds each env of its groups here, ``preflight`` one of
each tag)."""

from __future__ import annotations

from typing import Any

from roll_core.envs.binding import build_env
from roll_core.run import AgentBinding, EnvBinding


def build(binding: EnvBinding | AgentBinding) -> Any:
    """A new env (:class:`~roll_core.envs.TextEnv`) or agent (:class:`~roll_core.rollout.agents.agent.Agent`)."""
    if isinstance(binding, AgentBinding):
        from roll_core.rollout.agents.agent import Agent

        return Agent.load(binding)
    return build_env(binding)
