"""Sokoban for roll. The env lives in :mod:`roll_env_sokoban.env`; this package's import stays
empty so that loading the plugin entry point costs nothing."""

__version__ = "0.1.0"
