"""Does the pool fit? Every pool node / DAX device against the host bytes of the ranks mapped to it.

Bytes per rank: the pool's spec (:class:`sactool.pool.plan.PoolSpec`: what the engine asks of each
rank, for SGLang :func:`sactool.profile.sizing.host_sizing`, §2.5 of the integration notes). Node free
memory is :func:`sactool.pool.readings.node_room` (the rule the plug-in's own
``allocate(check_free=True)`` applies); ``pool.capacity_bytes`` pins it. DAX facts and nodes come
from :func:`sactool.topology.probe` via :func:`sactool.pool.targets.target_facts`
(``/sys/bus/dax/devices/daxX.Y`` size, align and mode: kmem = system-ram, device_dax = devdax). Ranks
sharing a target each get a slice of it (:mod:`sactool.pool.rankplan`). Works on a recorded sysfs
tree. Engine-neutral: which engine runs, and whether its role has a host pool at all, is the
caller's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sactool.errors import CapacityError
from sactool.host.sysfs import SysfsReader
from sactool.pool.plan import PoolSpec, rank_plan
from sactool.pool.rankplan import RankPlan
from sactool.pool.targets import Target, node_of, target_facts, target_names
from sactool.units import format_bytes


@dataclass(frozen=True)
class TargetCheck:
    """One pool target: the ranks mapped to it, the bytes they need and what it has."""

    target: str                 # node2 / dax0.0
    ranks: tuple[int, ...]
    need_bytes: int | None
    available_bytes: int | None
    available_source: str
    ok: bool


@dataclass(frozen=True)
class PoolCheck:
    sizing: Any                           # the engine's sizing record (PoolSpec.sizing), for reports
    targets: tuple[TargetCheck, ...]
    note: str
    plan: RankPlan | None = None          # each rank's target and slice
    facts: tuple[Target, ...] = ()        # the targets as this host (or recording) has them


def _numa_node(target: str) -> int:
    """The node of a NUMA-mode target (``node2`` → 2). The rank plan admits no target outside the
    profile's ``pool.nodes`` in NUMA mode, so a DAX name here is a bug, not bad input."""
    n = node_of(target)
    assert n is not None, f"NUMA-mode pool target {target!r} is not a node"
    return n


def _node_share(q: Any, per_rank: int, by_target: dict[str, list[int]]) -> dict[int, tuple[int, set[int]]]:
    """node -> (bytes, ranks): bind/preferred put a rank's pool on its node; weighted interleave
    spreads every rank's pool over the weight nodes in proportion to the weights (``q``: the pool
    settings)."""
    out: dict[int, tuple[int, set[int]]] = {}
    for target, ranks in by_target.items():
        for r in ranks:
            if q.policy == "weighted_interleave" and q.interleave_weights:
                tot = sum(q.interleave_weights.values())
                parts = {n: per_rank * w // tot for n, w in q.interleave_weights.items()}
            else:
                parts = {_numa_node(target): per_rank}
            for n, b in parts.items():
                cur, rs = out.get(n, (0, set()))
                out[n] = (cur + b, rs | {r})
    return out


def check_pool(spec: PoolSpec, reader: SysfsReader) -> PoolCheck:
    """Raise TopologyError (target absent / wrong mode) or CapacityError (too small); else report,
    with the rank plan (:func:`sactool.pool.plan.rank_plan`): each rank's target and, in devdax
    mode, its own aligned slice of a shared device, carved around the devices' known poison (live:
    the poison lists are asked for — root; a recording replays the list it captured)."""
    sizing = spec.sizing
    q = spec.settings
    if q.placement == "none":
        return PoolCheck(sizing, (), "placement none: the pool stays in the GPU-local DRAM the engine binds each rank to")
    from sactool.topology import probe

    topo = probe(reader, poison=q.mode == "devdax")   # devdax: slices are carved around known poison
    per_rank = spec.bytes_per_rank
    facts = target_facts(topo, reader, target_names(q), capacity_bytes=q.capacity_bytes)
    plan = rank_plan(spec, facts, check_pool=q.mode == "devdax")   # devdax: pool > slice is a CapacityError
    by_target = plan.ranks_by_target()
    checks: list[TargetCheck] = []
    if q.mode == "devdax":
        for t in facts:
            ranks = by_target.get(t.name, [])
            sizes = [plan.slot(r).size_bytes for r in ranks]
            known = [v for v in sizes if v is not None]
            avail = sum(known) if sizes and len(known) == len(sizes) else t.capacity_bytes
            need = None if per_rank is None else per_rank * len(ranks)
            carved = " carved around known poison" if any(n == t.name for n, _ in plan.carved) else ""
            checks.append(TargetCheck(t.name, tuple(ranks), need, avail,
                                      f"{t.capacity_source}; {len(ranks)} aligned slices of {sizes[0] if sizes else 0} "
                                      f"bytes{carved}", True))
        return PoolCheck(sizing, tuple(checks), "" if per_rank is not None else
                         f"capacity not checked: host bytes per rank {spec.bytes_source}", plan, tuple(facts))
    nodes = sorted({_numa_node(t) for t in by_target} | set(q.interleave_weights if q.policy == "weighted_interleave" else ()))
    room_of = {t.name: t for t in facts}
    for n in nodes:
        if f"node{n}" not in room_of:           # a weighted-interleave node that is not a rank target
            room_of.update({t.name: t for t in target_facts(topo, reader, [f"node{n}"], capacity_bytes=q.capacity_bytes)})
    shares = _node_share(q, per_rank, by_target) if per_rank is not None else {}
    for n in nodes:
        t = room_of[f"node{n}"]
        need, on_node = shares.get(n, (None, set()))
        if per_rank is None:
            on_node = set(by_target.get(f"node{n}", []))
        room = t.capacity_bytes
        if need is not None and room is not None and need > room:
            raise CapacityError(
                f"node{n} is short of memory: ranks {', '.join(map(str, sorted(on_node)))} need "
                f"{format_bytes(need)} ({format_bytes(per_rank)} per rank from {spec.bytes_source}), "
                f"{format_bytes(max(room, 0))} free ({t.capacity_source})",
                "lower hisparse.host_to_device_ratio or sglang.max_running_requests in the profile "
                "(sactool tune), spread ranks over more pool.nodes, or free memory on the node")
        checks.append(TargetCheck(f"node{n}", tuple(sorted(on_node)), need, room, t.capacity_source, True))
    note = "" if per_rank is not None else f"capacity not checked: host bytes per rank {spec.bytes_source}"
    return PoolCheck(sizing, tuple(checks), note, plan, tuple(facts))
