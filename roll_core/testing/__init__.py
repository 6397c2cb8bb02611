"""Helpers for plugin authors: :func:`check_env`, :func:`smoke_rollout` and :func:`check_strategy`.

Also a pytest plugin (:mod:`roll_core.testing.pytest_plugin`, auto-loaded through the ``pytest11``
entry point) with the fixtures ``roll_check_env``, ``roll_smoke_rollout`` and ``roll_registry``.
"""

from roll_core.testing.env_checks import EnvCheckError, EnvCheckReport, check_env, record_trajectory
from roll_core.testing.rollout import RolloutStats, smoke_rollout
from roll_core.testing.strategy_checks import StrategyCheckError, StrategyCheckReport, check_strategy

__all__ = ["EnvCheckError", "EnvCheckReport", "RolloutStats", "StrategyCheckError", "StrategyCheckReport",
           "check_env", "check_strategy", "record_trajectory", "smoke_rollout"]
