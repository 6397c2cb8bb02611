"""RLVR reward functions: ``reward(prompt, response, reference, **options) -> float``.

Rewards are plugins (hook ``roll_register_rewards``), chosen per data ``domain`` in the config.
Built-ins: ``math_verify`` (answer equivalence checked symbolically by the maintained
``math-verify`` package), ``regex`` (a format reward: does the response match a pattern) and
``code_sandbox`` (the response's code against the row's tests, in :mod:`roll_core.sandbox`),
``llm_judge`` (:mod:`roll_core.rewards.judge`), ``reward_model``
(:mod:`roll_core.rewards.reward_model`) and ``generative_reward_model``
(:mod:`roll_core.rewards.generative_rm`): classes built once per scoring process. A reward that
cannot score a sample raises :class:`~roll_core.rewards.failures.RewardFailure` (counted, scored 0).
"""

from roll_core.rewards.code import code_sandbox_reward, score_code
from roll_core.rewards.format import regex_reward
from roll_core.rewards.math import math_verify_reward

__all__ = ["code_sandbox_reward", "math_verify_reward", "regex_reward", "score_code"]
