"""A megatron-core ``GPTModel`` for a Hugging Face Qwen2 config (imports megatron-core).

``parallel_state.initialize_model_parallel`` must have run before :func:`build_gpt_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F

from roll_core.errors import ConfigError

#: model_args.dtype -> (params_dtype, TransformerConfig precision flags)
PRECISIONS: dict[str, tuple[torch.dtype, dict[str, bool]]] = {
    "float32": (torch.float32, {}),
    "bfloat16": (torch.bfloat16, {"bf16": True}),
    "float16": (torch.float16, {"fp16": True}),
}


def transformer_config(hf_config: Any, *, dtype: str, tensor_model_parallel_size: int = 1,
                       pipeline_model_parallel_size: int = 1, expert_model_parallel_size: int = 1,
                       sequence_parallel: bool = False, recompute_granularity: str | None = None,
                       recompute_method: str | None = None, recompute_num_layers: int | None = None,
                       use_cpu_initialization: bool = False,
                       extra: Mapping[str, Any] | None = None) -> Any:
    """``TransformerConfig`` of a dense Qwen2: RMSNorm, SwiGLU, RoPE, bias on q/k/v only, GQA."""
    from megatron.core.transformer import TransformerConfig

    if dtype not in PRECISIONS:
        raise ConfigError(f"model_args.dtype: {dtype!r} is not supported by megatron_train ({', '.join(PRECISIONS)}).")
    params_dtype, flags = PRECISIONS[dtype]
    if sequence_parallel and tensor_model_parallel_size == 1:
        sequence_parallel = False  # Megatron requires TP > 1 for it; nothing to split
    if recompute_granularity == "full" and recompute_method is None:
        recompute_method, recompute_num_layers = "uniform", recompute_num_layers or 1
    heads = hf_config.num_attention_heads
    return TransformerConfig(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        ffn_hidden_size=hf_config.intermediate_size,
        num_attention_heads=heads,
        num_query_groups=hf_config.num_key_value_heads or heads,
        kv_channels=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=getattr(hf_config, "initializer_range", 0.02),
        params_dtype=params_dtype,
        pipeline_dtype=params_dtype,
        tensor_model_parallel_size=tensor_model_parallel_size,
        pipeline_model_parallel_size=pipeline_model_parallel_size,
        expert_model_parallel_size=expert_model_parallel_size,
        sequence_parallel=sequence_parallel,
        recompute_granularity=recompute_granularity,
        recompute_method=recompute_method,
        recompute_num_layers=recompute_num_layers,
        use_cpu_initialization=use_cpu_initialization,
        variable_seq_lengths=True,  # roll's micro-batches vary in length
        moe_token_dispatcher_type="alltoall",  # the one that allows variable lengths (used by MoE only)
        **flags,
        **dict(extra or {}),
    )


def rope_theta(hf_config: Any) -> float:
    """``rope_theta`` wherever this transformers version keeps it."""
    params = getattr(hf_config, "rope_parameters", None) or {}
    return float(params.get("rope_theta") or getattr(hf_config, "rope_theta", None) or 10000.0)


def layer_spec(use_transformer_engine: bool) -> Any:
    """Transformer Engine's layer spec when asked for (GPU with TE), else megatron-core's local one."""
    from megatron.core.models.gpt import gpt_layer_specs

    if use_transformer_engine:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    return gpt_layer_specs.get_gpt_layer_local_spec(normalization="RMSNorm")


def build_gpt_model(hf_config: Any, config: Any, *, use_transformer_engine: bool = False,
                    pre_process: bool | None = None, post_process: bool | None = None) -> Any:
    """``GPTModel`` for this pipeline stage (first / last stage decided by ``parallel_state``)."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel

    if pre_process is None:
        pre_process = parallel_state.is_pipeline_first_stage()
    if post_process is None:
        post_process = parallel_state.is_pipeline_last_stage()
    return GPTModel(
        config=config,
        transformer_layer_spec=layer_spec(use_transformer_engine),
        vocab_size=hf_config.vocab_size,
        max_sequence_length=hf_config.max_position_embeddings,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings),
        position_embedding_type="rope",
        rotary_base=int(rope_theta(hf_config)),
    )


def load_local_weights(model: Any, local: Mapping[str, torch.Tensor]) -> None:
    """Copy one rank's converted weights into its ``GPTModel``; anything but ``_extra_state`` must match."""
    result = model.load_state_dict(dict(local), strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
    if missing or result.unexpected_keys:
        raise ValueError(f"converted weights do not fit the Megatron model: missing {missing[:5]}, "
                         f"unexpected {list(result.unexpected_keys)[:5]}")
