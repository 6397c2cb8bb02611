"""Hugging Face Qwen2 weights <-> megatron-core ``GPTModel`` weights: pure tensor code (CPU or GPU).

Layouts (megatron-core 0.16, local or Transformer Engine layer spec):

* ``linear_qkv`` fuses q, k, v **per query group**: for each of the ``g`` KV heads, the rows of
  its ``h / g`` query heads, then its key head, then its value head (weight and Qwen2's bias).
  Splitting this tensor into contiguous row blocks therefore splits whole query groups, which is
  what tensor parallelism does (``g`` must be divisible by the TP size).
* ``linear_fc1`` stacks ``gate_proj`` over ``up_proj`` (SwiGLU); under TP each rank holds its slice
  of gate over its slice of up, so the two halves are split separately.
* RMSNorm weights live in ``input_layernorm`` / ``pre_mlp_layernorm`` (local spec) or are fused
  into the next linear as ``layer_norm_weight`` (Transformer Engine spec): ``fused_norms``.
* A tied LM head has no ``output_layer.weight`` on a single pipeline stage; with several stages
  the last one keeps its own synchronised copy, so :func:`shard` writes one there.

:func:`hf_to_megatron` / :func:`megatron_to_hf` convert whole (unsharded) state dicts;
:func:`shard` cuts one for a (tensor, pipeline) rank and :func:`merge` puts shards back together.
Every function checks names and shapes and fails with the offending key rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class Qwen2Layout:
    """The shapes that decide how Qwen2 tensors map onto Megatron's."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = True
    fused_norms: bool = False

    @classmethod
    def from_hf_config(cls, config: Any, *, fused_norms: bool = False) -> Qwen2Layout:
        """From a ``Qwen2Config`` (dense Qwen2 / Qwen2.5; MoE variants are not covered)."""
        if getattr(config, "num_experts", None) or getattr(config, "num_local_experts", None):
            raise ValueError("HF -> Megatron conversion covers dense Qwen2 models; this config has experts.")
        heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(
            num_layers=int(config.num_hidden_layers), hidden_size=int(config.hidden_size),
            num_attention_heads=heads, num_key_value_heads=int(config.num_key_value_heads or heads),
            head_dim=int(head_dim), intermediate_size=int(config.intermediate_size),
            vocab_size=int(config.vocab_size), tie_word_embeddings=bool(config.tie_word_embeddings),
            fused_norms=fused_norms,
        )

    @property
    def heads_per_group(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    def norm_names(self, layer: str) -> tuple[str, str]:
        """Megatron names of a layer's (attention, MLP) RMSNorm weights."""
        if self.fused_norms:
            return (f"{layer}.self_attention.linear_qkv.layer_norm_weight", f"{layer}.mlp.linear_fc1.layer_norm_weight")
        return (f"{layer}.input_layernorm.weight", f"{layer}.pre_mlp_layernorm.weight")


# -- q/k/v and gate/up fusion ------------------------------------------------------------------
def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, layout: Qwen2Layout) -> Tensor:
    """HF q/k/v (weights ``[n*d, H]`` or biases ``[n*d]``) -> Megatron's group-major ``linear_qkv``."""
    g, d = layout.num_key_value_heads, layout.head_dim
    rest = q.shape[1:]
    q = q.reshape(g, layout.heads_per_group * d, *rest)
    return torch.cat([q, k.reshape(g, d, *rest), v.reshape(g, d, *rest)], dim=1).reshape(-1, *rest)


