"""Worker groups on one machine: data-parallel training, several inference workers, weight sync.

Three figures, each measured in one run against its own baseline:

1. **Training scaling**: train tokens/s of ``actor_train`` with 2 ranks / 1 rank (``hf_train``, one
   torch thread per rank, the same global batch and mini-batch), through roll's ``TrainGroup``.
2. **Inference scaling**: generated tokens/s of 2 ``hf_infer`` workers / 1 behind the generation
   scheduler, many requests at once (one torch thread per worker).
3. **Weight sync**: seconds to load new weights into 1, 2 and 4 inference workers from a train
   group's ``export_weights_ref`` (the weights go through the object store, never the driver),
   for two model sizes; the figure is the time with N workers / with 1.

Usage: python benchmarks/bench_distributed.py [--repeats 3] [--quick]
"""

from __future__ import annotations

import tempfile
import time

import measure


def config_run(tmp: str, *, world_size: int = 1, infer_workers: int = 1, model: str = "roll-tiny",
               per_device: int = 8, batch: int = 32):
    from roll_core.config import load_config, resolve

    overrides = [f"logging_dir={tmp}/logs", f"output_dir={tmp}/ckpt", f"pretrain={model}",
                 f"+actor_train.world_size={world_size}", f"+actor_infer.world_size={infer_workers}",
                 f"actor_train.training_args.per_device_train_batch_size={per_device}",
                 f"actor_train.training_args.gradient_accumulation_steps={max(1, batch // (per_device * world_size))}",
                 "actor_train.training_args.learning_rate=1e-5", f"rollout_batch_size={batch}",
                 "train_env_manager.num_env_groups=4", f"train_env_manager.group_size={batch // 4}"]
    return resolve(load_config(str(measure.ROOT / "examples" / "frozen_lake" / "grpo.yaml"), overrides))


def placement_for(run, roles):
    from roll_core.distributed.layout import build_layout
    from roll_core.distributed.placement import Placement

    return Placement.create(build_layout(run.config, roles, on_gpus=False))


def train_batch(rows: int, width: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 250, (rows, width), generator=g)
    attention = torch.ones(rows, width, dtype=torch.long)
    response = attention.clone()
    response[:, : width // 2] = 0
    return {"input_ids": ids, "attention_mask": attention, "response_mask": response,
            "advantages": torch.randn(rows, width - 1, generator=g), "scores": torch.randn(rows, generator=g)}


def train_tokens_per_s(tmp: str, world_size: int, args) -> float:
    from roll_core.workers.train_group import TrainGroup

    run = config_run(tmp, world_size=world_size, per_device=args.micro, batch=args.rows)
    placement = placement_for(run, ["actor_train"])
    group = TrainGroup(run, "actor_train", placement, num_training_steps=100, num_threads=1)
    try:
        batch = train_batch(args.rows, args.width)
        group.train_actor(batch, epochs=1, shuffle_seed=0)  # warm-up
        started = time.perf_counter()
        for step in range(args.steps):
            group.train_actor(batch, epochs=1, shuffle_seed=step)
        return args.steps * args.rows * args.width / (time.perf_counter() - started)
    finally:
        group.shutdown()
        placement.remove()


def infer_tokens_per_s(tmp: str, workers: int, args) -> float:
    import ray

    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.workers.infer_group import start_generation

    run = config_run(tmp, infer_workers=workers)
    generation = start_generation(run, num_workers=workers, options={"num_cpus": 0},
                                  max_batch_size=args.requests // workers, num_threads=1)
    try:
        params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=1)
        requests = [GenerationRequest(f"r{i}", [5 + (i * 7 + j) % 200 for j in range(args.prompt)], params,
                                      route_key=f"env{i}") for i in range(args.requests)]
        ray.get([generation.scheduler.generate.remote(r) for r in requests[: workers * 2]])  # warm-up
        started = time.perf_counter()
        outs = ray.get([generation.scheduler.generate.remote(r) for r in requests])
        return sum(len(o.token_ids) for o in outs) / (time.perf_counter() - started)
    finally:
        generation.shutdown()


def sync_seconds(tmp: str, workers: int, model: str, args) -> float:
    from roll_core.workers.infer_group import start_generation
    from roll_core.workers.train_group import TrainGroup

    run = config_run(tmp, model=model)
    placement = placement_for(run, ["actor_train"])
    group = TrainGroup(run, "actor_train", placement, num_training_steps=10, num_threads=1)
    generation = start_generation(run, num_workers=workers, options={"num_cpus": 0}, num_threads=1)
    try:
        times = []
        for version in range(1, args.syncs + 2):
            started = time.perf_counter()
            generation.update_weights(group.export_weights_ref(), version)
            times.append(time.perf_counter() - started)
        return min(times[1:])  # the first sync also warms the path up
    finally:
        generation.shutdown()
        group.shutdown()
        placement.remove()


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--micro", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--syncs", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.rows, args.micro, args.width, args.steps, args.requests, args.new_tokens, args.syncs = 8, 2, 32, 1, 8, 4, 1
    measure.setup_env()
    measure.start_ray(num_cpus=4)
    results = measure.print_header("worker groups: data-parallel training, inference workers, weight sync", args)
    sync_runs: dict[str, tuple[list[int], list[list[float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        train = measure.repeat(lambda i: {"one": train_tokens_per_s(tmp, 1, args),
                                          "two": train_tokens_per_s(tmp, 2, args)}, args.repeats, "train")
        measure.report(results, "train tokens/s: 2 ranks / 1 rank",
                       measure.ratios(measure.column(train, "two"), measure.column(train, "one")), ratio=True)
        infer = measure.repeat(lambda i: {"one": infer_tokens_per_s(tmp, 1, args),
                                          "two": infer_tokens_per_s(tmp, 2, args)}, args.repeats, "inference")
        measure.report(results, "generated tokens/s: 2 inference workers / 1",
                       measure.ratios(measure.column(infer, "two"), measure.column(infer, "one")), ratio=True)
        for model in ("roll-tiny", "roll-tiny-10m"):
            sync = measure.repeat(lambda i, m=model: {f"workers_{n}": sync_seconds(tmp, n, m, args) for n in (1, 2, 4)},
                                  args.repeats, f"weight sync {model}")
            for n in (1, 2, 4):
                measure.report(results, f"weight sync {model}, {n} workers", measure.column(sync, f"workers_{n}"), "s")
            for n in (2, 4):
                measure.report(results, f"weight sync {model}: {n} workers / 1", measure.ratios(
                    measure.column(sync, f"workers_{n}"), measure.column(sync, "workers_1")), ratio=True)
            sync_runs[model] = ([1, 2, 4], [measure.column(sync, f"workers_{n}") for n in (1, 2, 4)])
    if args.plot:
        measure.plot_series(args.plot, "weight sync through the object store", "inference workers",
                            "seconds per sync", sync_runs, kind="bar",
                            note="train rank 0 puts the weights once; every worker fetches them itself")
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
