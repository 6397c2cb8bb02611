"""Memory a run saves with LoRA: the reference worker it no longer builds (issue 21).

Without LoRA, a run with a KL term holds the reference model in a worker process of its own (an
``hf_train`` strategy built with ``trainable=False``); with LoRA the reference log-probs come from
the actor with its adapters disabled, so that process is never started. This program measures,
each in a fresh process, the resident memory (RSS) of

* ``reference``: a reference worker's strategy after one log-prob forward, what LoRA saves (the
  process after the forward minus the same process before loading; torch is imported before);
* ``lora_actor`` and ``full_actor``: the actor's strategy with and without LoRA after one training
  step (adapter optimizer state vs the whole model's AdamW moments);

and prints median / min / max over ``--repeats`` runs.

Usage: python benchmarks/bench_lora_memory.py [--model smollm2-135m-instruct] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, psutil, torch
torch.set_num_threads(1)
from roll_core.strategies.hf_train import HFTrainStrategy
from roll_core.strategies.lora import LoraSettings
from roll_core.models import resolve_pretrain
kind, model = sys.argv[1], sys.argv[2]
path = resolve_pretrain(model)
proc = psutil.Process()
before = proc.memory_info().rss
lora = LoraSettings(target="all-linear", rank=16) if kind == "lora_actor" else None
strategy = HFTrainStrategy(path, trainable=kind != "reference", lora=lora, learning_rate=1e-5)
ids = torch.randint(3, 1000, (8, 96))
mask = torch.ones_like(ids); resp = mask.clone(); resp[:, :64] = 0
batch = {"input_ids": ids, "attention_mask": mask, "response_mask": resp}
strategy.compute_log_probs(batch)  # every weight touched (safetensors loads are memory-mapped)
if kind != "reference":
    strategy.train_step(batch, lambda mb, lp, ent: (-(lp.sum()) / 1000.0, {}))
print(json.dumps({"rss_mb": (proc.memory_info().rss - before) / 2**20,
                  "trainable": strategy.parameter_counts()[0]}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for kind in ("reference", "lora_actor", "full_actor"):
            out = subprocess.run([sys.executable, "-c", CHILD, kind, args.model], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
            results.setdefault(kind, []).append(json.loads(out)["rss_mb"])
    print(f"model {args.model}, {args.repeats} runs each, RSS added by the strategy (MiB): median [min, max]")
    for kind, values in results.items():
        print(f"  {kind:<11} {statistics.median(values):8.0f}  [{min(values):.0f}, {max(values):.0f}]")
    saved = statistics.median(results["reference"])
    print(f"LoRA saves the reference worker: {saved:.0f} MiB (plus that process's own Ray/torch overhead); "
          f"the LoRA actor needs {statistics.median(results['full_actor']) - statistics.median(results['lora_actor']):.0f}"
          " MiB less than the full one (no AdamW moments for the base weights)")


if __name__ == "__main__":
    main()
