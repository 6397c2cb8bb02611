"""Run untrusted commands isolated: no network, a fresh work directory, limits, a clean environment.

The API (docs/sandbox.md has the guarantees and why this mechanism):

- :class:`Sandbox` -- a work directory seeded with files; ``run(command)`` many times in it.
- :func:`run_sandboxed` -- one command in a fresh directory.
- :class:`Limits` -- wall/CPU time, memory, processes, output, file size per run.
- :class:`Result` -- ``reason`` (one of :data:`REASONS`), exit status, truncated output.
- :func:`check_available` -- the mode that will run, or :class:`SandboxUnavailable` saying how to fix it.
- :func:`python_executable` -- an interpreter the sandbox can run, with the paths it needs.
"""

from roll_core.sandbox.limits import CODE_LIMITS, REASONS, Limits, Result
from roll_core.sandbox.runner import (
    MODES,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    check_available,
    python_executable,
    run_sandboxed,
)

__all__ = ["CODE_LIMITS", "MODES", "REASONS", "Limits", "Result", "Sandbox", "SandboxError", "SandboxUnavailable",
           "check_available", "python_executable", "run_sandboxed"]
