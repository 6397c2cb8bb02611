"""The backend contract: what a train strategy and an infer strategy do.

Strategies are plugins (hook ``roll_register_strategies``) selected by
``strategy_args.strategy_name``. The built-ins are ``hf_train`` / ``hf_infer`` (torch +
transformers, CPU or GPU); ``vllm``, ``sglang``, ``deepspeed_train`` and ``megatron_train`` come
as separate packages. The pipeline and the rollout engine only ever talk to these interfaces.

Data conventions (shared by every strategy and by :mod:`roll_core.algorithms`):

* A training batch is a ``dict[str, torch.Tensor]``; rows are right-padded to length ``L``.
  Required keys: ``input_ids [B, L]`` (long), ``attention_mask [B, L]``, ``response_mask [B, L]``
  (1 exactly on model-generated tokens). Per-token quantities (log-probs, advantages, ...) are
  label-aligned ``[B, L-1]``: index ``j`` predicts token ``j+1``; the loss mask is
  ``response_mask[:, 1:]``.
* Generation works on token ids, never on re-tokenised text: requests carry prompt ids, outputs
  carry the generated ids and their sampling log-probs, stamped with the policy version.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response (ROLL's ``generating_args`` names)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: no top-k filtering
    stop_token_ids: tuple[int, ...] = ()  # besides the tokenizer's eos
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class GenerationRequest:
    request_id: str
    prompt_ids: Sequence[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: opaque routing key (an env id): the scheduler sends the same key to the same worker
    route_key: str | None = None
    #: the last ``response_prefix`` prompt tokens are this response's own, generated before a weight
    #: sync (a partial-rollout continuation): a stop string that starts in them and ends in the new
    #: tokens stops the response (``hf_infer``; vLLM and SGLang match stop strings in new text only)
    response_prefix: int = 0


@dataclass
class GenerationOutput:
    request_id: str
    token_ids: list[int]  # generated tokens, including the stop token when one was produced
    logprobs: list[float]  # sampling log-prob of each generated token under the sampling policy
    finish_reason: FinishReason
    policy_version: int  # the version that generated the first token (the oldest; see token_versions)
    #: the policy version of each generated token; ``None``: all ``policy_version``. A response
    #: interrupted by a weight sync and continued on the new weights (partial rollout) mixes versions.
    token_versions: list[int] | None = None
    #: False: a model-free demonstrator's slip (roll_core.envs.policies.ScriptedPolicy): the turn is
    #: played and stays in the context, but its tokens are no training target
    trainable: bool = True

    def versions(self) -> list[int]:
        """The policy version of each generated token."""
        if self.token_versions is not None:
            return list(self.token_versions)
        return [int(self.policy_version)] * len(self.token_ids)


#: ``loss_fn(micro_batch, log_probs, entropy) -> (loss, metrics)``: ``log_probs``/``entropy`` are the
#: current policy's label-aligned ``[b, L-1]`` tensors for the micro-batch (entropy may be None
#: when not requested); ``loss`` is already scaled so that summing over micro-batches gives the
#: global-batch loss (see docs/algorithms.md §6.5).
LossFn = Callable[[Mapping[str, Any], Any, Any], tuple[Any, dict[str, float]]]


class WorkerStrategy:
    """What every strategy is to the pipeline: built from a worker section, able to free memory.

    The pipeline builds each role's strategy with :meth:`from_worker_config` and calls nothing that
    is not declared on these classes (:class:`TrainStrategy`, :class:`CriticStrategy`,
    :class:`InferStrategy`); :func:`roll_core.testing.check_strategy` checks a plugin against them.
    """

    @classmethod
    def from_worker_config(cls, worker_config: Any, pretrain: str, seed: int, **overrides: Any) -> WorkerStrategy:
        """Build from a worker section (``actor_train``, ``actor_infer``, ``critic``, ``reference``).

        ``worker_config`` is the validated section (ROLL's field names: ``model_args``,
        ``training_args``, ``generating_args``, ``strategy_args.strategy_config`` ...), ``pretrain``
        the weights to load, ``seed`` the run's seed (every rank and worker of a role gets the same
        one, so a locally built model starts identical everywhere). ``overrides`` are the pipeline's:
        ``num_training_steps`` for trainable roles, ``trainable=False`` for a reference model. An
        unknown ``strategy_config`` key must be a :class:`~roll_core.errors.ConfigError`.
        """
        raise NotImplementedError(
            f"{cls.__module__}.{cls.__qualname__} does not implement from_worker_config(worker_config, pretrain, "
            "seed, **overrides), which the pipeline builds every strategy with (roll_core.strategies.base)."
        )

    def offload(self) -> None:
        """Free accelerator memory while another role colocated on the same devices runs (no-op on CPU)."""

    def reload(self) -> None:
        """Undo :meth:`offload` before this strategy is used again."""

    # -- data parallelism (train and critic strategies; one rank per process) ------------------
    def data_parallel(self) -> tuple[int, int]:
        """``(rank, size)`` of this process among the ranks that split a batch between them.

        The default is pure data parallelism: every rank of the role's process group (one rank:
        ``(0, 1)``). A backend with model parallelism returns its data-parallel coordinates; ranks
        with the same data-parallel rank then get the same rows.
        """
        from roll_core.distributed.process_group import rank, world_size

        return rank(), world_size()

    def data_parallel_group(self) -> Any:
        """The torch process group over which step-wide counts are summed (``None``: all ranks)."""
        return None

    def collects_outputs(self) -> bool:
        """Whether this rank returns its share's results (one rank per data-parallel shard does)."""
        return True


