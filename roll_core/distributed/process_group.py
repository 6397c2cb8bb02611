"""Inside a rank: the torch.distributed process group of its role.

:class:`~roll_core.workers.train_group.WorkerGroup` gives each rank the variables torchrun
would (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``); :func:`init_from_env` joins the group with them, so backends that expect torchrun
(DeepSpeed, Megatron) find it already initialised and the built-in ``hf_train`` wraps its model in
DDP. gloo on CPU, nccl when the rank has a GPU.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Mapping

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def rank_env(rank: int, world_size: int, local_rank: int, local_world_size: int, master_addr: str,
             master_port: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world_size), "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port)}


def free_port(host: str = "") -> int:
    """A port nobody listens on now, on this node (the group's rank 0 asks on its own node)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def node_address() -> tuple[str, int]:
    """``(ip, free port)`` of the node this runs on: where rank 0 will listen."""
    import ray

    return ray.util.get_node_ip_address(), free_port()


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def init_from_env(env: Mapping[str, str] | None = None, *, timeout_s: float = 600.0) -> bool:
    """Set the rank variables (``env``), then join the process group when there are several ranks.

    Returns whether a process group is up. Idempotent.
    """
    import torch
    import torch.distributed as dist

    if env:
        os.environ.update({k: str(v) for k, v in env.items()})
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if dist.is_initialized():
        return True
    on_cuda = torch.cuda.is_available()
    if on_cuda:
        torch.cuda.set_device(0)  # each rank sees exactly its own GPUs (CUDA_VISIBLE_DEVICES)
    dist.init_process_group("nccl" if on_cuda else "gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(seconds=timeout_s))
    return True


def barrier() -> None:
    """Wait for every rank of the group (nothing to wait for with one rank)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(value: float) -> float:
    """``value`` summed over the ranks of the group (``value`` itself with one rank)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor[0])
