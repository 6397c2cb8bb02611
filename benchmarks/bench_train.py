"""Training throughput: tokens/s of roll's GRPO train step vs TRL's GRPOTrainer, same model and batches.

Run it where TRL is installed (``nox -s bench_trl``: its own venv, never roll's test venv). Both
sides train the same local ``roll-tiny`` directory in fp32 on CPU with the same torch threads, the
same optimiser step shape (``--batch`` rows, micro-batches of ``--micro``, AdamW, clipping at 1.0)
and the same PPO-clip GRPO objective without KL, token-mean over the step. A third side is a plain
PyTorch loop (forward, log-softmax, surrogate loss, backward, AdamW) over the same rows: the floor
a framework's train step is measured against.

TRL's ``GRPOConfig`` defaults to bf16 autocast and gradient checkpointing;
the main figure turns both off (fp32 like roll, no recomputation: roll's demo disables checkpointing
too), and a third block measures TRL with its defaults.

Side by side on identical tokens: TRL's ``GRPOTrainer`` generates and scores a batch (timed apart
and excluded) and trains on it; every batch it trained on is then given to roll's
``HFTrainStrategy.train_step`` (prompt + completion rows, completion-only mask, the batch's
advantages). Train-step time is the optimiser step alone: TRL's from the step's start to its end
minus its generation, roll's the ``train_step`` call. Tokens are the non-padding tokens of the step.
Each repeat trains a block of ``--steps`` steps on each side (after one warm-up step).

Usage: python benchmarks/bench_train.py [--repeats 3] [--quick] [--threads 1]
"""

from __future__ import annotations

import tempfile
import time
from types import SimpleNamespace

import measure


def model_dir(cache: str) -> str:
    from roll_core.models import resolve_pretrain

    return resolve_pretrain("roll-tiny", cache, seed=0)


def prompts(args) -> list[str]:
    """Grid-like prompts of about ``--prompt`` tokens (their exact lengths differ a little)."""
    cells = (" _", " P", " O", " G")
    return [f"Map {i}:" + "".join(cells[(i * 7 + j) % 4] for j in range(args.prompt)) for i in range(args.batch)]


def reward(completions, **_):
    """Any varied score: GRPO needs different rewards within a group to have non-zero advantages."""
    return [float(len(c) % 5) for c in completions]


