"""roll plugin entry point: registers the ``sglang`` infer strategy (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_strategies(register):
    register(
        "sglang",
        "roll_strategy_sglang.strategy:SGLangInferStrategy",
        description="SGLang generation: continuous batching, log-probs, weight sync, memory release (CUDA)",
        requires=("roll-strategy-sglang[gpu]",),
        role="infer",
        needs_gpu=True,
    )
