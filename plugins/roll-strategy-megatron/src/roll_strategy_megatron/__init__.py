"""roll's Megatron training backend (``strategy_name: megatron_train``).

Importing this package is cheap; :mod:`roll_strategy_megatron.strategy` imports megatron-core.
:mod:`roll_strategy_megatron.conversion` (HF Qwen2 <-> Megatron weights) needs only torch.
"""
