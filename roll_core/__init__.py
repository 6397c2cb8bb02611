"""roll: reinforcement learning for LLM agents, pip-installable and plugin-based.

The top-level package stays import-light: nothing here imports torch or ray.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("roll-core")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"
