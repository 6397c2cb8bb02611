"""Training pipelines on Ray; :func:`launch` is what ``roll run`` calls.

``launch`` starts a local Ray cluster (no dashboard), or joins the one at ``address`` /
``RAY_ADDRESS``, builds the pipeline class of the config's ``pipeline_type`` and runs it. Nothing
heavy is imported before a run starts, so ``roll --help`` and config checks stay fast.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from roll_core.errors import RollError

#: pipeline_type -> "module:Class"
PIPELINES: dict[str, str] = {
    "agentic": "roll_core.pipeline.agentic:AgenticPipeline",
    "rlvr": "roll_core.pipeline.rlvr:RLVRPipeline",
}


def pipeline_class(pipeline_type: str) -> Any:
    target = PIPELINES.get(pipeline_type)
    if target is None:
        raise RollError(
            f"This build of roll has no {pipeline_type!r} training pipeline (available: "
            f"{', '.join(PIPELINES)}). `roll config show CONFIG` still validates the config."
        )
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def launch(config: Any, address: str | None = None, *, stream=None) -> int:
    """Run ``config`` (a config or its resolved :class:`roll_core.config.Run`); returns an exit code.

    A local Ray cluster started here is shut down at the end, also on errors and Ctrl-C; a
    cluster that was joined is left running.
    """
    import ray

    from roll_core.config import Run, resolve

    run = config if isinstance(config, Run) else resolve(config)
    cls = pipeline_class(run.pipeline_type)
    started_here = False
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=True)
        else:
            ray.init(address="local", include_dashboard=False, log_to_driver=True,
                     num_cpus=max(os.cpu_count() or 1, 2))
            started_here = True
    pipeline = cls(run, stream=stream)
    try:
        return pipeline.run()
    finally:
        pipeline.shutdown()
        if started_here:
            ray.shutdown()
