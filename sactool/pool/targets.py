"""Pool targets: the NUMA nodes or DAX devices that hold the KV host pool, with the facts the rank
plan needs, read from a topology (live or recorded). One type, :class:`Target`, for tune, serve,
fleet and the plug-ins.

* capacity: a NUMA node's room (:func:`sactool.pool.readings.node_room`: free memory plus
  reclaimable page cache minus the margin kept back — a momentary reading); a devdax device's
  ``daxX.Y/size``; or what ``pool.capacity_bytes`` / ``--pool-bytes`` pins (never more than a
  device holds);
* ``align``: ``daxX.Y/align``;
* the CPU node (socket) of a target: the probe's own answer, :meth:`Topology.locality` for a
  node and :meth:`Topology.dax_locality` for a DAX device (the CXL device's affinity first),
  with its evidence.

Works on a recorded tree: a recording's meminfo and DAX sizes give the capacities, so a SAC box
can be planned from its snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sactool.errors import TopologyError


@dataclass(frozen=True)
class Target:
    """One pool target with the facts the plan needs.

    ``name``: ``node2`` or ``dax0.0`` (the kernel's names); ``kind``: ``numa`` | ``devdax``;
    ``capacity_bytes``: what the pool may take there (None: unknown) and ``capacity_source``
    (where it was read or who pinned it); ``align_bytes``: ``daxX.Y/align`` (devdax; slices start
    and end on it); ``cpu_node``: the CPU node (socket) the target hangs off, with
    ``cpu_node_evidence``; ``node``: the NUMA node its memory is (``nodeN``: N; a DAX device:
    its ``target_node`` where known) — what a bench record measured; ``poison``: a DAX device's known
    poisoned ranges, ``(offset in the device, length)`` (the poison list of the memdevs behind it,
    :mod:`sactool.topology.health`), () when the lists were read and hold none of it, None when they
    were not read (a node: always None, the kernel places its pages) — the slice rule carves around them.
    """

    name: str
    kind: str
    capacity_bytes: int | None = None
    capacity_source: str = ""
    align_bytes: int | None = None
    cpu_node: int | None = None
    cpu_node_evidence: str = ""
    node: int | None = None
    poison: tuple[tuple[int, int], ...] | None = None


def dax_poison(topo, name: str) -> tuple[tuple[int, int], ...] | None:
    """The known poison of DAX device ``name``: ``(offset, length)`` of every record of the health
    block translated into it (``probe(reader, poison=True)``, or a recording's captured list); None
    when no memdev behind it had its poison list read."""
    behind = {m.name for m in topo.memdevs_of_dax(name)}
    lists = [h.poison for h in getattr(topo, "health", ()) if h.memdev in behind and h.poison is not None]
    if not lists:
        return None
    return tuple(sorted({(p.dax_offset_bytes, p.length_bytes) for recs in lists for p in recs
                         if p.dax_device == name and p.dax_offset_bytes is not None}))


def node_of(name: str) -> int | None:
    """The NUMA node a pool target's name is (``node2`` → 2), None for a DAX device (``dax0.0``):
    the one place the target-name spelling is read back."""
    return int(name[4:]) if name.startswith("node") and name[4:].isdigit() else None


def target_names(settings: Any) -> list[str]:
    """The targets pool settings name, in kernel names: ``node2`` … (mode numa, ``nodes``) or
    ``dax0.0`` … (mode devdax, ``dax_devices``); ``settings``: :class:`sactool.profile.PoolSettings`."""
    return [f"node{n}" for n in settings.nodes] if settings.mode == "numa" else list(settings.dax_devices)


def dax_cpu_node(topo, dev) -> tuple[int | None, str]:
    """The CPU node of a DAX device (:meth:`Topology.dax_locality`: the CXL device's affinity)."""
    loc = topo.dax_locality(dev.name)
    return loc.cpu_node, f"{loc.source}: {loc.evidence}"


def numa_cpu_node(topo, nid: int) -> tuple[int | None, str]:
    """The CPU node of a memory node (:meth:`Topology.locality`, as the probe's verdict gives it)."""
    try:
        loc = topo.locality(nid)
    except TopologyError as e:
        return None, e.message
    return loc.cpu_node, f"{loc.source}: {loc.evidence}"


def target_facts(topo, reader, names: Sequence[str], *, capacity_bytes: int | None = None,
                 pinned_source: str = "pool.capacity_bytes") -> list[Target]:
    """:class:`Target` facts for ``names`` (``nodeN`` / ``daxX.Y``); TopologyError for an absent one."""
    from sactool.pool.readings import node_room

    out = []
    for name in names:
        if name.startswith("node"):
            nid = int(name[4:])
            try:
                node = topo.node(nid)
            except TopologyError as e:
                raise TopologyError(f"pool target {name}: {e.message}", e.hint) from None
            if node.has_memory is False or not node.mem_total_bytes:
                raise TopologyError(f"node{nid} has no memory " + ("here" if topo.live else "in the recording"),
                                    "fix pool.nodes in the profile (see 'sactool probe')")
            room = node_room(topo, reader, nid)
            cap, src = room.bytes, room.source
            if capacity_bytes is not None:
                cap, src = capacity_bytes, pinned_source
            cpu, ev = numa_cpu_node(topo, nid)
            out.append(Target(name, "numa", cap, src, None, cpu, ev, nid))
            continue
        dev = next((d for d in topo.dax_devices if d.name == name), None)
        if dev is None:
            have = ", ".join(d.name for d in topo.dax_devices) or "none"
            raise TopologyError(f"DAX device {name} does not exist " + ("here" if topo.live else "in the recording")
                                + f" (DAX devices: {have})",
                                "run 'sactool probe' to list DAX devices, and fix pool.dax_devices in the profile")
        if dev.mode == "system-ram":   # the hint names every such device of the profile (the SAC box has two)
            ram = [d for n in names for d in topo.dax_devices if d.name == n and d.mode == "system-ram"]
            also = "".join(f", {d.name} is node{d.target_node}" for d in ram if d.name != name)
            raise TopologyError(f"DAX device {name} is in system-ram mode (bound to kmem): its memory is "
                                f"node{dev.target_node}{also}",
                                f"set pool.mode numa and pool.nodes [{', '.join(str(d.target_node) for d in ram)}] "
                                f"in the profile, or 'daxctl reconfigure-device --mode=devdax "
                                f"{' '.join(d.name for d in ram)}'")
        if dev.mode != "devdax":
            raise TopologyError(f"DAX device {name} is not bound to device_dax (driver: {dev.driver or 'none'})",
                                f"daxctl reconfigure-device --mode=devdax {name}")
        cap, src = dev.size_bytes, f"sys/bus/dax/devices/{name}/size"
        if capacity_bytes is not None and cap is not None:
            cap, src = min(cap, capacity_bytes), pinned_source + (f" (capped at {name}'s size)" if capacity_bytes > cap else "")
        cpu, ev = dax_cpu_node(topo, dev)
        out.append(Target(name, "devdax", cap, src, dev.align_bytes, cpu, ev, dev.target_node, dax_poison(topo, name)))
    return out


def pinned(targets: Sequence[Target], capacity_bytes: int | None) -> list[Target]:
    """``targets`` with ``pool.capacity_bytes`` pinned: a node takes the pinned figure, a device
    ``min(its size, pinned)`` (never more than it holds); unchanged when nothing is pinned."""
    import dataclasses

    if capacity_bytes is None:
        return list(targets)
    return [dataclasses.replace(t, capacity_bytes=capacity_bytes if t.capacity_bytes is None or t.kind == "numa"
                                else min(t.capacity_bytes, capacity_bytes),
                                capacity_source=t.capacity_source if "pool.capacity_bytes" in t.capacity_source
                                else f"pool.capacity_bytes ({t.capacity_source})") for t in targets]
