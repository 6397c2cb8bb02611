"""The one message a run stops with when it lost ranks (a node gone, an actor killed).

Whatever was lost -- training ranks, which cannot be replaced mid-step, or the last inference
worker -- the user reads one paragraph: every lost rank with its role, node id and IP, the step the
run stopped at, the last checkpoint and the exact command that continues from it (the run's own
command line, with ``resume_from_checkpoint`` set). Ray's text is cleaned for it: no colour codes,
no doubled periods.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RESUME_KEY = "resume_from_checkpoint"


@dataclass(frozen=True)
class LostRank:
    """A rank whose actor is gone."""

    role: str
    rank: int
    node_id: str
    node_ip: str
    cause: str

    def describe(self) -> str:
        node = f"node {self.node_id[:12]} ({self.node_ip})" if self.node_id else f"node {self.node_ip}"
        return f"{self.role} rank {self.rank} on {node}: {clean(self.cause)}"


def clean(text: str) -> str:
    """One line of Ray's error text: colour codes removed, no trailing period (the message adds its own)."""
    lines = _ANSI.sub("", str(text)).strip().splitlines()
    return (lines[0] if lines else "").strip().rstrip(".").strip()


def resume_command(argv: Sequence[str] | None, checkpoint: str) -> str:
    """The command that started the run, its overrides kept, ``resume_from_checkpoint`` set to ``checkpoint``.

    ``argv`` is the CLI's own (``run CONFIG key=value ... --address ADDR``); without it (the Python
    API) the advice names ``CONFIG`` and says to repeat the overrides.
    """
    resume = f"{RESUME_KEY}={checkpoint}"
    if not argv:
        return shlex.join(["roll", "run", "CONFIG"]) + f" {shlex.quote(resume)} (with the run's overrides)"
    kept = [a for a in argv if not a.lstrip("+~").startswith(f"{RESUME_KEY}=")]
    return shlex.join(["roll", *kept, resume])


def stop_message(lost: Sequence[LostRank], *, step: int, why: str, checkpoint: tuple[int, str] | None,
                 argv: Sequence[str] | None) -> str:
    """The paragraph the run stops with; ``checkpoint`` is ``(step, path)`` of the last one, or None."""
    ranks = "; ".join(r.describe() for r in sorted(lost, key=lambda r: (r.role, r.rank)))
    count = f"{len(lost)} rank{'s' if len(lost) != 1 else ''}"
    text = f"the run lost {count} and stops at step {step} ({clean(why)}). Lost: {ranks}."
    if checkpoint is None:
        return text + " No checkpoint was saved yet; start the run again (save_steps sets how often it saves)."
    return text + f" Continue from the last checkpoint (step {checkpoint[0]}) with: " \
                  f"{resume_command(argv, checkpoint[1])}"
