"""The RLVR training loop on Ray: prompts from JSON lines, verifiable rewards per data domain.

One step::

    prompts (rollout_batch_size, drawn per domain_interleave_probs)
      -> num_return_sequences_in_group responses each          actor_infer, via the generate scheduler
      -> reward per response: the registered function of its row's domain (rlvr_rewards)
    ref / old log-probs, advantages (pipeline="rlvr": GRPO normalises inside each prompt's group),
    actor update, weight sync, metrics, validation every eval_steps, checkpoint every save_steps

Everything that is not specific to prompts -- train workers, generation workers, weight sync,
checkpoints and resume, Ctrl-C handling, the tracker -- is the shared training loop's
(:class:`roll_core.pipeline.base.TrainingLoop`); the agentic pipeline is its sibling. With
``async_generation_ratio: k`` the next batches are generated while the trainer trains, at most k
policy versions behind (:mod:`roll_core.rollout.rlvr.rlvr_rollout`).
"""

from __future__ import annotations

from typing import Any

from roll_core.pipeline.base import TrainingLoop


def rlvr_sampling(config: Any, mode: str) -> Any:
    """The sampling of RLVR training (``actor_infer.generating_args``) or validation
    (``validation.generating_args`` when there is a validation section; greedy with ``val_greedy``),
    through the converter every path shares."""
    from roll_core.strategies.generating_args import sampling_from_generating_args

    if mode == "train":
        return sampling_from_generating_args(config.actor_infer.generating_args)
    args = config.validation.generating_args if config.validation is not None else config.actor_infer.generating_args
    return sampling_from_generating_args(args, greedy=config.val_greedy)


def validation_files(config: Any) -> tuple[Any, Any]:
    """``(files, their data_args)``: ``validation.data_args.file_name``, else
    ``actor_train.data_args.eval_file_name`` (None: the run does not validate)."""
    val_args = config.validation.data_args if config.validation is not None else None
    if val_args is not None and val_args.file_name:
        return val_args.file_name, val_args
    train_args = config.actor_train.data_args
    return (train_args.eval_file_name if train_args is not None else None), train_args


class RLVRPipeline(TrainingLoop):
    """See the module docstring."""

    NAME = "rlvr"
    NON_TRAIN_KEYS = ("domain", "truncated")

    def __init__(self, resolved: Any, *, stream=None):
        super().__init__(resolved, stream=stream)
        # validation goes through train_rollout.generate (the same workers) on these prompts
        self.val_rows: list[Any] = []
        self.train_rows: list[Any] = []
        self.tokenizer: Any = None
        self.pad_id = 0
        self.reward_scoring: Any = None

    def title(self) -> str:
        c = self.config
        return f"{c.exp_name}: {c.adv_estimator} on {', '.join(self.trained_domains())}"

    def trained_domains(self) -> list[str]:
        """The reward domains whose rows are drawn (``domain_interleave_probs`` may leave some out)."""
        c = self.config
        data_args = c.actor_train.data_args
        probs = data_args.domain_interleave_probs if data_args is not None else None
        return [d for d in c.rewards if not probs or probs.get(d, 0.0) > 0]

    # -- setup ---------------------------------------------------------------------------------
    def extra_roles(self) -> list[str]:
        """``rewards.<domain>`` for every domain scored by a reward worker group."""
        from roll_core.rollout.rlvr.reward_scoring import worker_domains

        return [f"rewards.{d}" for d in worker_domains(self.resolved)]

    def start_rollouts(self) -> None:
        """Tokenizer, prompts, reward functions, the inference workers and the rollout around them."""
        from roll_core.algorithms.sample_masks import SampleMaskSettings
        from roll_core.data import PromptSampler, load_prompts
        from roll_core.models.policy_tokenizer import rollout_tokenizer
        from roll_core.rollout.rlvr.reward_filters import DynamicSampling
        from roll_core.rollout.rlvr.reward_scoring import RewardScoring
        from roll_core.rollout.rlvr.rlvr_rollout import RLVRRollout
        from roll_core.run import model_path

        c = self.config
        data_args = c.actor_train.data_args  # set, and its files exist: checked at resolve (config/run_checks.py)
        tokenizer = rollout_tokenizer(model_path(c, "actor_infer", required=False), seed=c.seed, model_free=False)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        template = c.global_template or data_args.template
        rows = load_prompts(data_args.file_name, tokenizer, data_args=data_args, rewards=c.rewards,
                            prompt_length=c.prompt_length, template=template)
        self.train_rows, self.tokenizer = rows, tokenizer
        sampler = PromptSampler(rows, seed=c.seed, probs=data_args.domain_interleave_probs)
        self.start_placement()
        self.reward_scoring = RewardScoring.start(self.resolved, placement=self.placement)
        for line in self.reward_scoring.describe():
            self.tracker.print(f"  {line}")
        self.generation = self.start_generation()
        self.train_rollout = RLVRRollout(
            scheduler=self.generation.scheduler, tokenizer=tokenizer, rewards=self.reward_scoring,
            sampling=rlvr_sampling(c, "train"), sampler=sampler,
            group_size=c.num_return_sequences_in_group, batch_size=c.rollout_batch_size, seed=c.seed,
            async_ratio=c.async_generation_ratio, pad_id=self.pad_id, masks=SampleMaskSettings.from_config(c),
            timeout_s=float(c.rpc_timeout), dynamic=DynamicSampling.from_config(c))
        val_files, val_args = validation_files(c)
        if c.eval_steps > 0 and val_files:
            val_rows = load_prompts(val_files, tokenizer, data_args=val_args, rewards=c.rewards,
                                    prompt_length=c.val_prompt_length or c.prompt_length,
                                    template=c.global_template or val_args.template)
            self.val_rows = val_rows[: c.val_batch_size] if c.val_batch_size > 0 else val_rows

    def replace_lost_workers(self) -> list[tuple[str, str]]:
        """Lost reward workers are started again where there is room, and take samples once up."""
        return self.reward_scoring.replace_lost() if self.reward_scoring is not None else []

    def shutdown(self) -> None:
        if self.reward_scoring is not None:
            self.reward_scoring.shutdown()
            self.reward_scoring = None
        super().shutdown()

    def warm_start(self) -> tuple[str, dict[str, float]]:
        """``warmup_sft`` on the training prompts answered with reference answers (see warmup.py)."""
        from roll_core.pipeline.warmup import SEED_OFFSET, prompt_demonstrations, train_warmup

        c = self.config
        demonstrations = prompt_demonstrations(
            self.train_rows, eos_id=self.tokenizer.eos_token_id, tokenizer=self.tokenizer,
            batch_size=c.warmup_sft.batch_size or c.rollout_batch_size, seed=c.seed + SEED_OFFSET,
            probs=c.actor_train.data_args.domain_interleave_probs)
        return train_warmup(self, demonstrations)

    def has_validation(self) -> bool:
        return bool(self.val_rows)

    # -- validation ------------------------------------------------------------------------------
    def validate(self, step: int, prefix: str = "val") -> dict[str, float]:
        """The same validation prompts every time; ``val/success`` is their accuracy (for the curve)."""
        from roll_core.rollout.rlvr.rlvr_rollout import summary

        c = self.config
        with self.paused():  # generation ahead of training waits for validation
            samples = self.train_rollout.generate(self.val_rows, "val", sampling=rlvr_sampling(c, "val"),
                                                  group_size=c.val_n_sample)
        metrics = summary(samples, prefix)
        metrics[f"{prefix}/success"] = metrics[f"{prefix}/accuracy"]
        return metrics
