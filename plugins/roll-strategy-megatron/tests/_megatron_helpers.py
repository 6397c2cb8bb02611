"""Tiny in-memory Qwen2 models for the Megatron tests (no download)."""

from __future__ import annotations


def tiny_qwen2(*, tie: bool, seed: int = 0):
    """A random tiny Qwen2 with grouped-query attention (4 heads, 2 KV heads) and biased q/k/v."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=tie, initializer_range=0.2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return config, model


class AllReduceSum:
    """A differentiable all-reduce (forward: sum over ranks, backward: identity), as Megatron's
    ``reduce_from_tensor_model_parallel_region``; for the two-process vocab-parallel test."""

    @staticmethod
    def apply(tensor):
        import torch
        import torch.distributed as dist

        class _Reduce(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                out = t.clone()
                dist.all_reduce(out)
                return out

            @staticmethod
            def backward(ctx, grad):
                return grad

        return _Reduce.apply(tensor)


def vocab_parallel_rank(rank: int, world: int, port: int, inputs: dict, out_dir: str) -> None:
    """One of ``world`` ranks, each with a vocab slice of the same logits: log-probs, entropy and
    the gradient of their sum w.r.t. its slice, saved for the parent test."""
    import torch
    import torch.distributed as dist
    from roll_strategy_megatron.logprobs import vocab_parallel_token_log_probs

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        vocab = inputs["logits"].shape[-1] // world
        logits = inputs["logits"][..., rank * vocab : (rank + 1) * vocab].clone().requires_grad_(True)
        lp, ent = vocab_parallel_token_log_probs(
            logits, inputs["input_ids"], inputs["response_mask"], vocab_start=rank * vocab, temperature=0.7,
            with_entropy=True, reduce=AllReduceSum.apply, group=dist.group.WORLD)
        (lp.sum() + 0.5 * ent.sum()).backward()
        torch.save({"log_probs": lp.detach(), "entropy": ent.detach(), "grad": logits.grad}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def make_batch(seed: int = 0, rows: int = 8, width: int = 16) -> dict:
    """Right-padded rows of different lengths with responses and advantages (ids < 500)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 500, (rows, width), generator=g)
    attention_mask = torch.zeros(rows, width, dtype=torch.long)
    response_mask = torch.zeros(rows, width, dtype=torch.long)
    for row in range(rows):
        length = int(torch.randint(8, width + 1, (1,), generator=g))
        attention_mask[row, :length] = 1
        response_mask[row, int(torch.randint(2, 6, (1,), generator=g)) : length] = 1
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask,
            "response_mask": response_mask, "advantages": torch.randn(rows, width - 1, generator=g)}


def make_loss_fn(batch: dict):
    """REINFORCE, ``seq-mean-token-mean`` over the whole batch's normalisers."""
    from roll_core.algorithms.aggregation import Normalisers, agg_loss

    mask = batch["response_mask"][:, 1:]
    norm = Normalisers.from_mask(mask, seq_len=mask.shape[-1])

    def loss_fn(mb, log_probs, entropy):
        mask = mb["response_mask"][:, 1:]
        return agg_loss(-mb["advantages"] * log_probs, mask, "seq-mean-token-mean", normalisers=norm), {}

    return loss_fn