def split_qkv(qkv: Tensor, layout: Qwen2Layout) -> tuple[Tensor, Tensor, Tensor]:
    """Inverse of :func:`fuse_qkv` (for any number of whole query groups, e.g. one TP shard)."""
    d, per = layout.head_dim, layout.heads_per_group
    rest = qkv.shape[1:]
    grouped = qkv.reshape(-1, (per + 2) * d, *rest)
    q, k, v = torch.split(grouped, [per * d, d, d], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


# -- whole state dicts -----------------------------------------------------------------------------
def hf_to_megatron(hf: Mapping[str, Tensor], layout: Qwen2Layout) -> dict[str, Tensor]:
    """A HF Qwen2 state dict -> an unsharded Megatron ``GPTModel`` state dict (no ``_extra_state``)."""
    src = dict(hf)
    take = _taker(src)
    out: dict[str, Tensor] = {"embedding.word_embeddings.weight": take("model.embed_tokens.weight")}
    for i in range(layout.num_layers):
        h, m = f"model.layers.{i}", f"decoder.layers.{i}"
        attn_norm, mlp_norm = layout.norm_names(m)
        out[attn_norm] = take(f"{h}.input_layernorm.weight")
        qkv = [take(f"{h}.self_attn.{p}_proj.weight") for p in "qkv"]
        out[f"{m}.self_attention.linear_qkv.weight"] = fuse_qkv(*qkv, layout)
        if layout.qkv_bias:
            out[f"{m}.self_attention.linear_qkv.bias"] = fuse_qkv(*[take(f"{h}.self_attn.{p}_proj.bias") for p in "qkv"],
                                                                  layout)
        out[f"{m}.self_attention.linear_proj.weight"] = take(f"{h}.self_attn.o_proj.weight")
        out[mlp_norm] = take(f"{h}.post_attention_layernorm.weight")
        out[f"{m}.mlp.linear_fc1.weight"] = torch.cat([take(f"{h}.mlp.gate_proj.weight"),
                                                       take(f"{h}.mlp.up_proj.weight")], dim=0)
        out[f"{m}.mlp.linear_fc2.weight"] = take(f"{h}.mlp.down_proj.weight")
    out["decoder.final_layernorm.weight"] = take("model.norm.weight")
    head = src.pop("lm_head.weight", None)
    if layout.tie_word_embeddings:
        if head is not None and not torch.equal(head, out["embedding.word_embeddings.weight"]):
            raise ValueError("tie_word_embeddings is set but lm_head.weight differs from model.embed_tokens.weight.")
    elif head is None:
        raise KeyError("lm_head.weight is missing (the model does not tie its embeddings).")
    else:
        out["output_layer.weight"] = head
    src = {k: v for k, v in src.items() if not k.endswith("rotary_emb.inv_freq")}  # old HF buffers
    if src:
        raise KeyError(f"HF weights Qwen2 does not have: {sorted(src)[:5]}")
    _check_shapes(out, layout)
    return out


def megatron_to_hf(mg: Mapping[str, Tensor], layout: Qwen2Layout) -> dict[str, Tensor]:
    """An unsharded Megatron state dict -> HF Qwen2 names (``lm_head.weight`` included when tied, as
    ``model.state_dict()`` has it)."""
    src = {k: v for k, v in mg.items() if not k.endswith("_extra_state")}
    take = _taker(src)
    out: dict[str, Tensor] = {"model.embed_tokens.weight": take("embedding.word_embeddings.weight")}
    for i in range(layout.num_layers):
        h, m = f"model.layers.{i}", f"decoder.layers.{i}"
        attn_norm, mlp_norm = layout.norm_names(m)
        out[f"{h}.input_layernorm.weight"] = take(attn_norm)
        for p, t in zip("qkv", split_qkv(take(f"{m}.self_attention.linear_qkv.weight"), layout)):
            out[f"{h}.self_attn.{p}_proj.weight"] = t
        if layout.qkv_bias:
            for p, t in zip("qkv", split_qkv(take(f"{m}.self_attention.linear_qkv.bias"), layout)):
                out[f"{h}.self_attn.{p}_proj.bias"] = t
        out[f"{h}.self_attn.o_proj.weight"] = take(f"{m}.self_attention.linear_proj.weight")
        out[f"{h}.post_attention_layernorm.weight"] = take(mlp_norm)
        gate, up = torch.chunk(take(f"{m}.mlp.linear_fc1.weight"), 2, dim=0)
        out[f"{h}.mlp.gate_proj.weight"], out[f"{h}.mlp.up_proj.weight"] = gate, up
        out[f"{h}.mlp.down_proj.weight"] = take(f"{m}.mlp.linear_fc2.weight")
    out["model.norm.weight"] = take("decoder.final_layernorm.weight")
    head = src.pop("output_layer.weight", None)
    out["lm_head.weight"] = out["model.embed_tokens.weight"] if layout.tie_word_embeddings else head
    if out["lm_head.weight"] is None:
        raise KeyError("output_layer.weight is missing (the model does not tie its embeddings).")
    if src:
        raise KeyError(f"Megatron weights the Qwen2 layout does not have: {sorted(src)[:5]}")
    return out


# -- tensor / pipeline parallel shards -----------------------------------------------------------
def _split_dim(dim: int) -> Callable[[Tensor, int], list[Tensor]]:
    return lambda t, n: list(torch.chunk(t, n, dim=dim))


def _split_gate_up(t: Tensor, n: int) -> list[Tensor]:
    gate, up = torch.chunk(t, 2, dim=0)
    return [torch.cat(pair, dim=0) for pair in zip(torch.chunk(gate, n, dim=0), torch.chunk(up, n, dim=0))]


def _merge_dim(dim: int) -> Callable[[list[Tensor]], Tensor]:
    return lambda parts: torch.cat(parts, dim=dim)


def _merge_gate_up(parts: list[Tensor]) -> Tensor:
    halves = [torch.chunk(p, 2, dim=0) for p in parts]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)


