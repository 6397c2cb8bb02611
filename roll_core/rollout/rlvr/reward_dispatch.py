"""Per-domain reward dispatch of the RLVR pipeline: each data domain is scored by its registered function.

``rewards.<domain>.reward_type`` (default: the domain key) names a reward registered through the
``roll_register_rewards`` hook; :func:`roll_core.config.resolve` binds it, and the dispatcher loads
the bound registration (no name is looked up here). A domain's
``format_pattern`` is passed to its function as ``pattern`` (the ``regex`` reward's pattern), and
``response_length_penalty_coef`` subtracts ``coef * response tokens`` from the score.

A reward function that declares a ``row`` parameter also receives the dataset row's other
columns (e.g. ROLL's code ``test_cases`` / ``case_type`` for ``code_sandbox``).

A sample counts as *correct* when its reward function returned a positive value (before the
length penalty): for ``math_verify`` the answer is right, for ``regex`` the format is.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roll_core.errors import RollError, did_you_mean
from roll_core.registry import Registration


@dataclass(frozen=True)
class DomainReward:
    name: str  # registered reward name
    fn: Any
    options: dict[str, Any] = field(default_factory=dict)
    length_penalty: float = 0.0
    wants_row: bool = False  # the function declares a ``row`` parameter


class RewardDispatcher:
    """``score(domain, prompt, response, reference, response_tokens) -> (reward, correct)``."""

    def __init__(self, rewards: Mapping[str, Any], bound: Mapping[str, Registration]):
        """``rewards``: the config's reward settings per domain; ``bound``: the run's registrations
        (:attr:`roll_core.run.Run.rewards`)."""
        self.domains: dict[str, DomainReward] = {}
        for domain, cfg in rewards.items():
            reg = bound[domain]
            options = {"pattern": cfg.format_pattern} if cfg.format_pattern else {}
            fn = reg.load()
            self.domains[domain] = DomainReward(reg.name, fn, options, float(cfg.response_length_penalty_coef or 0.0),
                                                _takes_row(fn))

    def score(self, domain: str, prompt: str, response: str, reference: str | None,
              response_tokens: int = 0, row: Mapping[str, Any] | None = None) -> tuple[float, bool]:
        spec = self.domains.get(domain)
        if spec is None:
            raise RollError(f"no reward for domain {domain!r}: the config's rewards define "
                            f"{', '.join(self.domains)}.{did_you_mean(domain, self.domains)}")
        extra = {"row": dict(row or {})} if spec.wants_row else {}
        raw = float(spec.fn(prompt, response, reference, **spec.options, **extra))
        return raw - spec.length_penalty * response_tokens, raw > 0


def _takes_row(fn: Any) -> bool:
    try:
        return "row" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C function: no row
        return False
