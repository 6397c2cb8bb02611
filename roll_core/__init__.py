"""roll: reinforcement learning for LLM agents, pip-installable and plugin-based.

The top-level package stays import-light: nothing here imports torch or ray. Plugin authors
mark their hook implementations with ``from roll_core import hookimpl``.
"""

from importlib.metadata import PackageNotFoundError, version

from roll_core.hookspecs import hookimpl

try:
    __version__ = version("roll-core")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

__all__ = ["__version__", "hookimpl"]
