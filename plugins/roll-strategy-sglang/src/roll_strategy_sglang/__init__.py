"""roll's SGLang inference backend (``strategy_name: sglang``, CUDA only).

Importing this package is cheap; :mod:`roll_strategy_sglang.strategy` imports SGLang.
"""
