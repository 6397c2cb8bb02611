"""Helpers for plugin authors: :func:`check_env`, :func:`smoke_rollout`, :func:`check_strategy`,
:func:`check_reward`, :func:`check_agent` (and :func:`play_agent`, an agent's episodes played by its
expert), :func:`check_grid_tokens` (a text grid keeps its shape in a tokenizer's tokens), and
:class:`FaultyEnv` (an env that raises, hangs or returns garbage in a configurable share of its calls).

Also a pytest plugin (:mod:`roll_core.testing.pytest_plugin`, auto-loaded through the ``pytest11``
entry point) with the fixtures ``roll_check_env``, ``roll_check_agent``, ``roll_check_strategy``,
``roll_check_reward``,
``roll_smoke_rollout`` and ``roll_registry``.
"""

from roll_core.testing.agent_checks import AgentCheckError, AgentCheckReport, check_agent, play_agent
from roll_core.testing.env_checks import EnvCheckError, EnvCheckReport, check_env, record_trajectory
from roll_core.testing.faults import FaultConfig, FaultyEnv, InjectedFault
from roll_core.testing.grid_tokens import GridTokensError, check_grid_tokens
from roll_core.testing.reward_checks import RewardCheckError, RewardCheckReport, check_reward
from roll_core.testing.rollout import RolloutStats, smoke_rollout
from roll_core.testing.strategy_checks import StrategyCheckError, StrategyCheckReport, check_strategy

__all__ = ["AgentCheckError", "AgentCheckReport", "EnvCheckError", "EnvCheckReport", "FaultConfig", "FaultyEnv",
           "GridTokensError", "InjectedFault", "RewardCheckError", "RewardCheckReport", "RolloutStats",
           "StrategyCheckError", "StrategyCheckReport", "check_agent", "check_env", "check_grid_tokens", "check_reward",
           "check_strategy", "play_agent", "record_trajectory", "smoke_rollout"]
