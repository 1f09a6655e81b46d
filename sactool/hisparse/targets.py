"""Pool targets with the facts the rank plan needs, read from a topology (live or recorded).

* capacity: a NUMA node's free memory plus its reclaimable page cache
  (:func:`sactool.memory.nodes.free_estimate`, per-node meminfo), minus the safety margin kept
  back there; a devdax device's ``daxX.Y/size``; or what ``pool.capacity_bytes`` /
  ``--pool-bytes`` pins (never more than a device holds);
* ``align``: ``daxX.Y/align``;
* the CPU node (socket) of a target: the probe's own answer, :meth:`Topology.locality` for a
  node and :meth:`Topology.dax_locality` for a DAX device (the CXL device's affinity first),
  with its evidence.

Works on a recorded tree: a recording's meminfo and DAX sizes give the capacities, so a SAC box
can be planned from its snapshot.
"""

from __future__ import annotations

from typing import Sequence

from sactool.errors import TopologyError
from sactool.units import format_bytes
from sactool.hisparse.rankplan import Target


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


def pool_targets(topo, reader, names: Sequence[str], *, capacity_bytes: int | None = None,
                 pinned_source: str = "pool.capacity_bytes") -> list[Target]:
    """``Target`` facts for ``names`` (``nodeN`` / ``daxX.Y``); TopologyError for an absent one."""
    from sactool.memory import nodes as memnodes

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
            f = memnodes.free_estimate(topo, reader, nid)
            cap, src = None, f.source
            if f.bytes is not None:
                cap, src = f.room_bytes, f"{f.source}, minus {format_bytes(f.margin_bytes)} kept back"
            if capacity_bytes is not None:
                cap, src = capacity_bytes, pinned_source
            cpu, ev = numa_cpu_node(topo, nid)
            out.append(Target(name, "numa", cap, src, None, cpu, ev))
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
        out.append(Target(name, "devdax", cap, src, dev.align_bytes, cpu, ev))
    return out
