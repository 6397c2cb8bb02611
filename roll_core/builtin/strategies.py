"""Built-in strategies of roll-core (registered through the public hooks)."""

from roll_core.hookspecs import hookimpl  # noqa: F401  (implementations are added by their issue)
