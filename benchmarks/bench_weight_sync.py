"""Weight sync time: Ray's object store against the handoff (shared memory on CPU, CUDA IPC on one GPU).

One ``actor_train`` rank (:class:`TrainWorker`) and one inference worker (:class:`InferWorker`),
real Ray actors on this node (on CUDA both on the same GPU, as colocated roles are); a sync is the
trainer's ``export_weights_ref`` then the engine's ``load_weights``, timed from the driver, as the
pipeline's ``sync_weights`` runs them (without the colocated offload/reload around them). Each
repeat times the object store, then the handoff (interleaved, the same load); the engine reports
which transport it used.

Usage: python benchmarks/bench_weight_sync.py --model /tmp/qwen25-05b-shaped [--repeats 3] [--dtype bf16]
(``python benchmarks/gpu_check.py model --out DIR`` builds the 0.5B-shaped model; ``--quick``: roll-tiny)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import measure

DEMO = Path(__file__).resolve().parents[1] / "examples" / "frozen_lake" / "grpo.yaml"


def measure_sync(model: str, dtype: str, repeats: int, gpu_share: float = 0.0) -> dict:
    """Seconds per sync through each path (``gpu_share``: each actor's ``num_gpus``, 0 on CPU)."""
    import ray

    from roll_core.config import load_config, resolve
    from roll_core.workers.infer_worker import InferWorker
    from roll_core.workers.train_worker import TrainWorker

    run = resolve(load_config(str(DEMO), [f"pretrain={model}", f"actor_train.model_args.dtype={dtype}",
                                          f"actor_infer.model_args.dtype={dtype}",
                                          "logging_dir=/tmp/roll_bench_sync", "output_dir=/tmp/roll_bench_sync"]))
    options = {"num_cpus": 0, "num_gpus": gpu_share}
    trainer = ray.remote(TrainWorker).options(**options).remote(run, "actor_train", num_training_steps=1)
    engine = ray.remote(InferWorker).options(**options, max_concurrency=2).remote(
        run.strategy("actor_infer"), run.config.actor_infer, run.model_path("actor_infer"), seed=int(run.config.seed),
        plugins=dict(run.plugins))
    try:
        ready = ray.get(trainer.ready.remote())
        target = ray.get(engine.locality.remote())
        counts = ready["parameters"]
        out: dict = {"params_m": round(counts[1] / 1e6, 1) if counts else None, "engine": str(target),
                     "trainer": str(ray.get(trainer.locality.remote())), "runs": []}
        version = 0
        for i in range(repeats + 1):  # the first pair warms up (and creates the handoff's buffers)
            row = {}
            for name, targets in (("object_store", None), ("handoff", [target])):
                version += 1
                started = time.perf_counter()
                refs = ray.get(trainer.export_weights_ref.remote(targets=targets))
                used = ray.get(engine.load_weights.remote(refs[0], version))
                row[f"{name}_s"] = time.perf_counter() - started
                if name == "handoff":
                    row["transport"] = used
                del refs
            if i:
                out["runs"].append(row)
            print(f"  sync {'warm-up' if i == 0 else f'run {i}/{repeats}'}: " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
        return out
    finally:
        ray.get(trainer.close_handoff.remote())
        ray.kill(trainer)
        ray.kill(engine)


def main() -> None:
    p = measure.parser(__doc__.split("\n\n")[0], repeats=3)
    p.add_argument("--model", default="roll-tiny")
    p.add_argument("--dtype", default="bf16")
    args = p.parse_args()
    if args.quick:
        args.model, args.repeats = "roll-tiny", 1
    measure.setup_env()
    results = measure.print_header(f"weight sync: object store / handoff ({args.model}, {args.dtype})", args)
    measure.start_ray()
    out = measure_sync(args.model, args.dtype, args.repeats)
    results.update({k: v for k, v in out.items() if k != "runs"})
    results["load_average_1m_end"] = os.getloadavg()[0]
    runs = out["runs"]
    print(f"   transports used: {sorted({r['transport'] for r in runs})}; load {os.getloadavg()[0]:.1f} at the end")
    measure.report(results, "object store sync", measure.column(runs, "object_store_s"), "s")
    measure.report(results, "handoff sync", measure.column(runs, "handoff_s"), "s")
    measure.report(results, "object store / handoff",
                   measure.ratios(measure.column(runs, "object_store_s"), measure.column(runs, "handoff_s")), ratio=True)
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
