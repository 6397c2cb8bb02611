"""Built-in strategies of roll-core (registered through the public hooks).

``hf_train`` / ``hf_infer``: pure torch + transformers, CPU or GPU, the default backends and the
ones tests and the demo use. Targets are lazy ``"module:Class"`` strings: this module never
imports torch. ``hf_train`` also names its critic class in the ``critic`` option, so a config
whose critic says ``strategy_name: hf_train`` gets a value-head model (ROLL's convention).
"""

from roll_core.hookspecs import hookimpl

_REQUIRES = ("torch", "transformers", "safetensors")


@hookimpl
def roll_register_strategies(register):
    register(
        "hf_train",
        "roll_core.strategies.hf_train:HFTrainStrategy",
        role="train",
        critic="roll_core.strategies.critic:HFCriticStrategy",
        description="torch + transformers training (actor, reference, critic); CPU or GPU",
        requires=_REQUIRES,
    )
    register(
        "hf_infer",
        "roll_core.strategies.hf_infer:HFInferStrategy",
        role="infer",
        description="torch + transformers batched generation with KV cache; CPU or GPU",
        requires=_REQUIRES,
    )
