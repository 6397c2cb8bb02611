"""One rank of the two-GPU tensor-parallel test (run by torchrun)."""

from __future__ import annotations

import sys

import torch
from _megatron_helpers import make_batch
from roll_strategy_megatron.strategy import MegatronTrainStrategy


def main(model_dir: str, out_dir: str) -> None:
    strategy = MegatronTrainStrategy(model_dir, dtype="fp32", tensor_model_parallel_size=2,
                                     sequence_parallel=True, use_transformer_engine=False)
    log_probs, _ = strategy.compute_log_probs(make_batch())
    if torch.distributed.get_rank() == 0:
        torch.save(log_probs, f"{out_dir}/tp_log_probs.pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
