"""From recorded calls to training samples, by token ids alone.

An agent episode is a sequence of calls, each with the exact prompt ids the model was conditioned
on and the completion ids it sampled. Calls are taken in order; a call whose prompt ids begin with
the whole token stream of an open sample (its prompts and completions so far) extends that sample
(the usual multi-turn case: one trajectory, as the env path builds it); any other call starts a
new sample, whose first prompt is its whole prompt (earlier completions in it are context, not
trained on again). So when the agent rewrote history (summarised, dropped or edited turns, or
branched), the episode splits into several samples, and every sampled token is trainable in
exactly one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Segment:
    """One call inside a sample: the prompt ids added before it, and the call itself."""

    prompt_ids: list[int]
    call: Any  # roll_core.gateway.session.Call (or anything with prompt_ids / completion_ids)


@dataclass
class Sample:
    segments: list[Segment] = field(default_factory=list)
    stream: list[int] = field(default_factory=list)

    def extend(self, call: Any) -> None:
        self.segments.append(Segment(list(call.prompt_ids[len(self.stream):]), call))
        self.stream = list(call.prompt_ids) + list(call.completion_ids)


def merge_calls(calls: Sequence[Any]) -> list[Sample]:
    """Samples of ``calls`` (in the given order; see the module docstring)."""
    samples: list[Sample] = []
    for call in calls:
        prompt = call.prompt_ids
        best: Sample | None = None
        for sample in samples:
            n = len(sample.stream)
            if n <= len(prompt) and (best is None or n > len(best.stream)) and list(prompt[:n]) == sample.stream:
                best = sample
        if best is None:
            best = Sample()
            samples.append(best)
        best.extend(call)
    return samples
