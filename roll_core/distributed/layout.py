"""Roles -> ranks -> device slots -> bundles: where a run's workers go, decided before Ray starts.

ROLL's worker sections say where a role runs with ``device_mapping`` (device ids, e.g.
``list(range(0,4))``), ``num_gpus_per_worker`` (devices per rank) and ``world_size``. roll reads
them the same way on any cluster:

* **ranks**: ``world_size = len(device_mapping) / num_gpus_per_worker``; rank ``r`` owns devices
  ``device_mapping[r*k:(r+1)*k]``. Without a ``device_mapping`` a role has ``world_size`` ranks
  (default 1) of one device slot each, shared with no other role.
* **devices**: on a cluster with GPUs a device id is a GPU; on a CPU-only cluster the same ids are
  *CPU slots* (one logical CPU each), so a config written for 8 GPUs starts the same ranks, as
  processes, on CPUs. That is how ROLL configs (megatron on ``list(range(0,16))``, vLLM on
  ``list(range(16,24))``) run unchanged on a laptop or a CPU cluster.
* **bundles**: the devices that must sit on one node form one placement-group bundle: a rank's own
  devices, the ranks of one tensor-parallel group, and every role whose ``device_mapping`` overlaps
  (ROLL's colocation of ``actor_train`` and ``actor_infer`` on the same GPUs: they share bundles
  and take turns, offloading around generation and training).

Everything here is pure (no Ray); :mod:`roll_core.distributed.placement` makes it real.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from roll_core.errors import ConfigError

#: strategy_config keys that give a train strategy's tensor-parallel size (megatron, vLLM, SGLang names)
TP_KEYS = ("tensor_model_parallel_size", "tensor_parallel_size", "tp_size")


@dataclass(frozen=True)
class RankSlot:
    """One rank of a role: its device slots and the bundle it is placed in."""

    role: str
    rank: int
    devices: tuple[int | str, ...]  # device ids of device_mapping; "role:rank" slots for unmapped roles
    bundle: int


@dataclass(frozen=True)
class RoleLayout:
    role: str
    world_size: int
    devices_per_rank: int
    mapped: bool  # placed by device_mapping (else its own CPU slots)
    tensor_parallel: int = 1
    ranks: tuple[RankSlot, ...] = ()
    ray_resources: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Bundle:
    """Devices that must share a node, and the roles with ranks on them."""

    index: int
    devices: tuple[int | str, ...]
    roles: tuple[str, ...]
    gpu: bool  # GPUs, else CPU slots
    resources: Mapping[str, float] = field(default_factory=dict)  # roles' ray_resources, summed per rank


@dataclass(frozen=True)
class Layout:
    """The run's roles and bundles (see the module docstring)."""

    on_gpus: bool
    roles: Mapping[str, RoleLayout]
    bundles: tuple[Bundle, ...]

    def colocated(self, a: str, b: str) -> bool:
        """Whether roles ``a`` and ``b`` share a bundle (and so take turns on its devices)."""
        return any(a in bundle.roles and b in bundle.roles for bundle in self.bundles)

    def describe(self) -> list[str]:
        """One line per role: ``actor_train: 4 ranks x 1 GPU on devices 0-3 (with actor_infer)``."""
        lines = []
        for role, lay in self.roles.items():
            kind = "GPU" if self.on_gpus and lay.mapped else "CPU slot"
            where = _span([d for r in lay.ranks for d in r.devices]) if lay.mapped else "its own slots"
            partners = sorted({r for b in self.bundles if role in b.roles for r in b.roles} - {role})
            also = f" (shared with {', '.join(partners)})" if partners else ""
            tp = f", tensor parallel {lay.tensor_parallel}" if lay.tensor_parallel > 1 else ""
            plural = "s" if lay.devices_per_rank > 1 else ""
            lines.append(f"{role}: {lay.world_size} rank{'s' if lay.world_size > 1 else ''} x "
                         f"{lay.devices_per_rank} {kind}{plural} on {where}{tp}{also}")
        return lines


#: layout roles ``rewards.<domain>`` are the reward worker groups of RLVR domains
REWARD_ROLE_PREFIX = "rewards."


def role_section(config: Any, role: str) -> Any:
    """The worker section of a layout role: ``config.<role>``, or ``config.rewards[<domain>]``."""
    if role.startswith(REWARD_ROLE_PREFIX):
        return config.rewards[role[len(REWARD_ROLE_PREFIX):]]
    return getattr(config, role)


