"""Algorithm settings shared by the agentic and RLVR pipelines (ROLL's ``PPOConfig`` fields).

Defaults are those of docs/algorithms.md §7 except where roll decided otherwise: ``init_kl_coef``
defaults to 0.0 (no reference model unless a KL term is on) and ``kl_penalty`` also accepts
``k3``. Names that select a plugin (``adv_estimator``) are plain strings here; ``resolve`` checks
them against the registry, so a third-party estimator is as valid as a built-in one.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from roll_core.config.base import NoneStr, RollModel, compat
from roll_core.errors import did_you_mean

NormType = Annotated[Literal["batch", "group"] | None, NoneStr]  # ROLL's "running" never worked (docs/algorithms.md §2.1)
RatioGranularity = Literal["token", "segment", "geometric", "sequence"]


class TrainInferISWeight(RollModel):
    """Importance weight correcting for the gap between training and inference log-probs."""

    enabled: bool = False
    weight_type: RatioGranularity = "token"
    upper_bound: float | None = Field(1.2, gt=0.0, description="Clamp of the weight; null: no clamp.")
    detach: bool = True


class TrainInferFilter(RollModel):
    """One rule dropping tokens whose train/inference probabilities disagree too much."""

    enabled: bool = False
    agg_type: RatioGranularity = "token"
    ratio_enabled: bool = True
    ratio_low: float = 0.8
    ratio_high: float = 1.2
    diff_enabled: bool = False
    diff_low: float = -0.2
    diff_high: float = 0.2

    @model_validator(mode="after")
    def _ranges_ordered(self):
        if self.ratio_low > self.ratio_high:
            raise ValueError(f"ratio_low ({self.ratio_low}) is above ratio_high ({self.ratio_high})")
        if self.diff_low > self.diff_high:
            raise ValueError(f"diff_low ({self.diff_low}) is above diff_high ({self.diff_high})")
        return self


class TrainInferCorrection(RollModel):
    """``train_infer_correction``: IS weight and filters for off-policy / mismatch handling."""

    is_weight: TrainInferISWeight = Field(default_factory=TrainInferISWeight)
    filters: list[TrainInferFilter] = Field(default_factory=list)


#: ``reward_normalization.grouping`` values: ``batch``, or a per-row key of the agentic batch
#: (roll_core.rollout.engine.batch; ``step`` and ``state_hash`` exist only in step-wise batches)
GROUPING_KEYS = ("batch", "traj_group_id", "traj_id", "tag", "group_id", "episode_id", "seed", "end_reason",
                 "step", "state_hash")


class RewardNormalizationConfig(RollModel):
    """Agentic reward normalisation: statistics over ``grouping`` (a sample key, or ``batch``)."""

    grouping: str = Field("batch", description="batch, or a sample key such as traj_group_id / tag.")

    @field_validator("grouping")
    @classmethod
    def _known_grouping(cls, value: str) -> str:
        if value not in GROUPING_KEYS:  # else the first training step would fail, after the warm start
            raise ValueError(f"unknown grouping {value!r}.{did_you_mean(value, GROUPING_KEYS)} Choose batch or a "
                             f"per-sample key: {', '.join(GROUPING_KEYS[1:])}")
        return value

    method: Literal["identity", "mean", "mean_std", "asym_clip"] = Field(
        "identity", description="Deprecated shortcut for the two norm types."
    )
    norm_mean_type: Annotated[Literal["batch", "group"] | None, NoneStr] = None
    norm_std_type: Annotated[Literal["batch", "group"] | None, NoneStr] = None


class AlgorithmConfig(RollModel):
    """Advantages, rewards, KL and loss settings (top-level keys of a ROLL config)."""

    adv_estimator: str = Field(
        "gae", description="A registered advantage estimator: gae, reinforce, grpo, gigpo, step_reinforce, ..."
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Token-level discount.")
    lambd: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda.")
    norm_mean_type: NormType = None
    norm_std_type: NormType = None
    reward_clip: float | None = Field(None, gt=0.0, description="Symmetric reward clamp (applied once).")
    advantage_clip: float | None = Field(None, gt=0.0)
    whiten_rewards: bool = False
    whiten_advantages: bool = False
    pg_clip: float = Field(0.2, ge=0.0)
    use_pg_clip_range: bool = Field(False, description="Use pg_clip_low / pg_clip_high instead of pg_clip.")
    pg_clip_low: float = Field(0.2, ge=0.0)
    pg_clip_high: float = Field(0.2, ge=0.0)
    dual_clip_loss: bool = Field(False, description="Bound the loss of negative advantages (see dual_clip_c).")
    value_clip: float | None = Field(None, gt=0.0)
    kl_penalty: Literal["kl", "abs", "mse", "k3", "k1", "k2", "low_var_kl", "full"] = Field(
        "kl", description="KL estimator: kl (k1), abs, mse (k2), k3 (low_var_kl)."
    )
    init_kl_coef: float = Field(0.0, ge=0.0, description="KL-in-reward coefficient; roll defaults to 0.")
    target_kl: float | None = Field(None, gt=0.0, description="Adaptive KL target; null: fixed coefficient.")
    kl_horizon: int = Field(10000, ge=1)
    add_token_level_kl: bool = False
    use_kl_loss: bool = False
    kl_loss_coef: float = Field(0.0, ge=0.0)
    entropy_loss_coef: float = 0.0
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = "seq-mean-token-mean"
    ratio_type: Literal["token", "segment", "seq"] = Field(
        "token", description="Importance ratio: per token, per turn (segment), or per row (seq, GSPO)."
    )
    ppo_epochs: int = Field(1, ge=1)
    critic_warmup: int = Field(0, ge=0)
    enable_reference: bool = Field(False, description="Switched on automatically when a KL term needs it.")
    enable_old_logprobs_recompute: bool = False
    force_disable_old_logprobs_recompute: bool = False
    train_infer_correction: TrainInferCorrection = Field(default_factory=TrainInferCorrection)
    max_grad_norm: float = compat(1.0, "Use actor_train.training_args.max_grad_norm.")

    @property
    def runs_reference(self) -> bool:
        """Whether the reference model runs: asked for, or needed by a KL term (in the loss or the reward)."""
        return self.enable_reference or self.use_kl_loss or self.init_kl_coef > 0

    @field_validator("kl_penalty")
    @classmethod
    def _per_token_kl(cls, value):
        if value == "full":
            raise ValueError(
                "kl_penalty 'full' needs full-vocabulary log-probs, and roll's pipelines (like ROLL's) "
                "keep only the log-prob of each sampled token; use kl (k1), abs, mse (k2) or k3 (low_var_kl)"
            )
        return value
    l2: float = compat(0.0)
    use_reward_scaling: bool = compat(False)
    use_reward_norm: bool = compat(False)
    add_len_reward: bool = compat(False)
