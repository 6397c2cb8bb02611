"""The whole config of one run: :class:`AgenticConfig` or :class:`RLVRConfig`, and how to tell them apart.

ROLL decides the pipeline by the script a user starts; roll reads it from the config: an explicit
``pipeline_type``, else the keys only one of the two pipelines has (``custom_envs``,
``train_env_manager`` ... versus ``rewards``, ``num_return_sequences_in_group`` ...). A config with
neither is agentic (ROLL's agentic examples often keep their env sections in an included file).

Validation here is pure: no registry, no files, no environment. Checks that need installed
plugins (names, env configs) are done by :func:`roll_core.config.resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from roll_core.config.algorithm import AlgorithmConfig, RewardNormalizationConfig
from roll_core.config.base import FreeDict, RollModel, compat
from roll_core.config.envs import ROLL_KEEP_ALL_FILTERS, AgentGatewayConfig, CustomEnvConfig, EnvManagerConfig
from roll_core.config.rlvr import (
    DatasetFilterConfig,
    RewardConfig,
    ValidationConfig,
    VLMFilterConfig,
)
from roll_core.config.workers import ActorInferConfig, ActorTrainConfig, WorkerConfig
from roll_core.errors import ConfigError, did_you_mean
from roll_core.validation import config_error, problems_message, warn

PipelineType = Literal["agentic", "rlvr"]


class RunSettings(RollModel):
    """Experiment bookkeeping, schedule, batch sizes and lengths (top-level keys)."""

    pipeline_type: PipelineType = Field(description="agentic or rlvr; inferred from the keys when absent.")
    exp_name: str = "roll"
    seed: int = 42
    val_seed: int | None = Field(
        None, description="roll: the seed the validation env instances are drawn from (agentic; RLVR validates on "
        "its fixed val data). Unset: seed, as in ROLL, so runs of different seeds validate on different instances. "
        "Set it (any fixed number) to compare runs of different seeds on the same instances."
    )
    pretrain: str | None = Field(None, description="Policy weights: a Hugging Face id or a local path.")
    reward_pretrain: str | None = Field(None, description="Critic / reward model weights.")
    output_dir: str = "./output"
    logging_dir: str = "./output/logs"
    render_save_dir: str | None = Field(None, description="Where frames / GIFs of trajectories go.")
    track_with: Literal["tensorboard", "wandb", "swanlab", "stdout"] = Field(
        "tensorboard", description="Where metrics go besides the progress line: tensorboard (event files under "
        "logging_dir), wandb, or stdout (the progress line only)."
    )
    tracker_kwargs: FreeDict = Field(
        default_factory=dict, description="Settings of the tracker: SummaryWriter's (log_dir, flush_secs, ...) "
        "or wandb.init's (project, entity, name, tags, mode, ...)."
    )
    max_steps: int = Field(500, description="Pipeline steps (ROLL's -1, no limit, is refused: roll's pipelines "
                           "run a set number of steps).")
    save_steps: int = Field(50, ge=0, description="Checkpoint every N steps (0: never).")
    logging_steps: int = Field(1, ge=1)
    eval_steps: int = Field(10, ge=0, description="Validate every N steps (0: never).")
    max_ckpt_to_keep: int = Field(0, ge=0, description="0 keeps every checkpoint.")
    save_best: bool = Field(
        True, description="Keep the actor of the best validation (val/success; the first step reaching it) as a "
        "model directory, output_dir/best, rewritten whenever validation reaches a new best."
    )
    resume_from_checkpoint: bool | str = Field(False, description="False, or the checkpoint path to resume.")
    checkpoint_config: FreeDict = compat({}, "Checkpoints go to output_dir on the local file system.")
    rollout_batch_size: int = Field(128, ge=1, description="Trajectories (agentic) / prompts (RLVR) per step.")
    val_batch_size: int = Field(
        128, description="Samples per validation; negative: every val env (agentic) / val prompt (RLVR) once."
    )
    prompt_length: int | None = Field(1024, ge=1)
    response_length: int | None = Field(None, ge=1)
    sequence_length: int | None = Field(None, ge=1, description="Max tokens of one sample (prompt + response).")
    val_prompt_length: int | None = Field(None, ge=1)
    val_sequence_length: int | None = Field(None, ge=1)
    async_generation_ratio: int = Field(
        0, ge=0, description="0: synchronous; k: rollouts may lag the policy by up to k versions."
    )
    partial_rollout: bool = Field(
        True, description="What a weight sync of async training does to a request being generated: True "
        "keeps its tokens (with their log-probs and versions) and continues it from prompt + partial response on "
        "the new weights; False throws them away and regenerates it. ROLL collects the unfinished outputs "
        "whenever async_generation_ratio > 0 (collect_non_finish); synchronous runs never sync mid-generation."
    )
    reproducible_generation: bool | None = Field(
        None, description="Synchronous runs (async_generation_ratio: 0) generate in lock-step rounds, so a "
        "request's batch, hence its float rounding, does not depend on timing: the same seed gives the same "
        "run to the bit with hf_infer / hf_train on CPU. It costs the overlap of slow env calls with "
        "generation (docs/architecture.md, \"Reproducible runs\"). null: on where the Ray cluster has no GPU."
    )
    max_running_requests: int = Field(128, ge=1)
    is_num_return_sequences_expand: bool = False
    num_nodes: int = compat(1, "The Ray cluster's nodes are used as they are.")
    num_gpus_per_node: int = compat(8, "The Ray cluster's GPUs are used as they are.")
    system_envs: dict[str, str] = Field(default_factory=dict)
    worker_niceness: int = Field(
        0, ge=0, le=39, description="How much lower than the driver's the priority of the workers of the local "
        "Ray cluster roll starts is (added to the driver's niceness; 0: the same, so other busy processes on "
        "the machine cannot starve training; Ray's own default is 15). A cluster joined with --address keeps "
        "its own setting (RAY_worker_niceness on `ray start`)."
    )
    generate_opt_level: int = compat(1)
    is_use_additional_prompts: bool = Field(
        False, description="RLVR with a query/response filter: each refill round after the first also draws up to "
        "max_additional_running_prompts spare prompts beyond the groups still missing, so fewer rounds fill a batch "
        "(spares not needed go back to the data stream). Filters refill batches with or without it, as in ROLL."
    )
    max_additional_running_prompts: int = Field(
        16, ge=0, description="is_use_additional_prompts: the most spare prompts in flight beyond those the batch misses."
    )
    max_groups_per_step: int | None = Field(
        None, ge=1, description="roll: the most groups (RLVR: prompts) one training step may consume while filters "
        "(query_filter_config, response_filter_config, group_filter_cls) drop groups; unset: 10 x a batch's "
        "groups. Reached before the batch is full: see unfilled_batch."
    )
    unfilled_batch: Literal["stop", "fill"] = Field(
        "stop", description="roll: what a step does when max_groups_per_step groups were consumed (agentic: "
        "or max_traj_per_env lets no dropped group be replaced) and fewer than a batch passed the filters. "
        "stop: the run stops naming the filter and its counts (data that cannot fill a batch). fill: the "
        "batch is completed with the most recently filtered groups, as an unfiltered run would have trained "
        "them (same batch shape and loss normalisers), counted as rollout/filtered_groups/refilled and "
        "warned about; for a policy that solves most of the data, whose groups are mostly all-success."
    )
    user_defined_rollout_loop_cls: str | None = compat(None)
    base_dir: str | None = compat(None)
    rpc_timeout: int = Field(
        3600, ge=1, description="Seconds the pipeline waits for one batch (training or validation) before it "
        "stops with an error naming what the rollout was doing."
    )
    rollout_dump_dir: str | None = compat(None)
    local_rank: int = compat(-1)
    profiler_timeline: bool = compat(False)
    profiler_memory: bool = compat(False)
    report_length_and_rewards: bool = compat(False)
    is_offload_states: bool = compat(False)
    is_offload_optimizer_states_in_train_step: bool = compat(False)
    length_profiler_dir: str | None = compat(None)
    profiler_output_dir: str | None = compat(None)
    model_update_buffer_size_mb: int = compat(1024)
    model_download_type: str | None = compat(None)
    rollout_mock: FreeDict | None = compat(None)

    @field_validator("resume_from_checkpoint")
    @classmethod
    def _empty_path_means_no(cls, value):
        return False if value == "" else value

    @property
    def effective_sequence_length(self) -> int | None:
        """``sequence_length``, or ``prompt_length + response_length`` as ROLL derives it."""
        if self.sequence_length is not None:
            return self.sequence_length
        if self.prompt_length is not None and self.response_length is not None:
            return self.prompt_length + self.response_length
        return None


class WarmupSFTConfig(RollModel):
    """``warmup_sft``: supervised steps on model-free demonstrations before RL (roll's own option).

    A randomly initialised model never writes a valid action, so RL alone cannot start; this
    teaches the answer format on trajectories the rollout engine plays with a model-free policy
    (``random``: valid but random actions, the format without the task). In RLVR the
    demonstrations are training prompts answered with the reference of a random row of the same
    domain (``random``) or their own (``scripted``: supervised fine-tuning). It has its own optimiser;
    RL then starts from the warm-started weights with a fresh one. See ``roll_core.pipeline.warmup``.
    """

    steps: int = Field(0, ge=0, description="Supervised optimiser steps before the first RL step (0: none).")
    policy: Literal["random", "scripted"] = Field(
        "random", description="Who plays the demonstrations: random valid actions (RLVR: a random row's "
        "reference answer), or the env's solver (RLVR: the prompt's own reference)."
    )
    batch_size: int | None = Field(
        None, ge=1, description="Trajectories per supervised step; default rollout_batch_size."
    )
    learning_rate: float | None = Field(
        None, gt=0.0, description="Peak learning rate of the warm start; default actor_train's."
    )
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="How the warm start's learning rate moves over its `steps`: constant, or "
        "decaying to 0 (linear, cosine). A decay lets a longer warm start settle instead of jittering."
    )
    stop_nll: float | None = Field(
        None, gt=0.0, description="Stop the warm start early once the mean response NLL of the last "
        "`stop_window` steps is at or below this (each step's demonstrations are new instances, so "
        "the NLL before its update is a held-out figure); `steps` stays the most it may take."
    )
    stop_window: int = Field(20, ge=1, description="Steps averaged for `stop_nll`.")
    solver_fraction: float = Field(
        0.0, ge=0.0, le=1.0,
        description="Fraction of the warm-start steps whose demonstrations the env's solver plays "
        "(policy scripted) instead of `policy`; 0 teaches only the format. Report it with results.",
    )
    slip_rate: float = Field(
        0.0, ge=0.0, lt=1.0,
        description="Fraction of the solver's demonstration turns played as a random valid move instead "
        "(noise injected into the demonstrator, as in DART). A slip stays in the conversation but out of "
        "the loss, as do moves where the solver then has no plan; the clone learns the solver's moves "
        "from states off its path, such as a grid left unchanged by a move into a wall. 0: none.",
    )

    @model_validator(mode="after")
    def _slips_need_the_solver(self):
        if self.slip_rate and self.policy != "scripted" and not self.solver_fraction:
            raise ValueError("warmup_sft.slip_rate makes the solver slip, but no demonstration is the solver's "
                             "(policy is 'random' and solver_fraction is 0): set policy: scripted or a "
                             "solver_fraction, or remove slip_rate")
        return self


class PipelineConfig(AlgorithmConfig, RunSettings):
    """Everything both pipelines share: run settings, algorithm settings and the four workers."""

    actor_train: ActorTrainConfig = Field(default_factory=ActorTrainConfig)
    actor_infer: ActorInferConfig = Field(default_factory=ActorInferConfig)
    critic: WorkerConfig = Field(default_factory=WorkerConfig, description="Built only for critic estimators.")
    reference: WorkerConfig = Field(default_factory=WorkerConfig, description="Built only when KL is used.")
    reward: WorkerConfig = compat(WorkerConfig())
    warmup_sft: WarmupSFTConfig | None = Field(
        None, description="roll: supervised warm start before RL (see WarmupSFTConfig)."
    )
    batch_adjust_mode: Literal["copy", "delete", "auto", "random_sample"] = Field(
        "copy", description="How a step's rows are made to split evenly over the data-parallel training ranks: "
        "copy random rows, delete random rows, whichever changes fewer (auto), or resample (random_sample)."
    )

    @model_validator(mode="after")
    def _check_common(self):
        problems = []
        if self.track_with == "swanlab":
            problems.append("track_with: swanlab is not supported by roll; use tensorboard, wandb or stdout")
        if self.effective_sequence_length is None:
            problems.append(
                "set sequence_length (or prompt_length and response_length): it bounds every sample's length"
            )
        if self.max_steps == -1:
            problems.append("max_steps is -1 (no limit), which roll's pipelines do not support: they run a set "
                            "number of steps (the learning-rate schedule and the checkpoints count on it); set "
                            "max_steps to a positive number")
        elif self.max_steps < 1:
            problems.append(f"max_steps must be a positive number of pipeline steps, got {self.max_steps}")
        if self.add_token_level_kl and not self.runs_reference:
            problems.append("add_token_level_kl puts the KL to the reference model into the rewards, but no reference "
                            "model runs (init_kl_coef is 0, use_kl_loss and enable_reference are off); set "
                            "init_kl_coef > 0 (the penalty's weight) or turn add_token_level_kl off")
        if self.force_disable_old_logprobs_recompute and self.runs_reference:
            problems.append("force_disable_old_logprobs_recompute is on, but the KL to the reference model "
                            "(init_kl_coef > 0, use_kl_loss or enable_reference) is measured against the old "
                            "policy's log-probs, which actor_train must then compute; turn one of them off")
        if self.is_use_additional_prompts and self.max_additional_running_prompts < 1:
            problems.append("is_use_additional_prompts is on, but max_additional_running_prompts is "
                            f"{self.max_additional_running_prompts}; give the number of spare prompts (ROLL: 16)")
        if self.val_batch_size == 0:
            problems.append("val_batch_size is 0, which would validate on nothing; set a positive number, or -1 "
                            "to validate on every val env (agentic) / val prompt (RLVR) once, or eval_steps: 0 "
                            "to turn validation off")
        if problems:
            raise ValueError("; ".join(problems))
        for name, worker in self.workers().items():
            flash_attn = worker.model_args.flash_attn
            if flash_attn is not None and worker.model_args.attn_implementation is None:
                warn(f"{name}.model_args.flash_attn ({flash_attn}) is ignored, as in ROLL; set "
                     f"{name}.model_args.attn_implementation: {flash_attn} to choose the attention kernel")
        return self

    def workers(self) -> dict[str, WorkerConfig]:
        """The worker sections by YAML name."""
        return {name: getattr(self, name) for name in ("actor_train", "actor_infer", "critic", "reference")}


class AgenticConfig(PipelineConfig):
    """Multi-turn agentic RL in text environments (ROLL's ``AgenticConfig``)."""

    pipeline_type: Literal["agentic"] = "agentic"
    custom_envs: dict[str, CustomEnvConfig] = Field(default_factory=dict, description="Env presets by tag.")
    train_env_manager: EnvManagerConfig = Field(default_factory=EnvManagerConfig)
    val_env_manager: EnvManagerConfig = Field(default_factory=EnvManagerConfig)
    agent_gateway: AgentGatewayConfig = Field(default_factory=AgentGatewayConfig,
                                              description="The OpenAI-compatible endpoint of agent tags.")
    reward_normalization: RewardNormalizationConfig = Field(default_factory=RewardNormalizationConfig)
    episode_reward_weight: float = Field(1.0, description="GiGPO: weight of the episode-level advantage.")
    step_reward_weight: float = Field(1.0, description="GiGPO: weight of the step-level advantage.")
    step_reward_gamma: float = Field(0.95, ge=0.0, le=1.0, description="Discount of per-step env rewards.")

    def env_managers(self) -> dict[str, EnvManagerConfig]:
        return {"train_env_manager": self.train_env_manager, "val_env_manager": self.val_env_manager}

    @model_validator(mode="after")
    def _check_agentic(self):
        problems: list[str] = []
        for path, manager in self.env_managers().items():
            problems += manager.partition_problems(path)
        for path, manager, batch in (("train_env_manager", self.train_env_manager, self.rollout_batch_size),
                                     ("val_env_manager", self.val_env_manager, self.val_batch_size)):
            cap = manager.max_traj_per_env
            if cap > 0 and batch > cap * manager.num_env_groups * manager.group_size:
                problems.append(
                    f"{path}.max_traj_per_env ({cap}) lets its {manager.num_env_groups} groups of "
                    f"{manager.group_size} play at most {cap * manager.num_env_groups * manager.group_size} "
                    f"episodes per step, fewer than the batch of {batch}; raise it or set -1 (no cap)"
                )
        group_size = self.train_env_manager.group_size
        if self.rollout_batch_size % group_size:
            problems.append(
                f"rollout_batch_size ({self.rollout_batch_size}) is not a multiple of "
                f"train_env_manager.group_size ({group_size}); a batch is made of complete groups"
            )
        limit = self.effective_sequence_length
        for tag, env in self.custom_envs.items():
            if limit is not None and env.max_tokens_per_step is not None and env.max_tokens_per_step > limit:
                problems.append(
                    f"custom_envs.{tag}.max_tokens_per_step ({env.max_tokens_per_step}) exceeds the "
                    f"sequence length ({limit}); one turn could never fit into a sample"
                )
        if problems:
            raise ValueError("; ".join(problems))
        self._agentic_warnings()
        return self

    def _agentic_warnings(self) -> None:
        train = self.train_env_manager
        cap = train.max_traj_per_env
        if train.group_filter_cls not in (None, "keep_all", *ROLL_KEEP_ALL_FILTERS) and cap > 0 and (
                self.rollout_batch_size >= cap * train.num_envs):
            outcome = ("a step in which a group is dropped is completed with filtered groups "
                       "(unfilled_batch: fill)" if self.unfilled_batch == "fill"
                       else "the first dropped group will stop the step")
            warn(f"train_env_manager.group_filter_cls ({train.group_filter_cls}) drops groups, but max_traj_per_env "
                 f"({cap}) leaves no episode to replace a dropped group within a step (the batch of "
                 f"{self.rollout_batch_size} uses them all); {outcome}. Raise max_traj_per_env or set -1")
        val = self.val_env_manager
        if val.group_size != 1:
            warn(f"val_env_manager.group_size is {val.group_size}; 1 is recommended: validation samples "
                 "greedily, so every env of a group would produce the same trajectory")
        if "val_batch_size" in self.model_fields_set and self.val_batch_size > 0 and self.val_batch_size % val.num_envs:
            warn(f"val_batch_size ({self.val_batch_size}) is not a multiple of the {val.num_envs} validation "
                 "envs, so some envs run one episode more than others")
        if self.actor_infer.generating_args.num_return_sequences != 1:
            warn("actor_infer.generating_args.num_return_sequences is ignored by the agentic pipeline "
                 "(set to 1); groups come from train_env_manager.group_size")


class RLVRConfig(PipelineConfig):
    """RL with verifiable rewards on prompt datasets (ROLL's ``RLVRConfig``)."""

    pipeline_type: Literal["rlvr"] = "rlvr"
    num_return_sequences_in_group: int = Field(1, ge=1, description="Responses per prompt (the group size).")
    rewards: dict[str, RewardConfig] = Field(default_factory=dict, description="Reward settings per data domain.")
    validation: ValidationConfig | None = None
    rl_loss_coef: float = 1.0
    importance_sampling: Literal["token", "seq"] | None = Field(
        None, description="ROLL's RLVR name of ratio_type (seq: GSPO's sequence ratio); resolve copies it there."
    )
    max_len_mask: bool = Field(False, description="Do not train on responses cut at the length limit.")
    mask_type: Literal["all", "loss"] = compat("loss", "The sample masks always apply to the loss terms.")
    difficulty_mask: bool = Field(
        False, description="Train only on prompts whose group-mean score is strictly between the thresholds."
    )
    difficulty_low_threshold: float = Field(0.0, description="difficulty_mask: lower bound of the group mean.")
    difficulty_high_threshold: float = Field(1.0, description="difficulty_mask: upper bound of the group mean.")
    error_max_len_clip: bool = Field(
        False, description="Train on a failed response (score <= 0) only when it is shorter than the threshold."
    )
    error_max_len_threshold: int = Field(9999999999, ge=1, description="error_max_len_clip: length in tokens.")
    difficulty_loss_weight: bool = Field(
        False, description="Weight the PG term of each response by 0.5 + 1.5 x its prompt's failure rate."
    )
    length_loss_weight: bool = Field(
        False, description="Weight the PG term of each response by 1.5 - its length / the longest response."
    )
    balance_length: bool = compat(False, "Batches are split over ranks balanced by tokens already.")
    minibatch_data_iter_num: int = compat(1, "ppo_epochs sets the passes over a batch.")
    val_greedy: bool = False
    val_n_sample: int = Field(1, ge=1)
    global_template: str | None = None
    dataset_filter: DatasetFilterConfig = compat(DatasetFilterConfig(), "Every row of the data files is used.")
    reward_model: WorkerConfig | None = compat(None, "Rewards come from registered reward functions (rewards).")
    save_logging_board_dir: str | None = compat(None)
    vlm_filter: VLMFilterConfig = compat(VLMFilterConfig())
    postive_loss_coef: float = compat(0.0)
    use_topr_neg_loss_coef: float = compat(0.0)
    use_policy_loss_type: Literal["PPO", "PG"] = compat("PPO")
    use_topr_loss: bool = compat(False)

    @model_validator(mode="after")
    def _check_rlvr(self):
        problems: list[str] = []
        length = self.effective_sequence_length
        if length is not None and self.prompt_length is not None and length <= self.prompt_length:
            problems.append(
                f"sequence_length ({length}) leaves no room for a response after prompt_length "
                f"({self.prompt_length})"
            )
        if self.difficulty_low_threshold > self.difficulty_high_threshold:
            problems.append(
                f"difficulty_low_threshold ({self.difficulty_low_threshold}) is above "
                f"difficulty_high_threshold ({self.difficulty_high_threshold})"
            )
        data_args = self.actor_train.data_args
        probs = (data_args.domain_interleave_probs if data_args else None) or {}
        for domain in probs:
            if self.rewards and domain not in self.rewards:
                problems.append(
                    f"actor_train.data_args.domain_interleave_probs names domain {domain!r}, which has no "
                    f"entry in rewards (domains: {', '.join(self.rewards)}).{did_you_mean(domain, self.rewards)}"
                )
        if problems:
            raise ValueError("; ".join(problems))
        infer_n = self.actor_infer.generating_args.num_return_sequences
        if "num_return_sequences" in self.actor_infer.generating_args.model_fields_set and (
            infer_n != self.num_return_sequences_in_group
        ):
            warn(f"actor_infer.generating_args.num_return_sequences ({infer_n}) is replaced by "
                 f"num_return_sequences_in_group ({self.num_return_sequences_in_group})")
        return self


#: pipeline_type -> config class
PIPELINES: dict[str, type[PipelineConfig]] = {"agentic": AgenticConfig, "rlvr": RLVRConfig}
#: what a config with no pipeline-specific key is
DEFAULT_PIPELINE = "agentic"


def pipeline_keys(pipeline_type: str) -> set[str]:
    """Top-level keys only ``pipeline_type`` configs have (they identify it)."""
    return set(PIPELINES[pipeline_type].model_fields) - set(PipelineConfig.model_fields)


def all_top_level_keys() -> set[str]:
    return set().union(*(cls.model_fields for cls in PIPELINES.values()))


def pipeline_class(data: Mapping[str, Any]) -> type[PipelineConfig]:
    """The config class for ``data``: its ``pipeline_type``, else the one its keys belong to."""
    explicit = data.get("pipeline_type")
    if explicit is not None:
        if explicit not in PIPELINES:
            raise ConfigError(
                f"pipeline_type must be one of {', '.join(PIPELINES)}, got {explicit!r}."
                f"{did_you_mean(str(explicit), PIPELINES)}"
            )
        return PIPELINES[explicit]
    found = {name: sorted(pipeline_keys(name) & set(data)) for name in PIPELINES}
    found = {name: keys for name, keys in found.items() if keys}
    if len(found) > 1:
        listed = " and ".join(f"{name} keys ({', '.join(keys)})" for name, keys in found.items())
        raise ConfigError(
            f"The config mixes {listed}; a run is either agentic or RLVR. Remove the keys of the other "
            "pipeline, or set pipeline_type to say which one is meant."
        )
    return PIPELINES[next(iter(found), DEFAULT_PIPELINE)]


def validate_config(data: Mapping[str, Any], *, source: str | None = None) -> PipelineConfig:
    """Validate plain config data (no interpolation left) into an :class:`AgenticConfig` / :class:`RLVRConfig`.

    Raises :class:`ConfigError` naming the YAML path of every problem.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(problems_message([f"the top level must be a mapping, got {type(data).__name__}"],
                                           source))
    cls = pipeline_class(data)
    try:
        return cls.model_validate(dict(data))
    except ValidationError as exc:
        raise config_error(exc, cls, source=source, extra_hint=_other_pipeline_hint(cls)) from None


def _other_pipeline_hint(cls: type[PipelineConfig]):
    def hint(path: tuple[str | int, ...], key: str) -> str:
        if path:
            return ""
        for name, other in PIPELINES.items():
            if other is not cls and key in other.model_fields:
                return f" ({key!r} is a key of {name} configs, and this one is {cls.model_fields['pipeline_type'].default})"
        return ""
    return hint
