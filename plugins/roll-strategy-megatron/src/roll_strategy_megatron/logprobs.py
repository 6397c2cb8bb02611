"""Label-aligned log-probs and entropy from vocab-parallel logits (each TP rank holds a vocab slice).

``reduce`` sums a tensor over the tensor-parallel group: forward all-reduce, backward identity
(megatron's ``reduce_from_tensor_model_parallel_region``), so gradients reach every rank's slice.
With one TP rank it is the identity and this is exactly ``hf_train``'s ``token_log_probs``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

Tensor = torch.Tensor


def vocab_parallel_token_log_probs(logits: Tensor, input_ids: Tensor, response_mask: Tensor, *,
                                   vocab_start: int = 0, temperature: float = 1.0, with_entropy: bool = False,
                                   reduce: Callable[[Tensor], Tensor] = lambda t: t,
                                   group: dist.ProcessGroup | None = None) -> tuple[Tensor, Tensor | None]:
    """``(log_probs [b, L-1], entropy or None)`` of ``input_ids[:, 1:]``, masked by ``response_mask[:, 1:]``.

    ``logits`` is ``[b, L, V_local]``, the vocab slice ``[vocab_start, vocab_start + V_local)``;
    ``group`` is the TP group (``None``: a single rank).
    """
    z = logits[:, :-1].float()
    if temperature != 1.0:
        z = z / temperature
    # a shift by the global max (a constant for autograd) keeps exp() finite
    shift = z.detach().amax(dim=-1)
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(shift, op=dist.ReduceOp.MAX, group=group)
    shifted = z - shift.unsqueeze(-1)
    exp = shifted.exp()
    log_norm = torch.log(reduce(exp.sum(dim=-1)))
    labels = input_ids[:, 1:] - vocab_start
    here = (labels >= 0) & (labels < z.shape[-1])
    picked = shifted.gather(-1, labels.clamp(0, z.shape[-1] - 1).unsqueeze(-1)).squeeze(-1)
    label_logit = reduce(torch.where(here, picked, torch.zeros_like(picked)))
    mask = response_mask[:, 1:].to(z.dtype)
    log_probs = (label_logit - log_norm) * mask
    entropy = None
    if with_entropy:  # H = log Z - E_p[z]  (both in the shifted frame)
        mean_logit = reduce((exp * shifted).sum(dim=-1)) / reduce(exp.sum(dim=-1))
        entropy = (log_norm - mean_logit) * mask
    return log_probs, entropy
