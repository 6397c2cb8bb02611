"""roll plugin entry point: registers ``megatron_train`` (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_strategies(register):
    register(
        "megatron_train",
        "roll_strategy_megatron.strategy:MegatronTrainStrategy",
        description="Megatron-core training: tensor/pipeline/expert parallel, distributed optimizer (CUDA)",
        requires=("megatron-core>=0.16.1,<0.17",),
        role="train",
        needs_gpu=True,
    )
