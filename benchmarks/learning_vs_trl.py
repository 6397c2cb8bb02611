"""Learning head to head: roll's GRPO against TRL's GRPOTrainer on the same task, over seeds.

Run it where TRL is installed (``nox -s learning_trl``: TRL in that session's venv only, never in
roll's). For each seed both frameworks train the **same initial weights** (one directory both
load), on the **same prompts** (``examples/rlvr/data/arithmetic_train.jsonl``, rendered by roll's
template code once, handed to both as text), with the **same reward function** (roll's registered
``math_verify``), and the same GRPO settings:

================================  ===============================  ===============================
setting                           roll (``examples/rlvr/...``)     TRL ``GRPOConfig``
================================  ===============================  ===============================
prompts per step x group          rollout_batch_size 16 x 8        generation_batch_size 128,
                                                                   num_generations 8
optimiser steps per rollout       128 / per_device 32 = 4          steps_per_generation 4, per
                                                                   device 32, accumulation 1
learning rate / schedule          3e-4 constant, AdamW, wd 0       same
gradient clipping                 max_grad_norm 1.0                same
clip                              pg_clip 0.2 (ppo)                epsilon 0.2
KL                                init_kl_coef 0                   beta 0
advantage                         (r - group mean) / (std + eps)   scale_rewards "group"
loss aggregation                  token-mean over the step         loss_type "dapo"
sampling                          temperature 1, top_p 1, top_k 0  same
response length                   response_length 1                max_completion_length 1
precision                         fp32                             fp32, no gradient checkpointing
================================  ===============================  ===============================

Loss aggregation pairs (roll ``loss_agg_mode`` -> TRL ``loss_type``): ``token-mean`` with roll's
global normaliser -> ``dapo`` (both divide by the step's active tokens); ``seq-mean-token-mean`` ->
``grpo``; ``seq-mean-token-sum-norm`` -> ``dr_grpo``; TRL's ``bnpo`` normalises per accumulated
micro-batch, which roll has no mode for. With one-token responses, as here, all of them coincide,
so the comparison is exact in the loss. What cannot be made equal: the order in which each side
draws its prompts (both draw from the same file with their own seeded samplers) and the sampled
tokens (each side's own random streams).

The initial weights are roll's warm start of the example (``warmup_sft``: 100 steps answering
each prompt with a random row's reference: the one-digit format, not the task), made once per
seed by ``roll run ... max_steps=1`` and read from ``output_dir/warmup_sft``.

Held-out accuracy is greedy on the 55 validation facts, scored by the same ``math_verify``: roll's
own validation (``val/success``) and, for TRL, a callback that generates greedily with the
trainer's model at the same steps. Time per step excludes validation on both sides.

``--control`` adds roll with a training reward that ignores the response (``coin``: 1 with
probability 0.1, the prompt-blind rate on the balanced sums; ``benchmarks/learning_controls.py``),
validated on the same facts scored by ``math_verify`` (their own reward domain): its held-out
accuracy must stay within noise of the start, which guards against reward leaks.

    python benchmarks/learning_vs_trl.py --seeds 42 43 44 --steps 150 --control \\
        --out runs/learning/vs_trl --json benchmarks/results/learning_vs_trl.json \\
        --plot docs/images/learning_vs_trl.png
    python benchmarks/learning_vs_trl.py --quick      # 4 steps a side: a smoke test

``--roll-setting NAME KEY=VALUE ...`` adds a roll side with overrides (e.g. ``async1
async_generation_ratio=1``: the next batch generated while the current one trains, roll's use of a
second core that TRL's trainer has no counterpart for on CPU); ``--trl-threads N`` gives TRL's
process N torch threads (default 1, as each roll worker has), its side then named ``trl_tN``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import measure

CONFIG = measure.ROOT / "examples" / "rlvr" / "arithmetic.yaml"
TRAIN = measure.ROOT / "examples" / "rlvr" / "data" / "arithmetic_train.jsonl"
VAL = measure.ROOT / "examples" / "rlvr" / "data" / "arithmetic_val.jsonl"
#: roll rows per optimiser step / optimiser steps per rollout batch (arithmetic.yaml's training_args)
PER_DEVICE, STEPS_PER_ROLLOUT = 32, 4
GROUP, PROMPTS_PER_STEP = 8, 16
DONE = "run_done.json"


# -- roll ----------------------------------------------------------------------------------------

def roll_run(out: Path, seed: int, overrides: list[str], env: dict[str, str] | None = None) -> dict:
    """One ``roll run`` of the example (skipped when ``out`` holds a finished one)."""
    done = out / DONE
    if done.is_file():
        return json.loads(done.read_text())
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "roll_core", "run", str(CONFIG), f"seed={seed}", *overrides,
           f"logging_dir={out}", f"output_dir={out / 'checkpoints'}"]
    started = time.perf_counter()
    with open(out / "run.log", "w", encoding="utf-8") as log:
        code = subprocess.run(cmd, cwd=measure.ROOT, env={**os.environ, **measure.QUIET_ENV, **(env or {})},
                              stdout=log, stderr=subprocess.STDOUT).returncode
    record = {"returncode": code, "wall_s": round(time.perf_counter() - started, 1), "command": cmd}
    if code != 0:
        raise SystemExit(f"roll run failed (exit {code}); see {out / 'run.log'}")
    done.write_text(json.dumps(record))
    return record


def scalars(run_dir: Path, *keys: str) -> dict[str, dict[int, float]]:
    """step -> value of each TensorBoard scalar ``key`` of a run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, dict[int, float]] = {k: {} for k in keys}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for key in keys:
            if key in acc.Tags().get("scalars", []):
                found[key].update({int(e.step): float(e.value) for e in acc.Scalars(key)})
    return found


