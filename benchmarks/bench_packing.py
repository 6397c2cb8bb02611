"""Padding-free training: train tokens/s of ``hf_train`` with packed rows vs padded rows, same batches.

Two strategies on the same local ``roll-tiny`` directory, fp32 on CPU, the demo's training shape
(examples/frozen_lake/grpo.yaml: 64 rows per step cut into mini-batches of 16 rows, one optimiser
step each, ``per_device_train_batch_size`` 16, AdamW, clipping at 1.0) and the demo's PPO loss with
its global normalisers; one pads every micro-batch to its longest row (``use_sequence_packing:
false``, roll's path before packing), the other packs (roll's default). Tokens are the rows' real
tokens, the same on both sides.

Two batch mixes:

* **long-tailed**: 64 rows, prompts of 32-64 tokens, responses Pareto-distributed (shape 1.16, the
  80/20 one) from 16 tokens, clipped at 1024;
* **demo**: the trajectories of the demo's own rollout (examples/frozen_lake/grpo.yaml: 8 groups
  x 8 envs, up to 6 turns of up to 8 tokens) played by the engine's random policy (the stand-in for
  the model: no model is loaded), collated as the pipeline does (``--no-demo`` skips it: it starts
  Ray).

The machine is shared and noisy, so every repeat measures both sides back to back in this one
process, alternating which goes first (A/B then B/A), and the figure is the ratio of the pair.

Usage: python benchmarks/bench_packing.py [--repeats 3] [--quick] [--threads 1] [--no-demo] [--json F] [--plot P]
"""

from __future__ import annotations

import tempfile
import time

import measure

DEMO = measure.ROOT / "examples" / "frozen_lake" / "grpo.yaml"


def demo_config():
    from roll_core.config import load_config

    return load_config(DEMO)


def long_tailed_rows(args, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids) of ``--rows`` rows; Pareto(1.16) x 16 responses, clipped to 1024."""
    import numpy as np

    rng = np.random.default_rng(seed)
    responses = np.clip((16 * (1 + rng.pareto(1.16, args.rows))).astype(int), 16, args.max_response)
    prompts = rng.integers(32, 65, args.rows)
    return [(rng.integers(3, 2000, int(p)).tolist(), rng.integers(3, 2000, int(r)).tolist())
            for p, r in zip(prompts, responses)]


def collate(rows: list[tuple[list[int], list[int]]]) -> dict:
    """Right-padded prompt + response rows, response_mask on the response (what the pipeline trains on)."""
    import torch

    width = max(len(p) + len(r) for p, r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn, resp = torch.zeros_like(ids), torch.zeros_like(ids)
    for i, (p, r) in enumerate(rows):
        ids[i, : len(p) + len(r)] = torch.tensor(p + r)
        attn[i, : len(p) + len(r)] = 1
        resp[i, len(p) : len(p) + len(r)] = 1
    return {"input_ids": ids, "attention_mask": attn, "response_mask": resp}


def demo_batch(args) -> dict:
    """One batch of the demo's rollout (random policy), as the pipeline collates trajectories."""
    from roll_core.config import resolve
    from roll_core.models.policy_tokenizer import rollout_tokenizer
    from roll_core.rollout import RolloutScheduler
    from roll_core.rollout.engine.batch import trajectory_batch

    measure.start_ray(num_cpus=2)
    run = resolve(demo_config(), roles=())
    tokenizer = rollout_tokenizer(run.model_path("actor_infer", required=False), seed=run.config.seed,
                                  model_free=True)
    scheduler = RolloutScheduler.from_run(run, "train", tokenizer=tokenizer, policy="random")
    try:
        trajs = scheduler.get_batch(args.rows).trajectories
    finally:
        scheduler.shutdown()
    batch, _ = trajectory_batch(trajs, int(tokenizer.pad_token_id or 0))
    return {k: batch[k] for k in ("input_ids", "attention_mask", "response_mask")}


def with_loss_inputs(batch: dict, seed: int = 0) -> dict:
    """Advantages (one per row, on its response tokens) and old log-probs near the policy's."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    mask = batch["response_mask"][:, 1:].float()
    batch = dict(batch)
    batch["advantages"] = torch.randn(mask.shape[0], 1, generator=gen) * mask
    batch["old_log_probs"] = -torch.rand(mask.shape, generator=gen) * mask
    return batch


def strategy(path: str, packed: bool, args):
    from roll_core.strategies.hf_train import HFTrainStrategy
    from roll_core.strategies.packing import PackingSettings

    return HFTrainStrategy(path, packing=PackingSettings(enabled=None if packed else False), learning_rate=1e-6,
                           per_device_train_batch_size=args.micro, infer_batch_size=args.micro,
                           num_threads=args.threads)


def train_seconds(side, batch: dict, args) -> float:
    """One step's batch as the pipeline trains it: mini-batches of ``--mini`` rows, one train_step each."""
    from roll_core.algorithms import losses
    from roll_core.algorithms.aggregation import Normalisers, norm_seq_len
    from roll_core.algorithms.objective import make_actor_loss_fn

    config = args.config
    rows = batch["input_ids"].shape[0]
    minis = [{k: v[i : i + args.mini] for k, v in batch.items()} for i in range(0, rows, args.mini)]
    fns = [make_actor_loss_fn(config, Normalisers.from_mask(m["response_mask"][:, 1:].float(), norm_seq_len(config)),
                              loss_variant=losses.ppo) for m in minis]
    started = time.perf_counter()
    for _ in range(args.steps):
        for mini, fn in zip(minis, fns):
            side.train_step(mini, fn)
    return time.perf_counter() - started


