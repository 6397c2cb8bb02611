"""roll plugin entry point: registers ``deepspeed_train`` (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_strategies(register):
    register(
        "deepspeed_train",
        "roll_strategy_deepspeed.strategy:DeepSpeedTrainStrategy",
        description="DeepSpeed training: ZeRO stages 0-3, CPU offload, bf16/fp16 (CPU with gloo, or CUDA)",
        requires=("deepspeed==0.19.8",),
        role="train",
        needs_gpu=False,
    )
