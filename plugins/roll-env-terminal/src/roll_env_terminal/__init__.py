"""roll-env-terminal: multi-turn shell tasks in roll's sandbox (see README.md)."""
