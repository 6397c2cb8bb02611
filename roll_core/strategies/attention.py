"""sdpa that keeps grouped-query attention grouped when there is a padding mask (CPU generation).

transformers' ``sdpa`` attention passes ``enable_gqa`` to torch only when there is no attention
mask; with one (a left-padded generation batch always has one) it first copies each K/V head
once per query head that shares it (``repeat_kv``) at every layer and decode step. On CPU, torch's
sdpa takes the mask and ``enable_gqa`` together and returns the same values bit for bit, without
the copies (measured: a decode step's attention 4x faster for roll-tiny's 4 query / 2 KV heads;
docs/benchmarks.md section 5). On CUDA a mask with ``enable_gqa`` sends sdpa to its math kernel,
so this is used on CPU only (:func:`roll_core.strategies.hf_common.resolve_attn_implementation`).
"""

from __future__ import annotations

from typing import Any

#: The name this attention is registered under in transformers' attention and mask interfaces.
GROUPED_SDPA = "roll_sdpa_gqa"


def grouped_sdpa_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                         dropout: float = 0.0, scaling: float | None = None, is_causal: bool | None = None,
                         **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function signature; ``(batch, q_len, heads, head_dim)`` out."""
    import torch

    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # as transformers' sdpa: a causal flag only for a masked-free prefill (the mask carries causality)
    causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def register_grouped_sdpa() -> str:
    """Register :data:`GROUPED_SDPA` (with sdpa's mask builder) once per process; returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if GROUPED_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
        ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)
    return GROUPED_SDPA
