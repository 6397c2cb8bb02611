"""RLVR sections: per-domain ``rewards``, ``validation`` and dataset filters (ROLL's ``rlvr_config``).

Each ``rewards`` entry is one data domain. roll scores it with a registered reward function
(hook ``roll_register_rewards``) named by ``reward_type``, or by the domain key when
``reward_type`` is unset; the ROLL worker fields around it are accepted so ROLL configs load.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from roll_core.config.base import FreeDict, RollModel, compat
from roll_core.config.workers import GeneratingArgs, WorkerConfig


class RewardFilterConfig(RollModel):
    type: Literal["no_filter", "mean_filter", "std_filter"] = "no_filter"
    filter_args: FreeDict = Field(default_factory=dict)


class RewardConfig(WorkerConfig):
    """One reward domain: which reward function scores it and which data tags belong to it."""

    reward_type: str | None = Field(None, description="Registered reward function; default: the domain key.")
    tag_included: list[str] = Field(default_factory=list, description="Data tags scored by this domain.")
    response_length_penalty_coef: float = 0.0
    query_filter_config: RewardFilterConfig = Field(default_factory=RewardFilterConfig)
    response_filter_config: RewardFilterConfig = Field(default_factory=RewardFilterConfig)
    format_pattern: str | None = None
    judge_prompt: str | None = None
    judge_model_type: str | None = None
    judge_model_name: str | None = None
    judge_api_url: str | None = None
    judge_api_key: str | None = None
    code_url: str | None = compat(None)
    use_local: bool = compat(True)
    reward_manager_config: list[FreeDict] = compat([])


class ValidationConfig(WorkerConfig):
    """RLVR ``validation``: data and sampling of the evaluation set."""

    generating_args: GeneratingArgs = Field(default_factory=GeneratingArgs)
    eval_steps: int | None = compat(None, "The top-level eval_steps decides.")


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
