"""Worker sections: ``actor_train``, ``actor_infer``, ``critic``, ``reference`` (and RLVR's rewards).

Field names and defaults are ROLL's (``roll/configs/worker_config.py``, ``model_args.py``,
``data_args.py``, ``generating_args``); ``training_args`` carries the Hugging Face
``TrainingArguments`` fields that RL configs use. Where roll decides differently (the
``pg_variant`` hyper-parameters are real fields; ``pg_variant`` defaults to ``ppo``) the field
description says so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from roll_core.config.base import FreeDict, NoneStr, RollModel, compat, fixed
from roll_core.config.device_mapping import parse_device_mapping
from roll_core.errors import did_you_mean


class ModelArgs(RollModel):
    """Which weights to load and how (``model_args``)."""

    model_name_or_path: str | None = Field(
        None, description="HF id or local path; defaults to `pretrain` (critic: `reward_pretrain`)."
    )
    adapter_name_or_path: str | None = Field(
        None, description="A LoRA adapter (a peft directory, e.g. a roll LoRA checkpoint) to continue training; "
        "turns LoRA on.")
    attn_implementation: Annotated[
        Literal["sdpa", "fa2", "flash_attention_2", "eager", "auto"] | None, NoneStr
    ] = Field(None, description="Attention kernel; `fa2` is flash-attention 2. None: the model's default.")
    dtype: Literal["fp32", "bf16", "fp16"] | None = Field("bf16", description="Parameter dtype.")
    disable_gradient_checkpointing: bool = False
    gradient_checkpointing_use_reentrant: bool | None = None
    model_type: str | None = compat(None, "The role decides the head: a value head for critic, the LM head otherwise.")
    num_labels: int = compat(1, "roll's critic head is one scalar per token.")
    model_config_kwargs: FreeDict = Field(
        default_factory=dict, description="Overrides of the model's HF config (e.g. {dropout: 0.0}) when it is loaded."
    )
    freeze_module_prefix: str | None = Field(
        None, description="Comma-separated parameter-name prefixes that are not trained (e.g. model.embed_tokens)."
    )
    moe_aux_loss_coef: float | None = compat(None, "roll's built-in backends train dense models.")
    ulysses_size: int = compat(1, "Ulysses sequence parallelism is not implemented; sequences stay on one rank.")
    lora_target: str | None = Field(
        None, description="LoRA on these modules: comma-separated names (q_proj,v_proj), a regular expression, or "
        "all / all-linear (every linear layer but the LM head). Unset: the whole model is fine-tuned.")
    lora_rank: int = Field(8, ge=1, description="LoRA rank r.")
    lora_alpha: int | None = Field(None, ge=1, description="LoRA scale alpha (the update is alpha/r * B A); "
                                   "default 2 * lora_rank, as in ROLL.")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input (training only).")
    additional_target: str | None = Field(
        None, description="Comma-separated modules trained in full besides the adapters and saved with them "
        "(peft's modules_to_save), e.g. lm_head.")
    autocast_adapter_dtype: bool = Field(
        True, description="Keep the adapter weights in fp32 when the model is bf16/fp16 (peft's option).")
    device_map: str | None = compat("balanced")
    vision_dp: bool = compat(False)
    flash_attn: str | None = compat(None, "ROLL ignores it too (several ROLL examples carry it); use "
                                          "attn_implementation.")


#: transformers' ``SchedulerType`` values (``get_scheduler`` names), kept here so that validating a
#: config never imports transformers; a test keeps the two in step
LR_SCHEDULER_TYPES = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                      "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                      "warmup_stable_decay", "greedy")
#: schedulers that step on a metric (transformers' ``ReduceLROnPlateau``, ``GreedyLR``): roll steps without one
METRIC_SCHEDULERS = ("reduce_lr_on_plateau", "greedy")
#: schedulers that need one of these ``lr_scheduler_kwargs`` (transformers raises in the train worker
#: otherwise, after Ray has started); a test keeps the table in step with transformers
SCHEDULER_KWARGS: dict[str, tuple[str, ...]] = {
    "cosine_with_min_lr": ("min_lr", "min_lr_rate"),
    "cosine_warmup_with_min_lr": ("min_lr", "min_lr_rate"),
    "warmup_stable_decay": ("num_decay_steps",),
}


class TrainingArgs(RollModel):
    """Optimiser and schedule (``training_args``): the Hugging Face TrainingArguments names."""

    learning_rate: float = Field(5e-5, ge=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0)
    max_grad_norm: float = Field(1.0, ge=0.0, description="Gradient clipping norm (0 disables).")
    per_device_train_batch_size: int = Field(8, ge=1)
    per_device_eval_batch_size: int = compat(8, "infer_batch_size sets the micro-batch of forward passes.")
    gradient_accumulation_steps: int = Field(1, ge=1)
    num_train_epochs: float = compat(3.0, "The pipeline's max_steps and ppo_epochs decide how long training runs.")
    max_steps: int = Field(-1, description="Optimiser steps; -1: derived from the pipeline's max_steps.")
    lr_scheduler_type: str = Field("linear", description="A transformers SchedulerType name.")
    lr_scheduler_kwargs: FreeDict = Field(default_factory=dict)

    @field_validator("lr_scheduler_type")
    @classmethod
    def _known_scheduler(cls, value: str) -> str:
        if value not in LR_SCHEDULER_TYPES:  # checked here, not only when a train worker builds its optimiser
            raise ValueError(f"unknown scheduler {value!r}.{did_you_mean(value, LR_SCHEDULER_TYPES)} "
                             f"Choose one of {', '.join(LR_SCHEDULER_TYPES)}")
        if value in METRIC_SCHEDULERS:
            raise ValueError(f"{value} steps on a validation metric, but roll steps the schedule once per optimiser "
                             "step without one; choose another schedule (e.g. cosine or constant_with_warmup)")
        return value

    @model_validator(mode="after")
    def _scheduler_kwargs_given(self):
        needed = SCHEDULER_KWARGS.get(self.lr_scheduler_type)
        if needed and not set(needed) & set(self.lr_scheduler_kwargs):
            raise ValueError(f"lr_scheduler_type {self.lr_scheduler_type} needs {' or '.join(needed)} in "
                             f"lr_scheduler_kwargs (e.g. lr_scheduler_kwargs: {{{needed[0]}: ...}})")
        return self

    warmup_steps: int | float = Field(0, ge=0)
    warmup_ratio: float = Field(0.0, ge=0.0, le=1.0)
    optim: Literal["adamw_torch", "adamw_torch_fused", "adamw_hf", "sgd", "adafactor"] = Field(
        "adamw_torch", description="Optimizer (HF TrainingArguments names): AdamW, fused AdamW, SGD or Adafactor."
    )
    seed: int = compat(42, "The top-level seed seeds every worker.")
    data_seed: int | None = compat(None, "The top-level seed orders the data.")
    bf16: bool = compat(False, "model_args.dtype sets the precision.")
    fp16: bool = compat(False, "model_args.dtype sets the precision.")
    gradient_checkpointing: bool = compat(False, "model_args.disable_gradient_checkpointing decides, as in ROLL.")
    dataloader_num_workers: int = compat(0, "Batches come from the rollout, not a data loader.")
    output_dir: str | None = compat(None, "ROLL copies the top-level output_dir here.")
    logging_steps: int | float = compat(500)
    save_steps: int | float = compat(500)


#: why beam search and repetition penalties are refused
_SAMPLING_ONLY = ("roll samples token by token and trains on the sampled tokens' log-probs, so beam search and "
                  "repetition penalties (the sampled tokens' log-probs would differ from the policy's) are not "
                  "supported.")


class GeneratingArgs(RollModel):
    """Sampling settings of a generating worker (``generating_args``)."""

    max_new_tokens: int | None = Field(1024, ge=1)
    max_length: int | None = compat(1024, "max_new_tokens and sequence_length bound the length.")
    temperature: float = Field(0.95, ge=0.0)
    top_p: float = Field(0.7, gt=0.0, le=1.0)
    top_k: int = Field(50, ge=-1, description="0 or -1: no top-k filtering.")
    do_sample: bool = True
    num_beams: int = fixed(1, _SAMPLING_ONLY)
    num_return_sequences: int = Field(1, ge=1)
    repetition_penalty: float = fixed(1.0, _SAMPLING_ONLY)
    length_penalty: float = fixed(1.0, _SAMPLING_ONLY)
    stop_strings: list[str] | None = None
    include_stop_str_in_output: bool | None = compat(
        None, "roll trains on the generated tokens, so a stop string that was generated stays in the response."
    )
    logprobs: int | None = compat(None, "The log-prob of every sampled token is always returned.")


class DataArgs(RollModel):
    """Dataset and prompt template (``data_args``)."""

    template: str | None = Field("native", description="Chat template name used to build prompts.")
    file_name: str | list[str] | None = Field(None, description="Training data file(s), JSON lines.")
    eval_file_name: str | list[str] | None = None
    domain_interleave_probs: dict[str, float] | None = Field(
        None, description="Sampling probability of each RLVR domain in a batch."
    )
    dataset_type: str | list[str] | None = Field(
        "json", description="Format of file_name: json or jsonl (one object per line; both names mean that)."
    )
    preprocessing_num_workers: int | None = compat(None, "Prompts are tokenised once, in the driver.")
    cache_path: str | None = compat(None, "Prompts are tokenised at start-up, not cached.")
    tag: str | None = Field("tag", description="Column holding the domain tag.")
    id: str | None = Field("id", description="Column holding the sample id.")
    prompt: str | None = Field(None, description="Column holding the prompt (exclusive with messages).")
    response: str | None = Field("solution", description="Column holding the reference answer.")
    messages: str | None = Field(None, description="Column holding chat messages (exclusive with prompt).")
    dataset_dir: str | None = compat(None)
    interleave_probs: str | float | list[float] | None = compat(None)

    @field_validator("domain_interleave_probs")
    @classmethod
    def _non_negative(cls, probs):
        if probs and any(p < 0 for p in probs.values()):
            raise ValueError(f"domain_interleave_probs must not be negative, got {probs}")
        if probs and not any(p > 0 for p in probs.values()):
            raise ValueError(f"domain_interleave_probs {probs} gives every domain probability 0, so no prompt "
                             "could be drawn; give at least one domain a positive probability (or remove the "
                             "setting to draw from all rows)")
        return probs

    @model_validator(mode="after")
    def _prompt_or_messages(self):
        if self.prompt is not None and self.messages is not None:
            raise ValueError("set either data_args.prompt or data_args.messages, not both")
        return self


class StrategyArgs(RollModel):
    """The backend of a worker; ``strategy_config`` is checked by that strategy plugin."""

    strategy_name: str = Field(description="A registered strategy (`roll plugins list`).")
    strategy_config: FreeDict = Field(default_factory=dict, description="Backend-specific settings.")


class SequencePackingArgs(RollModel):
    """How packed micro-batches are formed (``use_sequence_packing``; roll_core/strategies/packing.py)."""

    algorithm: Literal["none", "load_balance"] = Field(
        "none", description="none: fill micro-batches in row order; load_balance: spread rows over the fewest "
        "micro-batches with near-equal token counts.")
    max_packed_sequence_length_forward: int | None = Field(
        None, ge=1, description="Token budget of a packed forward-only micro-batch (log-probs, values); unset: "
        "infer_batch_size rows of the batch's padded width.")
    max_packed_sequence_length_train: int | None = Field(
        None, ge=1, description="Token budget of a packed training micro-batch; unset: "
        "per_device_train_batch_size rows of the batch's padded width (the padded path's peak).")
    min_num_micro_batches_forward: int = Field(1, ge=1, description="Split forward passes into at least this many.")
    min_num_micro_batches_train: int = Field(1, ge=1, description="Split a train step into at least this many.")


DeviceMapping = Annotated[list[int] | None, BeforeValidator(parse_device_mapping)]


class WorkerConfig(RollModel):
    """One cluster of workers sharing a model: what it loads, how it runs, where it is placed."""

    model_args: ModelArgs = Field(default_factory=ModelArgs)
    training_args: TrainingArgs = Field(default_factory=TrainingArgs)
    generating_args: GeneratingArgs | None = None
    data_args: DataArgs | None = None
    strategy_args: StrategyArgs | None = Field(
        None, description="Backend; unset means roll's built-in torch/transformers strategy for the role."
    )
    device_mapping: DeviceMapping = Field(
        None, description="Device ids (a list or 'list(range(a,b))'); unset: CPU only."
    )
    num_gpus_per_worker: int = Field(1, ge=1)
    world_size: int | None = Field(None, ge=1, description="Number of workers; derived from device_mapping.")
    infer_batch_size: int = Field(16, ge=1, description="Micro-batch size of forward-only passes.")
    system_envs: dict[str, str] = Field(default_factory=dict, description="Environment variables of the workers.")
    ray_resources: dict[str, float] = Field(
        default_factory=dict, description="roll: extra Ray resources each rank reserves (env managers: each actor), "
        "e.g. {trainer_node: 1} to keep this role on the nodes started with that custom resource."
    )
    apply_loss_scale: bool = compat(
        True, "roll always divides every micro-batch loss by the whole step's normalisers, so gradients equal "
        "those of the global batch (docs/algorithms.md)."
    )
    name: str | None = compat(None, "ROLL sets it from the section name.")
    worker_cls: str | None = compat(None, "roll picks worker classes itself.")
    model_update_frequency: int = compat(1)
    backend_timeout: int = compat(30)
    max_concurrency: int = compat(1)
    use_dynamic_batching_in_train: bool = Field(
        False, description="Without packing: padded training micro-batches of rows sorted by length under "
        "max_tokens_per_microbatch_in_train (rows x longest row).")
    max_tokens_per_microbatch_in_train: int = Field(0, ge=0, description="Padded-token budget of dynamic batching.")
    sequence_length_round_in_train: int = Field(
        4, ge=1, description="Dynamic batching: a micro-batch's longest row is counted rounded up to this.")
    use_dynamic_batching_in_infer: bool = Field(
        False, description="As use_dynamic_batching_in_train, for forward-only passes (log-probs, values).")
    max_tokens_per_microbatch_in_infer: int | None = Field(
        None, ge=1, description="Padded-token budget of dynamic batching in forward-only passes.")
    sequence_length_round_in_infer: int = Field(4, ge=1, description="As sequence_length_round_in_train.")
    offload_nccl: bool = compat(False)
    use_sequence_packing: bool | None = Field(
        None, description="Padding-free training: a micro-batch's rows packed into one sequence under a token "
        "budget (sequence_packing_args). Unset: on for hf_train, its critic and deepspeed_train wherever the "
        "model keeps packed rows apart (checked when the model loads); true: required; false: padded rows.")
    sequence_packing_args: SequencePackingArgs = Field(default_factory=SequencePackingArgs)
    logits_in_fp32: bool = compat(True)
    checkpoint_config: dict[str, Any] | None = compat(None, "ROLL copies the top-level checkpoint_config.")

    @model_validator(mode="after")
    def _dynamic_batching_has_a_budget(self):
        for on, budget, name in ((self.use_dynamic_batching_in_train, self.max_tokens_per_microbatch_in_train, "train"),
                                 (self.use_dynamic_batching_in_infer, self.max_tokens_per_microbatch_in_infer, "infer")):
            if on and not budget:
                raise ValueError(f"use_dynamic_batching_in_{name} needs max_tokens_per_microbatch_in_{name} (the "
                                 "token budget of one micro-batch, e.g. per_device_train_batch_size x sequence_length)")
        return self

    @model_validator(mode="after")
    def _devices_split_into_workers(self):
        if self.device_mapping is not None and len(self.device_mapping) % self.num_gpus_per_worker:
            raise ValueError(
                f"device_mapping has {len(self.device_mapping)} devices, which does not split into workers "
                f"of num_gpus_per_worker={self.num_gpus_per_worker}"
            )
        return self


class PolicyLossArgs(RollModel):
    """Hyper-parameters of the policy-gradient variants (real, validated fields in roll)."""

    pg_variant: str = Field(
        "ppo", description="A registered policy loss: ppo, vanilla, tis, topr, cispo, kimi15, ..."
    )
    tis_lower_bound: float = Field(0.0, ge=0.0, description="tis: lower clip of the importance ratio.")
    tis_upper_bound: float = Field(1.0, gt=0.0, description="tis: upper clip of the importance ratio.")
    cispo_epsilon_low: float = Field(0.1, ge=0.0, description="cispo: ratio clip below 1.")
    cispo_epsilon_high: float = Field(0.1, ge=0.0, description="cispo: ratio clip above 1.")
    cispo_use_unified_mask: bool = Field(False, description="cispo: zero tokens PPO would clip.")
    kimi15_tau: float = Field(0.1, ge=0.0, description="kimi15: weight of the squared log-ratio term.")
    topr_positive_weight: float = Field(1.0, ge=0.0, description="topr: weight of positive samples.")
    topr_negative_weight: float = Field(1.0, ge=0.0, description="topr: weight of negative samples.")
    dual_clip_c: float = Field(3.0, gt=1.0, description="Dual-clip bound c (used when dual_clip_loss).")

    @model_validator(mode="after")
    def _tis_bounds_ordered(self):
        if self.tis_lower_bound > self.tis_upper_bound:
            raise ValueError(
                f"tis_lower_bound ({self.tis_lower_bound}) is above tis_upper_bound ({self.tis_upper_bound})"
            )
        return self


class ActorTrainConfig(PolicyLossArgs, WorkerConfig):
    """``actor_train``: the policy being trained, with its loss settings."""


class ActorInferConfig(WorkerConfig):
    """``actor_infer``: the policy generating rollouts; it always has sampling settings."""

    generating_args: GeneratingArgs = Field(default_factory=GeneratingArgs)
