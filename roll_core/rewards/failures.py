"""Why a sample could not be scored: the reason it is counted under, its reward is 0.

A reward function raises :class:`RewardFailure` when it cannot score a response for a reason
worth counting (a judge's verdict that does not parse, a reward server that does not answer);
any other exception is counted as ``error``, and a scorer past its time limit as ``timeout``
(:mod:`roll_core.rollout.rlvr.reward_scoring`). The rollout never stops for one sample.
"""

from __future__ import annotations


class RewardFailure(Exception):
    """A response the reward could not score; ``reason`` names the metric it is counted under."""

    def __init__(self, reason: str, message: str = ""):
        self.reason = reason
        super().__init__(message or reason)


#: a scorer raised something other than RewardFailure
ERROR = "error"
#: a scorer did not answer within the domain's ``score_timeout``
TIMEOUT = "timeout"
#: the reward worker process died while scoring
WORKER_LOST = "worker_lost"
