"""Training pipelines on Ray; :func:`launch` is what ``roll run`` calls.

``launch`` checks what the config cannot say about itself (:mod:`roll_core.pipeline.preflight`),
starts a private local Ray cluster (:func:`roll_core.cluster.start_ray`: loopback only, token
authentication, no dashboard) or joins the one at ``address`` / ``RAY_ADDRESS``, builds the
pipeline class of the config's ``pipeline_type`` and runs it. An error raised inside a Ray worker
reaches the caller as a one-paragraph :class:`RollError` (:func:`roll_core.cluster.worker_error`).
Nothing heavy is imported before a run starts, so ``roll --help`` and config checks stay fast.
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

    from roll_core.cluster import start_ray, worker_error
    from roll_core.config import Run, resolve
    from roll_core.pipeline.preflight import preflight

    run = config if isinstance(config, Run) else resolve(config)
    cls = pipeline_class(run.pipeline_type)
    preflight(run)
    started_here = start_ray(address, log_to_driver=True, num_cpus=max(os.cpu_count() or 1, 2),
                             worker_niceness=run.config.worker_niceness)
    pipeline = None
    try:
        pipeline = cls(run, stream=stream)
        return pipeline.run()
    except Exception as exc:
        error = worker_error(exc)
        if error is None:
            raise
        raise error from exc
    finally:
        if pipeline is not None:
            pipeline.shutdown()
        if started_here:
            ray.shutdown()
