"""Kept for imports written before issue 30: the messages of invalid input live in :mod:`roll_core.validation`
(below every layer that validates user input, so that envs and plugins can use it without the config schema)."""

from roll_core.validation import (  # noqa: F401
    ConfigWarning,
    config_error,
    describe,
    format_path,
    is_model,
    problems_message,
    unwrap,
    walk,
    warn,
)
