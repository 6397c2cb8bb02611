"""Where a run's ranks land: one Ray placement group built from the run's :class:`Layout`.

One bundle per device group of the layout: ``{"GPU": n, "CPU": n}`` for GPUs; for CPU slots a
token ``{"CPU": 0.01 n}`` (:data:`CPU_SLOT`), so a config written for 24 GPUs still starts its 24
ranks on a 2-core laptop (each rank's threads come from ``strategy_config.num_threads``); plus the
roles' ``ray_resources`` (node labels, e.g. to keep trainers on GPU nodes and env managers
elsewhere). GPU bundles are packed (a tensor-parallel group, and colocated roles, share a node by
construction); CPU bundles are spread over the nodes, since CPU ranks compete for cores.

Ranks are actors scheduled into their bundle. They reserve nothing themselves (the bundle holds
the resources), so colocated roles fit on the same devices; a GPU rank sees exactly its own GPUs
(``CUDA_VISIBLE_DEVICES``, set from the physical ids the bundle was given). Every worker also gets
the run's environment variables: the config's ``system_envs`` and the worker section's, plus glibc
malloc settings that make CPU training 2-3x faster (docs/dependencies.md: without them every
step's large temporary buffers are mmapped and returned).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from roll_core.distributed.layout import Bundle, Layout, RankSlot, role_section
from roll_core.errors import RollError

#: keep big training buffers in the heap instead of mmap-ing and unmapping them every step
FAST_MALLOC_ENV: dict[str, str] = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}
#: what worker processes need regardless of the config (no per-load progress bars in the run's output)
BASE_WORKER_ENV: dict[str, str] = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
#: variables of the driver every worker inherits
INHERITED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ROLL_CACHE_DIR", "ROLL_PLUGINS", "ROLL_DISABLE_PLUGINS",
                 "ROLL_DISABLE_PLUGIN_AUTOLOAD", "PYTHONHASHSEED")


def worker_env(config: Any, section: str | None = None) -> dict[str, str]:
    """Environment variables of a worker process (see the module docstring)."""
    env = {**BASE_WORKER_ENV, **FAST_MALLOC_ENV}
    env.update({key: os.environ[key] for key in INHERITED_ENV if key in os.environ})
    env.update({str(k): str(v) for k, v in (config.system_envs or {}).items()})
    if section is not None:
        env.update({str(k): str(v) for k, v in (role_section(config, section).system_envs or {}).items()})
    return env


def on_driver_node() -> Any:
    """Ray scheduling strategy that keeps an actor on the driver's node.

    The run's coordinators (the group queues, the generation scheduler) hold its state; on the
    driver's node they live exactly as long as the run can, whatever other node is lost.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


def cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0.0))


#: the Ray CPUs one CPU slot reserves (a token: Ray's CPU count must not cap the number of ranks)
CPU_SLOT = 0.01


def bundle_resources(bundle: Bundle) -> dict[str, float]:
    slots = float(len(bundle.devices))
    base = {"GPU": slots, "CPU": slots} if bundle.gpu else {"CPU": round(CPU_SLOT * slots, 4)}
    return {**base, **{k: float(v) for k, v in bundle.resources.items()}}


@dataclass(frozen=True)
class RankPlacement:
    """Where one rank runs."""

    role: str
    rank: int
    bundle: int
    node_id: str
    node_ip: str
    devices: tuple[Any, ...]  # the layout's device ids
    gpu_ids: tuple[str, ...] = ()  # physical GPU ids on its node (empty on CPU)
    local_rank: int = 0
    local_world_size: int = 1