def initial_model(out: Path, seed: int) -> str:
    """The example's warm start at ``seed``, saved by roll; both sides start from it."""
    run = out / f"init_s{seed}"
    roll_run(run, seed, ["max_steps=1", "eval_steps=0", "save_steps=0", "save_best=false"])
    path = run / "checkpoints" / "warmup_sft"
    if not (path / "config.json").is_file():
        raise SystemExit(f"the warm start left no model at {path}; see {run / 'run.log'}")
    return str(path)


def roll_side(out: Path, seed: int, init: str, steps: int, every: int, *, name: str = "roll",
              reward: str | None = None, extra: Sequence[str] = ()) -> dict:
    run = out / f"{name}_s{seed}"
    overrides = [f"pretrain={init}", "warmup_sft.steps=0", f"max_steps={steps}", f"eval_steps={every}",
                 "save_steps=0", "save_best=false", *extra]
    env = None
    if reward:  # training rewarded by `reward`; validation still scored by math_verify, as its own domain
        heldout = out / "heldout.jsonl"
        heldout.write_text("".join(json.dumps({**json.loads(text), "tag": "heldout"}) + "\n"
                                   for text in VAL.read_text().splitlines()))
        overrides += [f"rewards.arithmetic.reward_type={reward}", "+rewards.heldout.reward_type=math_verify",
                      "+rewards.heldout.tag_included=[heldout]", f"validation.data_args.file_name={heldout}"]
        env = {"ROLL_PLUGINS": "learning_controls"}
    record = roll_run(run, seed, overrides, env)
    found = scalars(run, "val/success", "time/step", "time/val")
    step_s = [t - found["time/val"].get(s, 0.0) for s, t in sorted(found["time/step"].items())]
    return {"curve": sorted(found["val/success"].items()), "step_s": statistics.median(step_s),
            "wall_s": record["wall_s"]}


# -- TRL -----------------------------------------------------------------------------------------

def rendered_rows(path: Path, tokenizer) -> list[dict[str, str]]:
    """Prompts rendered exactly as roll renders them (``template: native``), with their references."""
    from roll_core.data.prompts import renderer

    render = renderer("native")
    rows = []
    for text in path.read_text().splitlines():
        row = json.loads(text)
        rows.append({"prompt": render(tokenizer, [{"role": "user", "content": row["prompt"]}]),
                     "question": row["prompt"], "solution": str(row["solution"])})
    return rows


