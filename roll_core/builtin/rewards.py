"""roll-core's built-in RLVR rewards, registered through the public hook."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_rewards(register):
    register("math_verify", "roll_core.rewards.math:math_verify_reward", tags=["math", "math_rule"],
             requires=["math-verify>=0.7"],
             description="1 if the final answer equals the reference mathematically (math-verify)")
    register("regex", "roll_core.rewards.format:regex_reward", tags=["format"],
             description="1 if the response matches a pattern (format reward)")
