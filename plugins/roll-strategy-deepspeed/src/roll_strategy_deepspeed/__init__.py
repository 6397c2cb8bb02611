"""roll's DeepSpeed training backend (``strategy_name: deepspeed_train``).

Importing this package is cheap; :mod:`roll_strategy_deepspeed.strategy` imports DeepSpeed.
"""