def log_prob_seconds(side, batch: dict, args) -> float:
    started = time.perf_counter()
    for _ in range(args.steps):
        side.compute_log_probs(batch)
    return time.perf_counter() - started


def measure_mix(name: str, batch: dict, sides: dict, args, results: dict) -> None:
    tokens = int(batch["attention_mask"].sum())
    rows, width = batch["input_ids"].shape
    print(f"-- {name}: {rows} rows, {tokens} tokens, padded to {width} ({tokens / (rows * width):.0%} real)",
          flush=True)
    results.setdefault("mixes", {})[name] = {"rows": rows, "tokens": tokens, "width": width}
    for side in sides.values():  # warm-up: first-call allocations and the optimiser state
        train_seconds(side, batch, args)
        log_prob_seconds(side, batch, args)

    def one(i: int) -> dict[str, float]:
        out = {}
        order = ("padded", "packed") if i % 2 == 0 else ("packed", "padded")
        for label in order:
            out[f"{label}_train_tok_s"] = args.steps * tokens / train_seconds(sides[label], batch, args)
        for label in order:
            out[f"{label}_logp_tok_s"] = args.steps * tokens / log_prob_seconds(sides[label], batch, args)
        return out

    runs = measure.repeat(one, args.repeats, name)
    results["mixes"][name]["runs"] = runs
    for label in ("padded", "packed"):
        measure.report(results, f"{name}: {label} train tokens/s", measure.column(runs, f"{label}_train_tok_s"))
    measure.report(results, f"{name}: packed / padded, train tokens/s",
                   measure.ratios(measure.column(runs, "packed_train_tok_s"),
                                  measure.column(runs, "padded_train_tok_s")), ratio=True)
    measure.report(results, f"{name}: packed / padded, log-prob tokens/s",
                   measure.ratios(measure.column(runs, "packed_logp_tok_s"),
                                  measure.column(runs, "padded_logp_tok_s")), ratio=True)


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=64, help="rows per step (the demo's rollout_batch_size)")
    p.add_argument("--mini", type=int, default=16, help="rows per optimiser step (the demo's mini-batch)")
    p.add_argument("--micro", type=int, default=16, help="per_device_train_batch_size (the demo's)")
    p.add_argument("--max-response", type=int, default=1024, help="longest response of the long-tailed mix")
    p.add_argument("--steps", type=int, default=1, help="steps per timed block")
    p.add_argument("--threads", type=int, default=1, help="torch threads of both sides")
    p.add_argument("--no-demo", action="store_true", help="skip the demo mix (it starts Ray)")
    args = p.parse_args()
    if args.quick:
        args.rows, args.mini, args.micro, args.max_response, args.repeats = 16, 8, 8, 128, 1
    measure.setup_env()
    import torch

    from roll_core.models import resolve_pretrain

    torch.set_num_threads(args.threads)
    results = measure.print_header("hf_train: packed rows vs padded rows, train tokens/s", args)
    results["args"] = dict(vars(args))
    args.config = demo_config()
    with tempfile.TemporaryDirectory() as cache:
        path = resolve_pretrain("roll-tiny", cache, seed=0)
        sides = {"padded": strategy(path, False, args), "packed": strategy(path, True, args)}
        assert sides["packed"].packs and not sides["padded"].packs
        measure_mix("long-tailed", with_loss_inputs(collate(long_tailed_rows(args))), sides, args, results)
        if not args.no_demo:
            measure_mix("demo", with_loss_inputs(demo_batch(args)), sides, args, results)
    if args.plot:
        mixes = list(results["mixes"])
        measure.plot_series(
            args.plot, "hf_train on packed vs padded rows (roll-tiny, CPU)", "batch mix", "train tokens/s",
            {label: (mixes, [measure.column(results["mixes"][m]["runs"], f"{label}_train_tok_s") for m in mixes])
             for label in ("padded", "packed")}, kind="bar")
    measure.finish(results, args)


if __name__ == "__main__":
    measure.run_main(main)