@dataclass
class Placement:
    """The run's placement group and where every rank of every role goes."""

    layout: Layout
    pg: Any
    ranks: dict[str, list[RankPlacement]] = field(default_factory=dict)

    @classmethod
    def create(cls, layout: Layout, *, timeout_s: float = 300.0) -> Placement:
        """Reserve the bundles (waiting up to ``timeout_s``), then find out where each landed."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        bundles = [bundle_resources(b) for b in layout.bundles]
        strategy = "PACK" if layout.on_gpus else "SPREAD"
        pg = placement_group(bundles, strategy=strategy, name=f"roll-{os.getpid()}-{id(layout):x}")
        try:
            ray.get(pg.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(pg)
            raise RollError(_unplaceable(bundles, timeout_s)) from None
        placement = cls(layout, pg)
        placement._locate()
        return placement

    def _locate(self) -> None:
        import ray
        from ray.util.placement_group import placement_group_table

        # a bundle's node is in the placement group table; only its GPU ids need a probe inside it
        node_of = {int(k): v for k, v in placement_group_table(self.pg).get("bundles_to_node_id", {}).items()}
        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        found: list[Any] = []
        for bundle in self.layout.bundles:
            node_id = node_of.get(bundle.index)
            if not bundle.gpu and node_id in ips:
                found.append((node_id, ips[node_id], []))
            else:
                found.append(bundle)
        probed = iter(probe_bundles(self.pg, [f for f in found if not isinstance(f, tuple)]))
        found = [f if isinstance(f, tuple) else next(probed) for f in found]
        for role, lay in self.layout.roles.items():
            placed = []
            for slot in lay.ranks:
                node_id, node_ip, gpu_ids = found[slot.bundle]
                placed.append(RankPlacement(role, slot.rank, slot.bundle, node_id, node_ip, slot.devices,
                                            _rank_gpus(self.layout.bundles[slot.bundle], slot, gpu_ids)))
            per_node: dict[str, list[RankPlacement]] = {}
            for p in placed:
                per_node.setdefault(p.node_id, []).append(p)
            self.ranks[role] = [
                RankPlacement(**{**asdict(p), "local_rank": per_node[p.node_id].index(p),
                                 "local_world_size": len(per_node[p.node_id])})
                for p in placed
            ]

    def relocate(self, role: str, rank: int, *, timeout_s: float = 60.0) -> RankPlacement | None:
        """Where a lost rank's replacement goes, or None while there is no room for it.

        Ray re-places the bundles of a lost node on their own, as soon as a node with room joins; a
        rank whose actor died on a live node (killed, OOM) keeps its bundle there. So the rank's
        bundle on a live node is the sign that the cluster has room again. The rank's record
        (``ranks``, ``placement.json``) moves with it; a GPU bundle's physical GPU ids are asked again.
        """
        import ray
        from ray.util.placement_group import placement_group_table

        old = self.ranks[role][rank]
        bundles = {int(k): v for k, v in placement_group_table(self.pg).get("bundles_to_node_id", {}).items()}
        alive = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
        node_id = bundles.get(old.bundle)
        if node_id not in alive:
            return None
        gpu_ids = old.gpu_ids
        bundle = self.layout.bundles[old.bundle]
        if bundle.gpu:
            try:
                node_id, _, gpus = probe_bundles(self.pg, [bundle], timeout_s=timeout_s)[0]
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
                return None
            gpu_ids = _rank_gpus(bundle, self.layout.roles[role].ranks[rank], gpus)
        new = replace(old, node_id=node_id, node_ip=alive.get(node_id, old.node_ip), gpu_ids=gpu_ids)
        self.ranks[role][rank] = new
        return new

    def arrived(self, role: str, rank: int, node_id: str, node_ip: str) -> RankPlacement:
        """Record the node a rank's replacement came up on. :meth:`relocate` reads where the bundle
        is when the replacement starts; a node that went without a word is still "alive" to Ray
        until its heartbeats are missed, and Ray then moves the bundle (and the starting actor) to a
        node that joins, so the actor's own answer is the one to keep."""
        old = self.ranks[role][rank]
        if (old.node_id, old.node_ip) != (node_id, node_ip):
            self.ranks[role][rank] = replace(old, node_id=node_id, node_ip=node_ip)
        return self.ranks[role][rank]

    def actor_options(self, config: Any, where: RankPlacement) -> dict[str, Any]:
        """Ray actor options that put a rank into its bundle with its devices and the run's variables."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        env = worker_env(config, where.role)
        if where.gpu_ids:  # the rank's own GPUs; Ray must not reset the variable for a num_gpus=0 actor
            env.update(CUDA_VISIBLE_DEVICES=",".join(where.gpu_ids), RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES="1")
        return {
            "num_cpus": 0,
            "num_gpus": 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=where.bundle),
            "runtime_env": {"env_vars": env},
            "max_restarts": 0,
        }

    def describe(self) -> list[str]:
        """One line per role for the run header: its layout, then its ranks by node, e.g.
        ``actor_train: 4 ranks x 1 GPU on devices 0-3 | ranks 0-3 on node 10.0.0.3 (ab12cd34) GPU 0,1,2,3``."""
        lines = []
        for summary, placed in zip(self.layout.describe(), self.ranks.values(), strict=True):
            by_node: dict[str, list[RankPlacement]] = {}
            for p in placed:
                by_node.setdefault(p.node_id, []).append(p)
            parts = []
            for node_id, ranks in by_node.items():
                gpus = [g for p in ranks for g in p.gpu_ids]
                parts.append(f"{_ranks([p.rank for p in ranks])} on node {ranks[0].node_ip} ({node_id[:8]})"
                             + (f" GPU {','.join(gpus)}" if gpus else ""))
            lines.append(f"{summary} | {'; '.join(parts)}")
        return lines

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        """role -> [{rank, node_id, node_ip, devices, gpu_ids, bundle}] (what ``placement.json`` holds)."""
        return {role: [{"rank": p.rank, "node_id": p.node_id, "node_ip": p.node_ip, "devices": list(p.devices),
                        "gpu_ids": list(p.gpu_ids), "bundle": p.bundle} for p in placed]
                for role, placed in self.ranks.items()}

    def save(self, path: str) -> str:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2)
        return path

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception:  # the cluster may be gone already (shutdown after a failure)
                pass
            self.pg = None


def write_placement(path: str, ranks: dict[str, Any], actors: dict[str, Any], *, run_id: str, resumed: bool) -> str:
    """``placement.json``: role -> ranks (as :meth:`Placement.to_json`) at the top level, ``actors``
    (env managers, group queues, the generate scheduler) beside them, and under ``earlier`` the layouts
    of the runs a resumed run continues (each with its own ``started``), oldest first; a new run
    starts the file afresh. ``run_id`` tells the run's own earlier write (ranks first, then actors)."""
    import time

    earlier: list[dict[str, Any]] = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            try:
                old = json.load(f)
            except ValueError:
                old = {}
        # the same run writes twice (ranks, then its actors): its own entry is replaced, not kept
        same_run = old.get("run_id") == run_id
        if resumed or same_run:
            earlier = list(old.get("earlier", []))
            if not same_run:
                earlier.append({k: v for k, v in old.items() if k != "earlier"})
        started = old.get("started") if same_run else None
    else:
        started = None
    doc = {**ranks, "actors": actors, "started": started or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "run_id": run_id, "earlier": earlier}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return path


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ",".join(map(str, ranks))


