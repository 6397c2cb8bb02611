"""One data-parallel rank of the two-rank test (run by torchrun): train on its half, save results."""

from __future__ import annotations

import json
import sys

import torch
from _deepspeed_helpers import STRATEGY_ARGS, make_batch, make_loss_fn, rows
from roll_strategy_deepspeed.strategy import DeepSpeedTrainStrategy


def main(model_dir: str, out: str, stages: list[int]) -> None:
    for stage in stages:  # one launch for several stages: process start-up dominates on CPU
        strategy = DeepSpeedTrainStrategy(model_dir, zero_stage=stage, **STRATEGY_ARGS)
        batch = make_batch()
        share = rows(batch, strategy.rank, strategy.world_size)
        log_probs, _ = strategy.compute_log_probs(share)
        metrics = strategy.train_step(share, make_loss_fn(batch))  # global normalisers
        weights = strategy.export_weights()  # collective: every rank calls it
        prefix = f"{out}.zero{stage}.rank{strategy.rank}"
        torch.save({"log_probs": log_probs, "weights": weights}, f"{prefix}.pt")
        with open(f"{prefix}.json", "w") as f:
            json.dump({"metrics": metrics, "world_size": strategy.world_size}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")])
