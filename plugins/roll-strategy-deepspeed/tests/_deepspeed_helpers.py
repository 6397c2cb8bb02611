"""What the DeepSpeed tests and their torchrun worker share: a batch, a loss, a strategy factory."""

from __future__ import annotations

import glob
import os
import time

import torch

from roll_core.algorithms.aggregation import Normalisers, agg_loss

ROWS, WIDTH = 8, 16
# fp32 on every device (dtype None would be bf16 on CUDA): the tolerances are fp32's
STRATEGY_ARGS = {"dtype": "fp32", "learning_rate": 1e-3, "per_device_train_batch_size": 2, "max_grad_norm": 1.0,
                 "weight_decay": 0.01, "adam_epsilon": 1e-6}


def make_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded rows of different lengths; responses start at different offsets."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 500, (ROWS, WIDTH), generator=g)
    attention_mask = torch.zeros(ROWS, WIDTH, dtype=torch.long)
    response_mask = torch.zeros(ROWS, WIDTH, dtype=torch.long)
    for row in range(ROWS):
        length = int(torch.randint(8, WIDTH + 1, (1,), generator=g))
        start = int(torch.randint(2, 6, (1,), generator=g))
        attention_mask[row, :length] = 1
        response_mask[row, start:length] = 1
    input_ids = input_ids * attention_mask
    advantages = torch.randn(ROWS, WIDTH - 1, generator=g)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask,
            "advantages": advantages}


def rows(batch: dict[str, torch.Tensor], part: int, parts: int) -> dict[str, torch.Tensor]:
    """The ``part``-th of ``parts`` equal row slices (one data-parallel rank's share)."""
    size = ROWS // parts
    return {k: v[part * size : (part + 1) * size] for k, v in batch.items()}


def make_loss_fn(batch: dict[str, torch.Tensor]):
    """REINFORCE, ``seq-mean-token-mean`` over the *whole* batch's normalisers (docs/algorithms.md §6.5)."""
    mask = batch["response_mask"][:, 1:]
    norm = Normalisers.from_mask(mask, seq_len=mask.shape[-1])

    def loss_fn(mb, log_probs, entropy):
        mask = mb["response_mask"][:, 1:]
        loss = agg_loss(-mb["advantages"] * log_probs, mask, "seq-mean-token-mean", normalisers=norm)
        return loss, {"tokens": float(mask.sum())}

    return loss_fn


#: a DeepSpeed op build (g++) takes 1.5-7 min on 2 busy cores: a JIT lock older than this outlived its build
STALE_LOCK_SECONDS = 20 * 60


def stale_jit_locks(root: str, max_age: float = STALE_LOCK_SECONDS, now: float | None = None) -> list[str]:
    """``<root>/<op>/lock`` files older than ``max_age`` seconds.

    torch's JIT loader creates ``lock`` while one process builds an op and makes every other process
    wait until it is gone; a build that was killed leaves it behind, and all later loads hang.
    """
    now = time.time() if now is None else now
    stale = []
    for lock in sorted(glob.glob(os.path.join(root, "*", "lock"))):
        try:
            if now - os.path.getmtime(lock) > max_age:
                stale.append(lock)
        except FileNotFoundError:  # the build finished meanwhile
            pass
    return stale