class TRLSide:
    """A GRPOTrainer whose generation is timed apart and whose trained batches are kept for roll."""

    def __init__(self, args, path: str, workdir: str, *, trl_defaults: bool = False):
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        side = self

        class Timed(GRPOTrainer):
            def _generate_and_score_completions(self, inputs):
                started = time.perf_counter()
                out = super()._generate_and_score_completions(inputs)
                side.generation_s += time.perf_counter() - started
                side.batches.append({k: out[k].detach().clone() for k in
                                     ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages")})
                return out

        class StepClock(TrainerCallback):
            def on_step_begin(self, *_, **__):
                side.generation_s, side.step_started = 0.0, time.perf_counter()

            def on_step_end(self, *_, **__):
                side.step_times.append(time.perf_counter() - side.step_started - side.generation_s)

        micro_steps = args.batch // args.micro
        self.config = GRPOConfig(
            output_dir=workdir, use_cpu=True, seed=0, report_to=[], save_strategy="no", logging_steps=10**6,
            disable_tqdm=True, dataloader_num_workers=0, model_init_kwargs={"dtype": "float32"},
            per_device_train_batch_size=args.micro, gradient_accumulation_steps=micro_steps,
            steps_per_generation=micro_steps, num_generations=args.group, max_completion_length=args.completion,
            generation_kwargs={"min_new_tokens": args.completion}, temperature=1.0, top_p=1.0, top_k=0,
            beta=0.0, num_iterations=1, loss_type="dapo", epsilon=0.2, learning_rate=1e-5,
            lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
            max_steps=args.steps + 1,
            # TRL's GRPOConfig defaults to bf16 autocast and gradient checkpointing; matched: fp32, none
            **({} if trl_defaults else {"bf16": False, "gradient_checkpointing": False}),
        )
        dataset = Dataset.from_dict({"prompt": prompts(args)})
        self.trainer = Timed(model=path, reward_funcs=[reward], args=self.config, train_dataset=dataset,
                             callbacks=[StepClock()])
        self.batches: list[dict] = []
        self.step_times: list[float] = []
        self.generation_s, self.step_started = 0.0, 0.0

    def block(self) -> tuple[list[float], list[dict]]:
        """``--steps`` timed steps after a warm-up one; their train times and the batches trained."""
        self.batches, self.step_times = [], []
        self.trainer.train()
        return self.step_times[1:], self.batches[1:]


class RollSide:
    """``HFTrainStrategy.train_step`` with roll's actor loss (ppo clip, token-mean, no KL)."""

    def __init__(self, args, path: str):
        from roll_core.config import ActorTrainConfig, AlgorithmConfig
        from roll_core.strategies.hf_train import HFTrainStrategy

        self.strategy = HFTrainStrategy(path, seed=0, dtype="fp32", learning_rate=1e-5, max_grad_norm=1.0,
                                        per_device_train_batch_size=args.micro,
                                        gradient_accumulation_steps=args.batch // args.micro)
        self.config = SimpleNamespace(**dict(AlgorithmConfig(loss_agg_mode="token-mean", pg_clip=0.2)),
                                      actor_train=ActorTrainConfig(pg_variant="ppo"))
        from roll_core.algorithms import losses

        self.loss_variant = losses.ppo

    def step(self, batch: dict) -> float:
        from roll_core.algorithms import Normalisers, label_mask, make_actor_loss_fn

        mask = label_mask(batch)
        base = make_actor_loss_fn(self.config, Normalisers.from_mask(mask, seq_len=mask.shape[-1]),
                                  loss_variant=self.loss_variant)

        def loss_fn(micro, log_probs, entropy):  # one optimiser step: pi_old is the first forward's
            return base({**micro, "old_log_probs": log_probs.detach()}, log_probs, entropy)

        started = time.perf_counter()
        self.strategy.train_step(batch, loss_fn)
        return time.perf_counter() - started


class RawTorchSide:
    """The floor: a plain PyTorch loop over the same rows and micro-batches, no framework.

    Per micro-batch one forward of the whole row (logits at every position, as a hand-written loop
    does), log-softmax, the taken tokens' log-probs, the GRPO surrogate ``-adv * ratio`` (its
    gradient at ratio 1 is PPO-clip's), token-mean over the step, backward; then clipping at 1.0 and
    one AdamW step, as roll's step.
    """

    def __init__(self, args, path: str):
        import torch
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-5, weight_decay=0.0)
        self.micro = args.micro

    def step(self, batch: dict) -> float:
        import torch

        started = time.perf_counter()
        tokens = batch["response_mask"][:, 1:].sum()
        for start in range(0, batch["input_ids"].shape[0], self.micro):
            ids, attention = batch["input_ids"][start:start + self.micro], batch["attention_mask"][start:start + self.micro]
            mask = batch["response_mask"][start:start + self.micro, 1:].float()
            logits = self.model(input_ids=ids, attention_mask=attention).logits[:, :-1]
            log_probs = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            ratio = torch.exp(log_probs - log_probs.detach())
            loss = -(batch["advantages"][start:start + self.micro] * ratio * mask).sum() / tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - started


def roll_batch(trl_batch: dict) -> dict:
    """TRL's (left-padded prompt, completion) tensors as roll's rows: label-aligned per-token advantages."""
    import torch

    ids = torch.cat([trl_batch["prompt_ids"], trl_batch["completion_ids"]], dim=1)
    attention = torch.cat([trl_batch["prompt_mask"], trl_batch["completion_mask"]], dim=1)
    response = torch.cat([torch.zeros_like(trl_batch["prompt_mask"]), trl_batch["completion_mask"]], dim=1)
    advantages = trl_batch["advantages"].float().reshape(-1, 1).expand(ids.shape[0], ids.shape[1] - 1).clone()
    return {"input_ids": ids, "attention_mask": attention, "response_mask": response, "advantages": advantages}


def main() -> None:
    p = measure.parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64, help="rows per optimiser step")
    p.add_argument("--micro", type=int, default=16, help="rows per micro-batch")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (GRPO group)")
    p.add_argument("--prompt", type=int, default=96, help="grid cells per prompt (about one token each)")
    p.add_argument("--completion", type=int, default=32, help="completion tokens (every completion this long)")
    p.add_argument("--steps", type=int, default=4, help="timed optimiser steps per side per repeat")
    p.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    p.add_argument("--profile", action="store_true", help="also cProfile one more block of each side")
    args = p.parse_args()
    if args.quick:
        args.batch, args.micro, args.group, args.prompt, args.completion = 16, 8, 4, 24, 8
        args.steps, args.repeats = 2, 1
    measure.setup_env()
    import torch

    torch.set_num_threads(args.threads)
    results = measure.print_header("training throughput: roll's GRPO train step vs TRL's GRPOTrainer", args)
    results["config"] = {k: getattr(args, k) for k in ("batch", "micro", "group", "prompt", "completion", "steps",
                                                       "threads")}
    import trl

    results["config"]["trl"] = trl.__version__
    with tempfile.TemporaryDirectory(prefix="roll-bench-train-") as workdir:
        path = model_dir(workdir + "/models")
        print(f"   roll-tiny fp32, {args.batch} rows per step in micro-batches of {args.micro}, groups of "
              f"{args.group}, ~{args.prompt} prompt + {args.completion} completion tokens, {args.threads} torch "
              f"thread(s), TRL {trl.__version__}", flush=True)
        trl_side, roll_side = TRLSide(args, path, workdir + "/trl"), RollSide(args, path)
        raw_side = RawTorchSide(args, path)
        trl_default = TRLSide(args, path, workdir + "/trl-defaults", trl_defaults=True)

        def one(_run: int) -> dict[str, float]:
            trl_times, batches = trl_side.block()
            default_times, default_batches = trl_default.block()
            tokens = [float(b["prompt_mask"].sum() + b["completion_mask"].sum()) for b in batches]
            default_tokens = [float(b["prompt_mask"].sum() + b["completion_mask"].sum()) for b in default_batches]
            rows = [roll_batch(b) for b in batches]
            roll_side.step(rows[0])  # warm-up
            roll_times = [roll_side.step(b) for b in rows]
            raw_side.step(rows[0])  # warm-up
            raw_times = [raw_side.step(b) for b in rows]
            return {"trl_tok_per_s": sum(tokens) / sum(trl_times), "roll_tok_per_s": sum(tokens) / sum(roll_times),
                    "raw_tok_per_s": sum(tokens) / sum(raw_times),
                    "trl_defaults_tok_per_s": sum(default_tokens) / sum(default_times),
                    "trl_step_s": sum(trl_times) / len(trl_times), "roll_step_s": sum(roll_times) / len(roll_times),
                    "tokens_per_step": sum(tokens) / len(tokens)}

        runs = measure.repeat(one, args.repeats, "TRL block, TRL-defaults block, roll block, plain PyTorch block")
        if args.profile:
            _, batches = trl_side.block()
            rows = [roll_batch(b) for b in batches]
            results["profile"] = {
                "trl": measure.cprofile_top(trl_side.block, "TRL block (generation included)", sort="tottime"),
                "roll": measure.cprofile_top(lambda: [roll_side.step(b) for b in rows], "roll block", sort="tottime"),
            }
    results["runs"] = runs
    col = measure.column
    measure.report(results, "TRL GRPOTrainer train-step tokens/s", col(runs, "trl_tok_per_s"), "tok/s")
    measure.report(results, "roll hf_train train-step tokens/s", col(runs, "roll_tok_per_s"), "tok/s")
    measure.report(results, "TRL with its defaults (bf16 autocast, gradient checkpointing) tokens/s",
                   col(runs, "trl_defaults_tok_per_s"), "tok/s")
    measure.report(results, "roll / TRL", measure.ratios(col(runs, "roll_tok_per_s"), col(runs, "trl_tok_per_s")),
                   ratio=True)
    measure.report(results, "plain PyTorch loop train-step tokens/s", col(runs, "raw_tok_per_s"), "tok/s")
    measure.report(results, "roll / plain PyTorch loop", measure.ratios(col(runs, "roll_tok_per_s"),
                                                                       col(runs, "raw_tok_per_s")), ratio=True)
    measure.report(results, "roll / TRL with its defaults",
                   measure.ratios(col(runs, "roll_tok_per_s"), col(runs, "trl_defaults_tok_per_s")), ratio=True)
    if args.plot:
        measure.plot_series(args.plot, "GRPO train step on roll-tiny (fp32, CPU)", "trainer", "tokens per second",
                            {"median of runs, min-max bars": (
                                ["TRL, its defaults", "TRL, fp32, no checkpointing", "roll hf_train", "plain PyTorch"],
                                [col(runs, k) for k in ("trl_defaults_tok_per_s", "trl_tok_per_s", "roll_tok_per_s",
                                                        "raw_tok_per_s")])},
                            kind="bar", note=f"{args.batch} rows x ~{args.prompt}+{args.completion} tokens per step; "
                            "benchmarks/bench_train.py")
    measure.finish(results, args)


if __name__ == "__main__":
    main()
