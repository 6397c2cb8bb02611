"""Training pipelines on Ray; :func:`launch` is what ``roll run`` calls.

``launch`` checks what the config cannot say about itself (:mod:`roll_core.pipeline.preflight`),
starts a private local Ray cluster (:func:`roll_core.distributed.cluster.start_ray`: loopback only, token
authentication, no dashboard) or joins the one at ``address`` / ``RAY_ADDRESS``, builds the
pipeline class of the config's ``pipeline_type`` and runs it. An error raised inside a Ray worker
reaches the caller as a one-paragraph :class:`RollError` (:func:`roll_core.distributed.cluster.worker_error`).
Nothing heavy is imported before a run starts, so ``roll --help`` and config checks stay fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from roll_core.errors import RollError
from roll_core.registry import import_target

if TYPE_CHECKING:
    from roll_core.run import Run

#: pipeline_type -> "module:Class"
PIPELINES: dict[str, str] = {
    "agentic": "roll_core.pipeline.agentic_pipeline:AgenticPipeline",
    "rlvr": "roll_core.pipeline.rlvr_pipeline:RLVRPipeline",
}


def pipeline_class(pipeline_type: str) -> Any:
    target = PIPELINES.get(pipeline_type)
    if target is None:
        raise RollError(
            f"This build of roll has no {pipeline_type!r} training pipeline (available: "
            f"{', '.join(PIPELINES)}). `roll config show CONFIG` still validates the config."
        )
    return import_target(target)


def launch(run: Run, address: str | None = None, *, stream=None) -> int:
    """Run ``run`` (a config resolved by :func:`roll_core.config.resolve`); returns an exit code.

    A local Ray cluster started here is shut down at the end, also on errors and Ctrl-C; a
    cluster that was joined is left running.
    """
    import ray

    from roll_core.distributed.cluster import start_ray, worker_error
    from roll_core.pipeline.preflight import preflight

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
