"""roll-core's built-in group filters (agentic dynamic sampling), registered through the public hook."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_group_filters(register):
    register("equal_returns", "roll_core.rollout.engine.group_filters:EqualReturns", tags=["EqualReturnsFilter"],
             description="Drop groups whose episodes all earned the same return (zero GRPO advantage)")
    register("equal_success", "roll_core.rollout.engine.group_filters:EqualSuccess",
             description="Drop groups whose episodes all succeeded or all failed (for shaped rewards)")
    register("keep_all", "roll_core.rollout.engine.group_filters:KeepAll", tags=["GroupFilter"],
             description="Keep every group (ROLL's default GroupFilter)")