class InferStrategy(WorkerStrategy, abc.ABC):
    """Generates token ids with log-probs; loads weights exported by a train strategy."""

    #: the version of the weights being served; every :class:`GenerationOutput` is stamped with it
    policy_version: int = 0

    @abc.abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationOutput]:
        """Generate for a batch of requests of any prompt lengths; outputs in request order."""

    @abc.abstractmethod
    def load_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Replace the weights (a HF-named state dict) and set ``policy_version``."""

    def load_adapter(self, adapter: Any, version: int) -> None:
        """Serve a LoRA adapter (:class:`~roll_core.strategies.lora.LoraAdapter`) on the base model from
        now on and set ``policy_version``; only strategies registered with ``serves_lora=True`` get one."""
        raise NotImplementedError(f"{type(self).__name__} does not serve LoRA adapters; it is sent merged weights.")

    def abort(self, request_ids: Sequence[str] | None = None) -> None:
        """Stop in-flight generation (all when ``None``); aborted outputs finish with "abort"."""


class TrainStrategy(WorkerStrategy, abc.ABC):
    """Computes log-probs, trains with a given loss, exports and checkpoints weights.

    Serves ``actor_train`` and, built with ``trainable=False``, ``reference``.
    """

    @property
    @abc.abstractmethod
    def mini_batch_size(self) -> int:
        """Rows one :meth:`train_step` (one optimiser step) should get on this rank: the pipeline
        cuts each step's batch into mini-batches of this size (``per_device_train_batch_size *
        gradient_accumulation_steps``)."""

    @abc.abstractmethod
    def compute_log_probs(self, batch: Mapping[str, Any], *, with_entropy: bool = False):
        """``(log_probs, entropy)``: label-aligned ``[B, L-1]`` (masked by ``response_mask[:, 1:]``),
        entropy ``None`` unless asked."""

    @abc.abstractmethod
    def train_step(self, batch: Mapping[str, Any], loss_fn: LossFn) -> dict[str, float]:
        """One optimiser step over ``batch`` (micro-batched, gradient accumulation, clipping); returns
        at least ``loss``, ``grad_norm`` and ``lr``. ``loss_fn.needs_entropy`` (when set) asks for entropy."""

    @abc.abstractmethod
    def export_weights(self) -> dict[str, Any]:
        """The current weights as a HF-named state dict on CPU (for any infer strategy)."""

    @abc.abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """Model in HF format (``save_pretrained``) plus optimizer, scheduler and RNG state."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Restore everything :meth:`save_checkpoint` wrote, exactly."""

    # -- optional: LoRA and reporting ---------------------------------------------------------
    def compute_reference_log_probs(self, batch: Mapping[str, Any]) -> Any:
        """Log-probs ``[B, L-1]`` of the reference policy computed by this actor itself: with LoRA, the
        base model with the adapters disabled (the pipeline then builds no ``reference`` workers)."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot compute reference log-probs itself (it trains no LoRA adapters); "
            "the pipeline builds a reference worker for it.")

    def export_adapter(self, *, with_base: bool = False) -> Any:
        """The LoRA adapter as a :class:`~roll_core.strategies.lora.LoraAdapter` for infer strategies that
        serve adapters natively (registration option ``serves_lora``); ``with_base`` adds the base weights."""
        raise NotImplementedError(f"{type(self).__name__} trains no LoRA adapter to export.")

    def save_model(self, path: str) -> None:
        """A model directory other workers can start from (the warm start's); LoRA: the merged model."""
        self.save_checkpoint(path)

    def parameter_counts(self) -> tuple[int, int] | None:
        """``(trainable, total)`` parameters, for the run header; None when the backend cannot tell."""
        return None


class CriticStrategy(WorkerStrategy, abc.ABC):
    """A value model for ``critic`` (estimators registered with ``needs_critic``, e.g. ``gae``).

    A train strategy offers one through its registration's ``critic`` option.
    """

    @property
    @abc.abstractmethod
    def mini_batch_size(self) -> int:
        """As :attr:`TrainStrategy.mini_batch_size`."""

    @abc.abstractmethod
    def compute_values(self, batch: Mapping[str, Any]) -> Any:
        """Label-aligned values ``[B, L-1]`` masked by ``response_mask[:, 1:]``, on CPU."""

    @abc.abstractmethod
    def train_step(self, batch: Mapping[str, Any], loss_fn: Callable[..., Any]) -> dict[str, float]:
        """One optimiser step of ``loss_fn(micro_batch, values) -> (loss, metrics)`` over ``batch``."""

    @abc.abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """Everything :meth:`load_checkpoint` needs to continue exactly."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> None:
        """Restore :meth:`save_checkpoint`'s state."""


#: ``role`` registration option -> the contract a strategy of that role implements
ROLE_CONTRACTS: dict[str, type[WorkerStrategy]] = {"train": TrainStrategy, "infer": InferStrategy}
