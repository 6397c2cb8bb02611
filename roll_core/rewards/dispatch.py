"""Per-domain reward dispatch of the RLVR pipeline: each data domain is scored by its registered function.

``rewards.<domain>.reward_type`` (default: the domain key) names a reward registered through the
``roll_register_rewards`` hook; :func:`roll_core.config.resolve` binds it, and the dispatcher loads
the bound registration (no name is looked up here). A domain's
``format_pattern`` is passed to its function as ``pattern`` (the ``regex`` reward's pattern), and
``response_length_penalty_coef`` subtracts ``coef * response tokens`` from the score (of every
sample, or with ``length_penalty_scope: paid`` of those scoring above 0).
``required_format`` combines a format with any reward: a response that does not match it keeps
``unformatted_credit`` of its score, so the format is paid only together with the answer (a second
domain paying for the format alone taught a small model bare *wrong* numbers: docs/learning.md).

A reward function that declares a ``row`` parameter also receives the dataset row's other
columns (e.g. ROLL's code ``test_cases`` / ``case_type`` for ``code_sandbox``).

A sample counts as *correct* when its reward function returned a positive value (before the
length penalty): for ``math_verify`` the answer is right, for ``regex`` the format is.

A registration may also name a *class* with ``from_reward_config(section, seed=...)`` (the
built-in ``llm_judge`` and ``reward_model``): it is built once per process that scores the domain
(the driver, or each rank of the domain's reward worker group) and then called like a function.
Its ``runs_in_workers(section)`` says whether the domain must be scored in a worker group (a
model to load) even without worker settings (:mod:`roll_core.rollout.rlvr.reward_scoring`).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roll_core.errors import RollError, did_you_mean
from roll_core.registry import Registration
from roll_core.rewards.failures import ERROR, RewardFailure

logger = logging.getLogger("roll.rewards")


@dataclass(frozen=True)
class DomainReward:
    name: str  # registered reward name
    fn: Any
    options: dict[str, Any] = field(default_factory=dict)
    length_penalty: float = 0.0
    wants_row: bool = False  # the function declares a ``row`` parameter
    penalise_paid_only: bool = False  # length_penalty_scope: paid
    required_format: re.Pattern[str] | None = None
    unformatted_credit: float = 1.0


class RewardDispatcher:
    """``score(domain, prompt, response, reference, response_tokens) -> (reward, correct)``."""

    def __init__(self, rewards: Mapping[str, Any], bound: Mapping[str, Registration], *, seed: int = 0,
                 services: Mapping[str, Any] | None = None):
        """``rewards``: the config's reward settings per domain (only the domains this process
        scores); ``bound``: the run's registrations (:attr:`roll_core.run.Run.rewards`);
        ``services``: what a reward worker gives reward classes (a judge model's ``generate``)."""
        self.domains: dict[str, DomainReward] = {}
        for domain, cfg in rewards.items():
            reg = bound[domain]
            options = {"pattern": cfg.format_pattern} if cfg.format_pattern else {}
            fn = build_reward(reg.load(), cfg, seed, **(services or {}))
            required = cfg.required_format
            self.domains[domain] = DomainReward(
                reg.name, fn, options, length_penalty=float(cfg.response_length_penalty_coef or 0.0),
                wants_row=_takes_row(fn), penalise_paid_only=cfg.length_penalty_scope == "paid",
                required_format=re.compile(required, re.DOTALL) if required else None,
                unformatted_credit=float(cfg.unformatted_credit) if required else 1.0)

    def score(self, domain: str, prompt: str, response: str, reference: str | None,
              response_tokens: int = 0, row: Mapping[str, Any] | None = None) -> tuple[float, bool]:
        spec = self.domains.get(domain)
        if spec is None:
            raise RollError(f"no reward for domain {domain!r}: the config's rewards define "
                            f"{', '.join(self.domains)}.{did_you_mean(domain, self.domains)}")
        extra = {"row": dict(row or {})} if spec.wants_row else {}
        raw = float(spec.fn(prompt, response, reference, **spec.options, **extra))
        paid = raw
        if spec.required_format is not None and not spec.required_format.search(response or ""):
            paid *= spec.unformatted_credit
        if paid > 0 or not spec.penalise_paid_only:
            paid -= spec.length_penalty * response_tokens
        return paid, raw > 0

    def score_checked(self, domain: str, prompt: str, response: str, reference: str | None,
                      response_tokens: int = 0, row: Mapping[str, Any] | None = None) -> tuple[float, bool, str]:
        """:meth:`score` that never raises for a sample: ``(0, False, reason)`` when it fails
        (a :class:`~roll_core.rewards.failures.RewardFailure`'s reason, else ``error``)."""
        if domain not in self.domains:  # a configuration error, not a sample's: raise
            self.score(domain, prompt, response, reference, response_tokens, row)
        try:
            reward, correct = self.score(domain, prompt, response, reference, response_tokens, row)
        except RewardFailure as exc:
            return 0.0, False, exc.reason
        except Exception as exc:
            logger.warning("reward %r failed on a sample (%s: %s); it scores 0", domain, type(exc).__name__, exc)
            return 0.0, False, ERROR
        return reward, correct, ""


def build_reward(obj: Any, section: Any, seed: int, **services: Any) -> Any:
    """The callable a registration names: a function as is, a reward class built from ``section``."""
    if isinstance(obj, type) and hasattr(obj, "from_reward_config"):
        return obj.from_reward_config(section, seed=seed, **services)
    return obj


def runs_in_workers(obj: Any, section: Any) -> bool:
    """Whether a reward (the loaded registration) must be scored by a worker group (it loads a model)."""
    check = getattr(obj, "runs_in_workers", None)
    return bool(check(section)) if check is not None else False


def _takes_row(fn: Any) -> bool:
    try:
        return "row" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C function: no row
        return False
