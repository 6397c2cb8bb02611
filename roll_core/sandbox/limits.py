"""What one sandboxed command may use, and why each run ended."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Limits:
    """Per-run limits. ``None`` leaves one unlimited (``wall_s`` always applies).

    ``memory_mb`` caps the address space (``RLIMIT_AS``): a program that asks for more gets an
    allocation error (Python: ``MemoryError``), it is not killed. ``processes`` caps the processes
    of the sandbox's own user id (``RLIMIT_NPROC``): ``fork`` fails beyond it. ``cpu_s`` is per
    process (``RLIMIT_CPU``); ``wall_s`` bounds the whole run, every process included.
    ``output_bytes`` is per stream (stdout, stderr): the run is stopped when one passes it and the
    output is kept truncated. ``tmp_mb`` sizes the private ``/tmp`` (and ``/dev/shm``).
    """

    wall_s: float = 10.0
    cpu_s: int | None = 10
    memory_mb: int | None = 512
    processes: int | None = 64
    output_bytes: int = 256 << 10
    file_size_mb: int | None = 64
    open_files: int | None = 256
    tmp_mb: int = 64

    def __post_init__(self) -> None:
        if self.wall_s <= 0:
            raise ValueError(f"Limits.wall_s must be positive, got {self.wall_s}")
        for name in ("cpu_s", "memory_mb", "processes", "file_size_mb", "open_files"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"Limits.{name} must be at least 1 (or None for no limit), got {value}")
        if self.output_bytes < 1 or self.tmp_mb < 1:
            raise ValueError("Limits.output_bytes and Limits.tmp_mb must be at least 1")

    def with_(self, **changes: Any) -> Limits:
        return replace(self, **changes)

    def for_launcher(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k in ("cpu_s", "memory_mb", "processes", "file_size_mb",
                                                                "open_files")}


#: limits for one test of a model's program (the code reward's and the sandbox service's default)
CODE_LIMITS = Limits(wall_s=10, cpu_s=5, memory_mb=512, processes=16, output_bytes=64 << 10)

#: why a run ended, in the order the runner decides it (``Result.reason``); counted by callers
REASONS = (
    "ok",            # exit status 0
    "exit_nonzero",  # the program exited with another status
    "timeout",       # wall_s passed: everything in the sandbox was killed
    "cpu_limit",     # killed for CPU time (SIGXCPU / SIGKILL at cpu_s)
    "memory_limit",  # an allocation failed at memory_mb (MemoryError, ENOMEM, bad_alloc in stderr)
    "output_limit",  # stdout or stderr passed output_bytes: stopped, output kept truncated
    "signal",        # killed by another signal (e.g. SIGSEGV)
)

#: stderr fragments that mean an allocation hit ``memory_mb``
MEMORY_ERRORS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


@dataclass
class Result:
    """One sandboxed run: its streams (decoded, possibly truncated), status and why it ended."""

    reason: str
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    truncated: bool
    wall_s: float
    cpu_s: float | None = None
    mode: str = ""
    notes: list[str] = field(default_factory=list)
    wall_limit_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def summary(self) -> str:
        """One line for logs and observations: ``exit 1``, ``timeout after 2.0 s``, ..."""
        if self.reason == "timeout":
            return f"timeout after {self.wall_limit_s or self.wall_s:.1f} s"
        if self.signal is not None:
            return f"{self.reason} (signal {self.signal})"
        return f"exit {self.exit_code}" + ("" if self.reason in ("ok", "exit_nonzero") else f" ({self.reason})")