def _rank_gpus(bundle: Bundle, slot: RankSlot, gpu_ids: list[str]) -> tuple[str, ...]:
    if not bundle.gpu:
        return ()
    return tuple(gpu_ids[bundle.devices.index(d)] for d in slot.devices)


class _Probe:
    """Lives inside a bundle: its node and, for a GPU bundle, the physical GPU ids Ray gave it."""

    def where(self) -> tuple[str, str, list[str]]:
        import ray

        context = ray.get_runtime_context()
        return context.get_node_id(), ray.util.get_node_ip_address(), [str(g) for g in ray.get_gpu_ids()]


def probe_bundles(pg: Any, bundles: list[Bundle], *, timeout_s: float | None = None) -> list[tuple[str, str, list[str]]]:
    """``(node_id, node_ip, gpu_ids)`` of each bundle, asked from inside it.

    The probe is an actor that is killed as soon as it answered, not a task. The probes used to be
    tasks, and now and then the run's output carried a ``Mutex corrupt`` SIGABRT stack dump from one
    of their workers after the probes (issue 35; never reproduced on demand). A task's worker goes
    back to Ray's worker pool, and the raylet later stops idle pooled workers with a graceful exit,
    in which Ray's C++ core tears down its locks while its own threads may still use one: absl's
    mutex check then aborts the process. That is Ray's shutdown race, harmless to the run (the
    worker was idle), but its dump reached the user. ``ray.kill`` ends the probe with a forced quick
    exit instead, which runs none of that teardown, and no probe worker is left in the pool to be
    stopped later. CPU bundles need no probe at all (their node is in the placement group table).
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    probe = ray.remote(_Probe)
    actors = [probe.options(num_cpus=0, num_gpus=float(len(b.devices)) if b.gpu else 0.0, max_restarts=0,
                            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=b.index)
                            ).remote() for b in bundles]
    try:
        return [tuple(answer) for answer in ray.get([a.where.remote() for a in actors], timeout=timeout_s)]
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)


def _unplaceable(bundles: list[Mapping[str, float]], timeout_s: float) -> str:
    import ray

    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    have = {k: v for k, v in ray.cluster_resources().items() if k in need}
    return (f"The run's workers could not be placed within {timeout_s:.0f}s: their {len(bundles)} bundles need "
            f"{_fmt(need)} in all (largest bundle {_fmt(max(bundles, key=lambda b: sum(b.values())))}), the Ray "
            f"cluster has {_fmt(have)}. Lower the ranks (device_mapping / world_size), or add nodes "
            "(`ray start --address ...`) with those resources.")


def _fmt(resources: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"
