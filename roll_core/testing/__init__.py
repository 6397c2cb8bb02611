"""Helpers for env plugin authors: :func:`check_env` and :func:`smoke_rollout`.

Also a pytest plugin (:mod:`roll_core.testing.pytest_plugin`, auto-loaded through the ``pytest11``
entry point) with the fixtures ``roll_check_env``, ``roll_smoke_rollout`` and ``roll_registry``.
"""

from roll_core.testing.env_checks import EnvCheckError, EnvCheckReport, check_env, record_trajectory
from roll_core.testing.rollout import RolloutStats, smoke_rollout

__all__ = ["EnvCheckError", "EnvCheckReport", "RolloutStats", "check_env", "record_trajectory", "smoke_rollout"]
