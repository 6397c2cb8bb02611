"""An inference worker without Ray, for tests of the generate scheduler against a real strategy.

:class:`ThreadWorker` gives a strategy the method surface the
:class:`~roll_core.workers.generate_scheduler.GenerateScheduler` calls on an ``InferWorker`` actor
(``generate``, ``abort``, ``load_weights``, each ``.remote(...)`` returning an awaitable), running
each call in a thread of its own: an abort arrives while ``generate`` runs, as it does on the Ray
actor with ``max_concurrency > 1``. The partial-rollout tests of ``hf_infer`` and of the vLLM
plugin use it, so both strategies are driven through the same scheduler code.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class _Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return asyncio.ensure_future(asyncio.to_thread(self.fn, *args))


class ThreadWorker:
    """``strategy`` behind the scheduler's worker interface; ``aborted`` is set by the first abort."""

    def __init__(self, strategy: Any):
        self.strategy = strategy
        self.aborted = threading.Event()
        self.generate = _Method(strategy.generate)
        self.load_weights = _Method(strategy.load_weights)
        self.abort = _Method(self._abort)

    def _abort(self, ids):
        self.strategy.abort(ids)
        self.aborted.set()
