"""RLVR sections: per-domain ``rewards``, ``validation`` and dataset filters (ROLL's ``rlvr_config``).

Each ``rewards`` entry is one data domain. roll scores it with a registered reward function
(hook ``roll_register_rewards``) named by ``reward_type``, or by the domain key when
``reward_type`` is unset, in the driver or in the domain's reward worker group (ROLL's worker
fields: ``device_mapping`` / ``world_size`` / ``num_gpus_per_worker`` / ``ray_resources``,
``model_args`` / ``strategy_args`` / ``generating_args`` of a judge or reward model; see
:mod:`roll_core.rollout.rlvr.reward_scoring`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_serializer, field_validator, model_validator

from roll_core.config.base import FreeDict, RollModel, compat
from roll_core.config.workers import (
    DataArgs,
    DeviceMapping,
    GeneratingArgs,
    ModelArgs,
    StrategyArgs,
    TrainingArgs,
    WorkerConfig,
)
from roll_core.errors import did_you_mean

#: filter type -> the filter_args it reads (ROLL's defaults apply to missing ones; see roll_core.rollout.rlvr.reward_filters)
FILTER_ARGS: dict[str, tuple[str, ...]] = {"no_filter": (), "mean_filter": ("threshold_up", "threshold_down"),
                                           "std_filter": ("std_threshold",)}


class RewardFilterConfig(RollModel):
    """ROLL's reward filter: drop a prompt's group (query filter) or a response (response filter) by reward.

    ``mean_filter`` drops when the mean reward is ``<= threshold_down`` (default -1) or ``>=
    threshold_up`` (default +inf); ``std_filter`` drops when the rewards' standard deviation is
    ``<= std_threshold`` (default -1; 0 drops groups whose rewards are all equal).
    """

    type: Literal["no_filter", "mean_filter", "std_filter"] = "no_filter"
    filter_args: FreeDict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_args(self):
        known = FILTER_ARGS[self.type]
        for key, value in self.filter_args.items():
            if key not in known:
                raise ValueError(f"filter_args.{key} is not read by {self.type} (it reads: "
                                 f"{', '.join(known) or 'nothing'}).{did_you_mean(key, known)}")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"filter_args.{key} must be a number, got {value!r}")
        return self

    @property
    def active(self) -> bool:
        return self.type != "no_filter"


class RewardConfig(WorkerConfig):
    """One reward domain: which reward function scores it and which data tags belong to it."""

    reward_type: str | None = Field(None, description="Registered reward function; default: the domain key.")
    tag_included: list[str] = Field(default_factory=list, description="Data tags scored by this domain.")
    response_length_penalty_coef: float = 0.0
    length_penalty_scope: Literal["all", "paid"] = Field(
        "all", description="roll: which samples response_length_penalty_coef charges: all (ROLL's), or only those "
        "the reward paid (a shorter right answer is better; a shorter wrong one is not, so the penalty cannot "
        "teach short wrong replies).")
    required_format: str | None = Field(
        None, description="roll: a regular expression (re.search) a response must match to keep its whole score; "
        "one that does not keeps unformatted_credit of it. The format is paid only with the answer (a well-formed "
        "wrong reply earns nothing), unlike a second domain that pays for the format alone.")
    unformatted_credit: float = Field(0.5, ge=0.0, le=1.0, description="roll: with required_format, the share of "
                                      "its score a response that does not match keeps.")
    query_filter_config: RewardFilterConfig = Field(
        default_factory=RewardFilterConfig, description="Drop a prompt whose group's rewards fail the filter "
        "(training only); another prompt takes its place (see is_use_additional_prompts, max_groups_per_step).")
    response_filter_config: RewardFilterConfig = Field(
        default_factory=RewardFilterConfig, description="Resample a response whose reward fails the filter (up to "
        "5 times; then its prompt is dropped); mean_filter only: a single reward has no spread.")
    format_pattern: str | None = Field(None, description="Regular expression passed to the reward as `pattern` "
                                       "(regex: what the response must match; math_verify: where the final answer "
                                       "is, the last match).")
    judge_prompt: str | None = Field(None, description="llm_judge, generative_reward_model: a built-in template name "
                                     "(yes_no, score_10, ROLL's Qwen2.5-7B-Instruct-RLVR-prompt) or a template text "
                                     "with {question}, {response}, {reference}; unset: score_10 (llm_judge), yes_no "
                                     "(generative_reward_model).")
    judge_model_type: Literal["api", "inference"] | None = Field(
        None, description="llm_judge: 'api' (default; an OpenAI-compatible judge_api_url) or 'inference' (a judge "
        "model, model_args, loaded by the domain's reward workers with strategy_args' inference strategy).")
    judge_model_name: str | None = Field(None, description="llm_judge (api): the model name sent to the judge API.")
    judge_api_url: str | None = Field(None, description="llm_judge (api): OpenAI-compatible base URL, e.g. "
                                      "http://localhost:8000/v1.")
    judge_api_key: SecretStr | None = Field(None, description="llm_judge (api): bearer key; unset: the "
                                            "ROLL_JUDGE_API_KEY environment variable. Never logged, never saved "
                                            "with the run's config.")
    verdict_tokens: list[str] = Field(default_factory=lambda: ["YES", "NO"], min_length=2, max_length=2,
                                      description="roll: generative_reward_model: the [positive, negative] verdict "
                                      "words; the score is p(positive) / (p(positive) + p(negative)) as the start of "
                                      "the model's answer to judge_prompt.")
    score_timeout: float = Field(60.0, gt=0, description="roll: seconds one sample's scoring may take; past it the "
                                 "sample scores 0, counted as rollout/reward_failures/timeout.")
    training_args: TrainingArgs = compat(TrainingArgs(), "Reward workers do not train.")
    data_args: DataArgs | None = compat(None, "A judge model's prompt is rendered with its tokenizer's chat template.")
    device_mapping: DeviceMapping = Field(
        None, description="Devices of the domain's reward workers (placed like any role; CPU slots on a CPU "
        "cluster). Set (or world_size, or a reward that loads a model): the domain is scored by a reward worker "
        "group; unset: in the driver.")
    world_size: int | None = Field(None, ge=1, description="Reward workers of the domain (see device_mapping).")
    infer_batch_size: int = Field(16, ge=1, description="Samples one reward worker scores at once (its threads).")
    code_url: str | None = Field(None, description="code_sandbox with use_local: false: the sandbox service each "
                                 "test is POSTed to (ROLL's request shape), e.g. http://host:8080/run_code from "
                                 "`roll sandbox serve`; bearer key from ROLL_CODE_SANDBOX_API_KEY (docs/sandbox.md).")
    use_local: bool = Field(True, description="code_sandbox: run code in roll's local sandbox (true, as in ROLL) or "
                            "at code_url (false).")
    reward_manager_config: list[FreeDict] = compat([])
    worker_cls: str | None = compat(None, "roll picks a domain's reward by reward_type, else the domain key "
                                    "(math_rule, code_sandbox, llm_judge, reward_model are registered names).")

    @model_validator(mode="after")
    def _remote_sandbox_has_a_url(self):
        if not self.use_local and not self.code_url:
            raise ValueError("use_local is false, which sends code to a sandbox service at code_url, but code_url is "
                             "not set; set code_url (e.g. http://host:8080/run_code, `roll sandbox serve`) or "
                             "use_local: true")
        return self

    @model_validator(mode="after")
    def _response_filter_is_per_response(self):
        if self.response_filter_config.type == "std_filter":
            raise ValueError("response_filter_config.type is std_filter, but a response has one reward and no "
                             "spread; use std_filter in query_filter_config (the group), or mean_filter here")
        return self

    @field_validator("format_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:  # else the first scored response would fail, after the warm start
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"{value!r} is not a valid regular expression: {exc}") from None
        return value

    @field_serializer("judge_api_key")
    def _never_saved(self, value: SecretStr | None) -> None:
        return None  # a saved or printed config holds no key (give it again, or by ROLL_JUDGE_API_KEY)


class ValidationConfig(WorkerConfig):
    """RLVR ``validation``: data and sampling of the evaluation set."""

    generating_args: GeneratingArgs = Field(default_factory=GeneratingArgs)
    eval_steps: int | None = compat(None, "The top-level eval_steps decides.")
    model_args: ModelArgs = compat(ModelArgs(), "Validation generates with actor_infer's model.")
    training_args: TrainingArgs = compat(TrainingArgs(), "Validation does not train.")
    strategy_args: StrategyArgs | None = compat(None, "Validation generates with actor_infer's backend.")
    device_mapping: DeviceMapping = compat(None, "Validation generates with actor_infer's workers.")
    num_gpus_per_worker: int = compat(1, "Validation generates with actor_infer's workers.")
    world_size: int | None = compat(None, "Validation generates with actor_infer's workers.")
    infer_batch_size: int = compat(16, "Validation generates with actor_infer's workers.")
    system_envs: dict[str, str] = compat({}, "Validation generates with actor_infer's workers.")
    ray_resources: dict[str, float] = compat({}, "Validation generates with actor_infer's workers.")


class DatasetFilterConfig(RollModel):
    source: str | None = None
    min_difficulty: float | None = None
    max_difficulty: float | None = None
    num_samples: int = Field(0, ge=0)


class VLMFilterConfig(RollModel):
    enable: bool = True
    num_workers: int | None = None
    prompt_key: str = "prompt"
    image_key: str = "images"
    image_flag_key: str = "image_flag"