def _replicated(t: Tensor, n: int) -> list[Tensor]:
    return [t] * n


def _first(parts: list[Tensor]) -> Tensor:
    return parts[0]


#: name pattern -> (split for TP, merge of TP shards); the first match wins, the last is a catch-all
TP_RULES: list[tuple[re.Pattern, Callable, Callable]] = [
    (re.compile(r"(embedding\.word_embeddings|output_layer)\.weight$"), _split_dim(0), _merge_dim(0)),
    (re.compile(r"linear_qkv\.(weight|bias)$"), _split_dim(0), _merge_dim(0)),
    (re.compile(r"linear_fc1\.weight$"), _split_gate_up, _merge_gate_up),
    (re.compile(r"(linear_proj|linear_fc2)\.weight$"), _split_dim(1), _merge_dim(1)),
    (re.compile(r"(layernorm\.weight|layer_norm_weight)$"), _replicated, _first),
]
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")


def _rule(name: str) -> tuple[Callable, Callable]:
    for pattern, split, merge in TP_RULES:
        if pattern.search(name):
            return split, merge
    raise KeyError(f"no tensor-parallel rule for Megatron weight {name!r}")


def layer_range(layout: Qwen2Layout, pp_rank: int, pp_size: int) -> range:
    """Global layer indices held by a pipeline stage (Megatron's even split)."""
    if layout.num_layers % pp_size:
        raise ValueError(f"{layout.num_layers} layers do not split evenly over {pp_size} pipeline stages.")
    per = layout.num_layers // pp_size
    return range(pp_rank * per, (pp_rank + 1) * per)


def check_parallel_sizes(layout: Qwen2Layout, tp_size: int, pp_size: int) -> None:
    """Raise ``ValueError`` unless the model can be cut ``tp_size`` x ``pp_size`` ways."""
    for what, value in (("num_key_value_heads", layout.num_key_value_heads), ("vocab_size", layout.vocab_size),
                        ("intermediate_size", layout.intermediate_size),
                        ("num_attention_heads", layout.num_attention_heads)):
        if value % tp_size:
            raise ValueError(f"{what}={value} is not divisible by tensor_model_parallel_size={tp_size}.")
    layer_range(layout, 0, pp_size)


def shard(mg: Mapping[str, Tensor], layout: Qwen2Layout, *, tp_rank: int, tp_size: int, pp_rank: int,
          pp_size: int) -> dict[str, Tensor]:
    """The part of an unsharded Megatron state dict that rank (tp_rank, pp_rank) holds, with the
    stage's local layer numbering (``decoder.layers.0`` is the stage's first layer)."""
    check_parallel_sizes(layout, tp_size, pp_size)
    layers = layer_range(layout, pp_rank, pp_size)
    first, last = pp_rank == 0, pp_rank == pp_size - 1
    wanted: dict[str, Tensor] = {}
    for name, tensor in mg.items():
        match = _LAYER.match(name)
        if match:
            index = int(match.group(1))
            if index in layers:
                wanted[f"decoder.layers.{index - layers.start}.{match.group(2)}"] = tensor
        elif name == "embedding.word_embeddings.weight":
            if first:
                wanted[name] = tensor
            if last and not first and layout.tie_word_embeddings:  # the last stage's synchronised copy
                wanted["output_layer.weight"] = tensor
        elif name in ("decoder.final_layernorm.weight", "output_layer.weight"):
            if last:
                wanted[name] = tensor
        else:
            raise KeyError(f"unexpected Megatron weight {name!r}")
    return {name: _rule(name)[0](t, tp_size)[tp_rank].clone() for name, t in wanted.items()}


