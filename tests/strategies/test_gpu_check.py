"""benchmarks/gpu_check.py, the program docs/gpu.md's figures come from, runs its hf part on CPU:
generation, one GRPO step with roll's policy loss, offload / reload and a weight sync."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def test_hf_part_runs_on_cpu_and_reports_its_figures(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    results = tmp_path / "results.jsonl"
    code = gpu_check.main(["hf", "--model", "roll-tiny", "--device", "cpu", "--rows", "16", "--group", "8",
                           "--new-tokens", "12", "--micro", "8", "--steps", "1", "--results", str(results)])
    assert code == 0
    record = json.loads(results.read_text())
    assert record["part"] == "hf" and record["device"] == "cpu" and "error" not in record
    assert record["generate"]["requests"] == 16 and 16 <= record["generate"]["new_tokens"] <= 16 * 12
    step = record["grpo_step"]
    assert step["rows"] == 16 and step["tokens_per_step"] > 16 and step["train_tokens_per_s"] > 0
    assert step["last_loss"] != step["first_loss"] and step["grad_norm"] > 0  # the warm-up step moved the policy
    assert record["generate_after_weight_sync"] and all(n >= 1 for n in record["generate_after_weight_sync"])
