"""roll's vLLM inference backend (``strategy_name: vllm``).

Importing this package is cheap; :mod:`roll_strategy_vllm.strategy` imports vLLM.
"""