def score(questions: list[str], completions: list[str], solutions: list[str]) -> list[float]:
    """roll's ``math_verify`` reward, as the arithmetic domain calls it."""
    from roll_core.rewards.math import math_verify_reward

    return [math_verify_reward(q, c, s) for q, c, s in zip(questions, completions, solutions, strict=True)]


def trl_side(out: Path, seed: int, init: str, steps: int, every: int, *, name: str = "trl") -> dict:
    """TRL's run; its torch threads are the process's (``--trl-threads``, set once in main)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    record = out / f"{name}_s{seed}" / "result.json"
    if record.is_file():
        return json.loads(record.read_text())
    tokenizer = AutoTokenizer.from_pretrained(init)
    train, val = rendered_rows(TRAIN, tokenizer), rendered_rows(VAL, tokenizer)

    def reward(prompts, completions, question, solution, **_):
        return score(question, completions, solution)

    curve: list[tuple[int, float]] = []
    times: list[float] = []

    class Clock(TrainerCallback):
        """Greedy validation every ``every`` roll-steps (x4 optimiser steps), timed apart."""

        def __init__(self):
            self.started = time.perf_counter()

        def evaluate(self, model, rl_step: int) -> None:
            was_training = model.training
            model.eval()
            tokenizer.padding_side = "left"
            batch = tokenizer([r["prompt"] for r in val], return_tensors="pt", padding=True,
                              add_special_tokens=False)
            with torch.no_grad():
                ids = model.generate(**batch, max_new_tokens=1, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            texts = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            curve.append((rl_step, statistics.fmean(score([r["question"] for r in val], texts,
                                                          [r["solution"] for r in val]))))
            model.train(was_training)

        def on_train_begin(self, args, state, control, model=None, **_):
            self.evaluate(model, 0)
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **_):
            if state.global_step % STEPS_PER_ROLLOUT:
                return
            times.append(time.perf_counter() - self.started)
            rl_step = state.global_step // STEPS_PER_ROLLOUT
            if rl_step % every == 0 or rl_step == steps:
                self.evaluate(model, rl_step)
            self.started = time.perf_counter()

    config = GRPOConfig(
        output_dir=str(out / f"{name}_s{seed}"), use_cpu=True, seed=seed, report_to=[], save_strategy="no",
        logging_steps=10**6, disable_tqdm=True, dataloader_num_workers=0, model_init_kwargs={"dtype": "float32"},
        per_device_train_batch_size=PER_DEVICE, gradient_accumulation_steps=1, steps_per_generation=STEPS_PER_ROLLOUT,
        num_generations=GROUP, max_completion_length=1, temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
        num_iterations=1, loss_type="dapo", scale_rewards="group", epsilon=0.2, learning_rate=3e-4,
        lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        max_steps=steps * STEPS_PER_ROLLOUT, bf16=False, gradient_checkpointing=False,
    )
    torch.manual_seed(seed)
    trainer = GRPOTrainer(model=init, reward_funcs=[reward], args=config, train_dataset=Dataset.from_list(train),
                          processing_class=tokenizer, callbacks=[Clock()])
    started = time.perf_counter()
    trainer.train()
    result = {"curve": curve, "step_s": statistics.median(times), "wall_s": round(time.perf_counter() - started, 1)}
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(result))
    return result


# -- summary -------------------------------------------------------------------------------------

def summary(points: list[tuple[int, float]]) -> dict[str, float]:
    values = [v for _, v in points]
    return {"start": values[0], "final": values[-1], "best": max(values), "last3": statistics.fmean(values[-3:])}


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    names = {"roll": "roll", "trl": "TRL GRPOTrainer", "control": "roll, reward ignores the response"}
    for i, side in enumerate(dict.fromkeys(r["side"] for r in results["runs"])):
        runs = [r for r in results["runs"] if r["side"] == side]
        for j, run in enumerate(runs):
            steps, values = zip(*run["curve"])
            label = names.get(side, side)
            kwargs = {"color": f"C{i}", "alpha": 0.8, "linewidth": 1.4, "label": label if j == 0 else None}
            by_step.plot(steps, values, **kwargs)
            by_time.plot([s * run["step_s"] / 60 for s in steps], values, **kwargs)
    for ax, xlabel in ((by_step, "RL step (0: the shared initial model)"), (by_time, "training minutes (validation excluded)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out greedy accuracy (55 facts)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    by_step.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"single-digit sums, roll-tiny, seeds {', '.join(map(str, results['seeds']))}: one line per seed",
                 fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0], repeats=1)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    p.add_argument("--steps", type=int, default=150, help="RL steps a side (roll steps; TRL runs 4x as many "
                   "optimiser steps, the same number of rollouts)")
    p.add_argument("--every", type=int, default=25, help="validate every N RL steps")
    p.add_argument("--control", action="store_true", help="also run roll with a reward that ignores the response")
    p.add_argument("--out", default="runs/learning/vs_trl", help="one folder per run (finished runs are reused)")
    p.add_argument("--roll-setting", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"),
                   help="another roll side with these overrides, e.g. async1 async_generation_ratio=1 (repeatable)")
    p.add_argument("--trl-threads", type=int, default=1, help="torch threads of TRL's process (default 1, as each "
                   "roll worker has)")
    args = p.parse_args()
    taken = [name for name, *_ in args.roll_setting if name in {"roll", "trl", "control"} or name.startswith("trl_t")]
    if taken:
        p.error(f"--roll-setting {taken[0]}: that name is a built-in side's (roll, trl, trl_tN, control); "
                "choose another, e.g. async1")
    if args.quick:
        args.seeds, args.steps, args.every = args.seeds[:1], 4, 2
    measure.setup_env()
    import torch
    import trl

    torch.set_num_threads(args.trl_threads)
    out = Path(args.out) / ("quick" if args.quick else "")
    results = measure.print_header("learning: roll's GRPO vs TRL's GRPOTrainer, same model, prompts and reward",
                                   args)
    trl_name = "trl" if args.trl_threads == 1 else f"trl_t{args.trl_threads}"
    results.update({"seeds": args.seeds, "steps": args.steps, "every": args.every, "trl": trl.__version__,
                    "trl_threads": args.trl_threads, "runs": []})
    for seed in args.seeds:
        init = initial_model(out, seed)
        sides = [("roll", roll_side, {}), (trl_name, trl_side, {"name": trl_name})]
        sides += [(name, roll_side, {"name": name, "extra": extra}) for name, *extra in args.roll_setting]
        if args.control:
            sides.append(("control", roll_side, {"name": "control", "reward": "coin"}))
        for side, train, options in sides:
            got = train(out, seed, init, args.steps, args.every, **options)
            results["runs"].append({"side": side, "seed": seed, **got, **summary(got["curve"])})
            s = summary(got["curve"])
            print(f"  seed {seed} {side}: start {s['start']:.2f}, final {s['final']:.2f}, best {s['best']:.2f}, "
                  f"{got['step_s']:.2f} s/step", flush=True)
    print("\n| side | seeds | start | final | best | mean of last 3 | s per step (median) |\n|---|---|---|---|---|---|---|")
    by_side = {side: {r["seed"]: r for r in results["runs"] if r["side"] == side}
               for side in dict.fromkeys(r["side"] for r in results["runs"])}
    for side, runs in by_side.items():
        print(f"| {side} | {len(runs)} | " + " | ".join(spread([r[k] for r in runs.values()])
                                                      for k in ("start", "final", "best", "last3"))
              + f" | {statistics.median(r['step_s'] for r in runs.values()):.2f} |")
    trl_runs = by_side[trl_name]
    for side in ["roll"] + [name for name, *_ in args.roll_setting]:
        label = "roll" if side == "roll" else f"roll {side}"
        measure.report(results, f"{label} / TRL time per step",
                       [by_side[side][s]["step_s"] / trl_runs[s]["step_s"] for s in args.seeds], ratio=True)
        measure.report(results, f"{label} - TRL final held-out accuracy",
                       [by_side[side][s]["final"] - trl_runs[s]["final"] for s in args.seeds])
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    measure.finish(results, args)


if __name__ == "__main__":
    main()
