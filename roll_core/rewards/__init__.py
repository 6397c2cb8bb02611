"""RLVR reward functions: ``reward(prompt, response, reference, **options) -> float``.

Rewards are plugins (hook ``roll_register_rewards``), chosen per data ``domain`` in the config.
Built-ins: ``math_verify`` (answer equivalence checked symbolically by the maintained
``math-verify`` package) and ``regex`` (a format reward: does the response match a pattern).
"""

from roll_core.rewards.format import regex_reward
from roll_core.rewards.math import math_verify_reward

__all__ = ["math_verify_reward", "regex_reward"]