def role_world_size(section: Any, path: str) -> tuple[int, int, bool]:
    """``(world_size, devices_per_rank, mapped)`` of a worker section (see the module docstring)."""
    mapping = list(section.device_mapping or [])
    per_rank = int(section.num_gpus_per_worker)
    if not mapping:
        return int(section.world_size or 1), 1, False
    world = len(mapping) // per_rank
    if section.world_size and int(section.world_size) != world:
        raise ConfigError(
            f"{path}.world_size is {section.world_size}, but device_mapping has {len(mapping)} devices and "
            f"num_gpus_per_worker is {per_rank}, which makes {world} ranks; drop world_size or make them agree."
        )
    return world, per_rank, True


def tensor_parallel_size(section: Any) -> int:
    config = dict((section.strategy_args.strategy_config if section.strategy_args else None) or {})
    for key in TP_KEYS:
        if config.get(key):
            return int(config[key])
    return 1


def build_layout(config: Any, roles: Iterable[str], *, on_gpus: bool) -> Layout:
    """The layout of ``roles`` (worker sections of ``config``) on a cluster with or without GPUs."""
    roles = list(roles)
    role_layouts: dict[str, RoleLayout] = {}
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(items: Iterable[Any]) -> None:
        items = list(items)
        for other in items[1:]:
            parent[find(other)] = find(items[0])

    owned: dict[str, list[tuple[Any, ...]]] = {}
    for role in roles:
        section = role_section(config, role)
        world, per_rank, mapped = role_world_size(section, role)
        generates = role == "actor_infer" or role.startswith(REWARD_ROLE_PREFIX)  # no tensor-parallel groups
        tp = 1 if generates else tensor_parallel_size(section)
        if world % tp:
            raise ConfigError(f"{role}: {world} ranks do not split into tensor-parallel groups of {tp} "
                              f"(strategy_config); give device_mapping a multiple of {tp * per_rank} devices.")
        if mapped:
            mapping = list(section.device_mapping)
            devices = [tuple(mapping[r * per_rank:(r + 1) * per_rank]) for r in range(world)]
        else:
            devices = [(f"{role}:{r}",) for r in range(world)]
        for rank_devices in devices:
            union(rank_devices)
        for group in range(0, world, tp):  # a tensor-parallel group's devices stay on one node
            union([d for rank_devices in devices[group:group + tp] for d in rank_devices])
        owned[role] = devices
        role_layouts[role] = RoleLayout(role, world, per_rank, mapped, tp,
                                        ray_resources=dict(getattr(section, "ray_resources", None) or {}))

    components: dict[Any, list[Any]] = {}
    for devices in owned.values():
        for rank_devices in devices:
            for d in rank_devices:
                components.setdefault(find(d), [])
                if d not in components[find(d)]:
                    components[find(d)].append(d)
    # mapped devices first, by id; then the unmapped roles' own slots, in role order
    ordered = sorted(components.values(), key=lambda ds: (1, "", 0) if isinstance(ds[0], str) else (0, "", min(ds)))
    index_of = {find(ds[0]): i for i, ds in enumerate(ordered)}
    bundle_roles: dict[int, list[str]] = {i: [] for i in range(len(ordered))}
    bundle_resources: dict[int, dict[str, float]] = {i: {} for i in range(len(ordered))}
    final: dict[str, RoleLayout] = {}
    for role, lay in role_layouts.items():
        ranks = []
        for r, rank_devices in enumerate(owned[role]):
            b = index_of[find(rank_devices[0])]
            ranks.append(RankSlot(role, r, rank_devices, b))
            if role not in bundle_roles[b]:
                bundle_roles[b].append(role)
            for key, amount in lay.ray_resources.items():
                bundle_resources[b][key] = bundle_resources[b].get(key, 0.0) + float(amount)
        final[role] = RoleLayout(lay.role, lay.world_size, lay.devices_per_rank, lay.mapped, lay.tensor_parallel,
                                 tuple(ranks), lay.ray_resources)
    bundles = tuple(
        Bundle(i, tuple(ds if isinstance(ds[0], str) else sorted(ds)), tuple(bundle_roles[i]),
               gpu=on_gpus and not isinstance(ds[0], str), resources=bundle_resources[i])
        for i, ds in enumerate(ordered)
    )
    return Layout(on_gpus, final, bundles)


def _span(devices: list[Any]) -> str:
    ints = sorted(d for d in devices if isinstance(d, int))
    if ints and ints == list(range(ints[0], ints[-1] + 1)):
        return f"devices {ints[0]}-{ints[-1]}" if len(ints) > 1 else f"device {ints[0]}"
    return "devices " + ", ".join(map(str, ints))