def merge(shards: Mapping[tuple[int, int], Mapping[str, Tensor]], layout: Qwen2Layout, *, tp_size: int,
          pp_size: int) -> dict[str, Tensor]:
    """Inverse of :func:`shard`: ``{(tp_rank, pp_rank): local state dict}`` -> unsharded state dict."""
    out: dict[str, Tensor] = {}
    for pp_rank in range(pp_size):
        offset = layer_range(layout, pp_rank, pp_size).start
        stage = [{k: v for k, v in shards[(t, pp_rank)].items() if not k.endswith("_extra_state")}
                 for t in range(tp_size)]
        for name in stage[0]:
            if name == "output_layer.weight" and layout.tie_word_embeddings:
                continue  # the last stage's copy of the embedding
            match = _LAYER.match(name)
            full = f"decoder.layers.{int(match.group(1)) + offset}.{match.group(2)}" if match else name
            out[full] = _rule(name)[1]([s[name] for s in stage])
    _check_shapes(out, layout)
    return out


# -- HF directories ----------------------------------------------------------------------------------
def save_hf_checkpoint(path: str, hf: Mapping[str, Tensor], hf_config: Any, *, tokenizer: Any = None,
                       source_dir: str | None = None) -> None:
    """Write a directory ``AutoModelForCausalLM.from_pretrained`` loads: ``model.safetensors`` (a tied
    head left out, as ``save_pretrained`` does), ``config.json``, the tokenizer and the source's
    ``generation_config.json``."""
    import os
    import shutil

    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in hf.items() if not (tied and k == "lm_head.weight")}
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    hf_config.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    generation = os.path.join(source_dir or "", "generation_config.json")
    if source_dir and os.path.isfile(generation):
        shutil.copy(generation, os.path.join(path, "generation_config.json"))


# -- checks ------------------------------------------------------------------------------------------
def _taker(src: dict[str, Tensor]) -> Callable[[str], Tensor]:
    def take(name: str) -> Tensor:
        if name not in src:
            raise KeyError(f"weight {name!r} is missing")
        return src.pop(name)

    return take


def expected_shapes(layout: Qwen2Layout) -> dict[str, tuple[int, ...]]:
    """Unsharded Megatron shapes of every weight of ``layout``."""
    h, d, ffn = layout.hidden_size, layout.head_dim, layout.intermediate_size
    qkv_rows = (layout.num_attention_heads + 2 * layout.num_key_value_heads) * d
    shapes: dict[str, tuple[int, ...]] = {"embedding.word_embeddings.weight": (layout.vocab_size, h),
                                          "decoder.final_layernorm.weight": (h,)}
    for i in range(layout.num_layers):
        m = f"decoder.layers.{i}"
        attn_norm, mlp_norm = layout.norm_names(m)
        shapes.update({attn_norm: (h,), mlp_norm: (h,),
                       f"{m}.self_attention.linear_qkv.weight": (qkv_rows, h),
                       f"{m}.self_attention.linear_proj.weight": (h, layout.num_attention_heads * d),
                       f"{m}.mlp.linear_fc1.weight": (2 * ffn, h), f"{m}.mlp.linear_fc2.weight": (h, ffn)})
        if layout.qkv_bias:
            shapes[f"{m}.self_attention.linear_qkv.bias"] = (qkv_rows,)
    if not layout.tie_word_embeddings:
        shapes["output_layer.weight"] = (layout.vocab_size, h)
    return shapes


def _check_shapes(mg: Mapping[str, Tensor], layout: Qwen2Layout) -> None:
    expected = expected_shapes(layout)
    if set(mg) != set(expected):
        raise KeyError(f"Megatron weights differ from the layout: missing {sorted(set(expected) - set(mg))[:3]}, "
                       f"unexpected {sorted(set(mg) - set(expected))[:3]}")
    for name, shape in expected.items():
        if tuple(mg[name].shape) != shape:
            raise ValueError(f"{name} has shape {tuple(mg[name].shape)}, expected {shape}")
