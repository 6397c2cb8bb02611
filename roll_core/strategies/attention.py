"""Two sdpa variants registered with transformers: grouped-query sdpa for CPU generation, and
per-row sdpa for packed (padding-free) training (:data:`SEGMENT_SDPA`, below).

Grouped: sdpa that keeps grouped-query attention grouped when there is a padding mask.

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


#: The name packed (padding-free) training registers sdpa under: :func:`segment_sdpa_forward`.
SEGMENT_SDPA = "roll_sdpa_segments"


def segment_sdpa_forward(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                         dropout: float = 0.0, scaling: float | None = None, is_causal: bool | None = None,
                         **kwargs: Any) -> tuple[Any, None]:
    """sdpa that runs each row of a packed sequence on its own (``cu_seq_lens_q`` from the forward).

    transformers' own padding-free path on sdpa builds one ``T x T`` block-diagonal mask over the
    packed micro-batch: exact, but attention then costs ``T^2`` instead of ``sum(l_i^2)`` and the
    masked kernel is the slow one (measured: packing 64 long-tailed rows made a step 2.4x slower
    than padding them, while per-row calls made it 2.4x faster). Here every row is causal sdpa
    without a mask, as flash-attention's varlen kernel would do (a sliding-window layer gets its
    band mask on rows longer than the window), and rows of the same length go in one call: a
    micro-batch of 32 one-token answers to prompts of one length is one call a layer, not 32
    (docs/benchmarks.md section 18). With a padding mask (the padded path) or no
    ``cu_seq_lens_q`` this is transformers' sdpa unchanged.
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = kwargs.pop("cu_seq_lens_q", None)
    kwargs.pop("cu_seq_lens_k", None)
    if bounds is None or attention_mask is not None or query.shape[0] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    window = kwargs.get("sliding_window")
    edges = bounds.tolist()
    groups: dict[int, list[int]] = {}  # row length -> the rows' starts, in order
    for a, b in zip(edges[:-1], edges[1:]):
        if b > a:
            groups.setdefault(b - a, []).append(a)
    parts, places = [], []
    for length, starts in groups.items():
        # a sliding-window layer (transformers' rule: a query sees the last `window` keys, itself included)
        mask = (torch.ones(length, length, dtype=torch.bool, device=query.device).tril_()
                .triu_(-(int(window) - 1))[None, None]) if window and length > window else None
        place = (torch.tensor(starts, device=query.device)[:, None]
                 + torch.arange(length, device=query.device)).reshape(-1)  # the rows' positions
        if len(starts) == 1:  # a row of its own length: a view, no copy
            rows = [t[:, :, starts[0] : starts[0] + length] for t in (query, key, value)]
        else:  # the rows of one length as one [rows, heads, length, head_dim] batch: one call, not one a row
            rows = [t.index_select(2, place).unflatten(2, (len(starts), length)).transpose(1, 2)[0]
                    for t in (query, key, value)]
        part = sdpa_attention_forward(module, *rows, mask, dropout=dropout, scaling=scaling,
                                      is_causal=mask is None)[0]  # [rows, length, heads, head_dim]
        parts.append(part.reshape(1, -1, *part.shape[2:]))
        places.append(place)
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
    if any(len(starts) > 1 for starts in groups.values()):  # back to the rows' order (they cover 0..T-1)
        out = out.index_select(1, torch.argsort(torch.cat(places)))
    return out, None


def segment_mask(*args: Any, attention_mask: Any = None, **kwargs: Any) -> Any:
    """sdpa's mask builder, except that a packed micro-batch (no padding mask) gets none: the rows'
    bounds reach :func:`segment_sdpa_forward` as ``cu_seq_lens_q`` instead of a ``T x T`` mask."""
    from transformers.masking_utils import sdpa_mask

    return None if attention_mask is None else sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_segment_sdpa() -> str:
    """Register :data:`SEGMENT_SDPA` once per process; returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    if SEGMENT_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(SEGMENT_SDPA, segment_sdpa_forward)
        ALL_MASK_ATTENTION_FUNCTIONS.register(SEGMENT_SDPA, segment_mask)
    return SEGMENT_SDPA
