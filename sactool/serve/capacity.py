"""Does the pool fit? Every pool node / DAX device against the host bytes of the ranks mapped to it.

Bytes per rank: :func:`sactool.hisparse.hostpool.host_sizing` (§2.5 of the integration notes). Node free
memory follows :mod:`sactool.memory.nodes` (``nodeN/meminfo`` MemFree, plus free memory
``/proc/meminfo`` counts but no node reports, minus the safety margin kept back there), so the
launcher and the plug-in's own ``allocate(check_free=True)`` apply the same rule. DAX facts are
and nodes come from :func:`sactool.topology.probe` (``/sys/bus/dax/devices/daxX.Y`` size and mode:
kmem = system-ram, device_dax = devdax). Works on a recorded sysfs tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.errors import CapacityError, RecordError, TopologyError
from sactool.host.sysfs import SysfsReader
from sactool.memory import nodes as memnodes
from sactool.profile import Profile
from sactool.hisparse.hostpool import HostSizing, host_sizing, ranks_by_target
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
    sizing: HostSizing
    targets: tuple[TargetCheck, ...]
    note: str


def _node_share(profile: Profile, per_rank: int, by_target: dict[str, list[int]]) -> dict[int, tuple[int, set[int]]]:
    """node -> (bytes, ranks): bind/preferred put a rank's pool on its node; weighted interleave
    spreads every rank's pool over the weight nodes in proportion to the weights."""
    q = profile.pool
    out: dict[int, tuple[int, set[int]]] = {}
    for target, ranks in by_target.items():
        for r in ranks:
            if q.policy == "weighted_interleave" and q.interleave_weights:
                tot = sum(q.interleave_weights.values())
                parts = {n: per_rank * w // tot for n, w in q.interleave_weights.items()}
            else:
                parts = {int(target[4:]): per_rank}
            for n, b in parts.items():
                cur, rs = out.get(n, (0, set()))
                out[n] = (cur + b, rs | {r})
    return out


def _dax(topo, name: str) -> int:
    dev = next((d for d in topo.dax_devices if d.name == name), None)
    if dev is None:
        have = ", ".join(d.name for d in topo.dax_devices) or "none"
        raise TopologyError(f"DAX device {name} does not exist on this host (DAX devices: {have})",
                            "run 'sactool probe' to list DAX devices, and fix pool.dax_devices in the profile")
    if dev.mode == "system-ram":
        raise TopologyError(f"DAX device {name} is in system-ram mode (bound to kmem): its memory is "
                            f"node{dev.target_node}",
                            f"set pool.mode numa and pool.nodes [{dev.target_node}] in the profile, or "
                            f"'daxctl reconfigure-device --mode=devdax {name}'")
    if dev.mode != "devdax":
        raise TopologyError(f"DAX device {name} is not bound to device_dax (driver: {dev.driver or 'none'})",
                            f"daxctl reconfigure-device --mode=devdax {name}")
    return dev.size_bytes or 0


def check_pool(profile: Profile, reader: SysfsReader) -> PoolCheck:
    """Raise TopologyError (target absent / wrong mode) or CapacityError (too small); else report."""
    sizing = host_sizing(profile)
    q = profile.pool
    if profile.sglang.role == "prefill":
        return PoolCheck(sizing, (), "role prefill: no HiSparse host pool")
    if q.placement == "none":
        return PoolCheck(sizing, (), "placement none: the pool stays in the GPU-local DRAM SGLang binds each rank to")
    by_target = ranks_by_target(profile)
    per_rank = sizing.bytes_per_rank
    checks: list[TargetCheck] = []
    from sactool.topology import probe

    topo = probe(reader)
    if q.mode == "devdax":
        for name, ranks in sorted(by_target.items()):
            if len(ranks) > 1:
                raise RecordError(f"profile field pool.rank_targets: DAX device {name} would be mapped by ranks "
                                  f"{', '.join(map(str, ranks))}, and each rank maps a device from offset 0",
                                  "give every rank its own DAX device, or use the device's node in system-ram mode")
            size = _dax(topo, name)
            ok = per_rank is None or per_rank <= size
            if not ok:
                raise CapacityError(f"DAX device {name} holds {format_bytes(size)}, rank {ranks[0]}'s pool needs "
                                    f"{format_bytes(per_rank)} ({sizing.source})",
                                    "lower hisparse.host_to_device_ratio or sglang.max_running_requests in the "
                                    "profile (sactool tune), or use a larger device")
            checks.append(TargetCheck(name, tuple(ranks), per_rank, size, f"sys/bus/dax/devices/{name}/size", ok))
        return PoolCheck(sizing, tuple(checks), "")
    nodes = sorted({int(t[4:]) for t in by_target} | set(q.interleave_weights if q.policy == "weighted_interleave" else ()))
    facts = {}
    for n in nodes:
        node = topo.node(n)       # TopologyError names the missing node and the nodes there are
        if node.has_memory is False or not node.mem_total_bytes:
            raise TopologyError(f"node{n} has no memory on this host", "fix pool.nodes in the profile (see 'sactool probe')")
        facts[n] = memnodes.free_estimate(topo, reader, n)
    shares = _node_share(profile, per_rank, by_target) if per_rank is not None else {}
    for n in nodes:
        f = facts[n]
        need, ranks = shares.get(n, (None, set()))
        if per_rank is None:
            ranks = set(by_target.get(f"node{n}", []))
        margin = max(memnodes.SAFETY_MARGIN_BYTES, int(memnodes.SAFETY_MARGIN_FRACTION * (f.total_bytes or 0)))
        room = None if f.bytes is None else f.bytes - margin
        ok = need is None or room is None or need <= room
        if not ok:
            raise CapacityError(
                f"node{n} is short of memory: ranks {', '.join(map(str, sorted(ranks)))} need "
                f"{format_bytes(need)} ({format_bytes(per_rank)} per rank from {sizing.source}), "
                f"{format_bytes(max(room, 0))} free after {format_bytes(margin)} kept back",
                "lower hisparse.host_to_device_ratio or sglang.max_running_requests in the profile "
                "(sactool tune), spread ranks over more pool.nodes, or free memory on the node")
        checks.append(TargetCheck(f"node{n}", tuple(sorted(ranks)), need, room, f.source + " minus margin", ok))
    note = "" if per_rank is not None else f"capacity not checked: host bytes per rank {sizing.source}"
    return PoolCheck(sizing, tuple(checks), note)
