"""Which CPU node sits next to each memory node (and each DAX device), with the evidence used.

Evidence, strongest first:

1. ``cpus``: the node has CPUs itself.
2. ``device-affinity``: the CXL memdev(s) behind the node (DAX system-ram → region → memdev, or a
   region holding the node's memory blocks) and their host bridge's NUMA node (``memN/numa_node``,
   the host bridge's or its root port's ``numa_node``). On a real 6.12 kernel this is the only
   thing that tells the socket: the kernel applies no SLIT to CFMWS nodes, so both CXL nodes of
   the two-socket recording (``sac2s``) are at distance 20 from both sockets, and HMAT gives them
   identical access0 figures without initiator links (shared/fixtures/qemu-cxl README addendum).
3. ``slit``: the CPU node's own row toward the memory node (``node<C>/distance``) — the CPU →
   memory entry, the one that matters for a CPU reading the memory. 255 means unreachable and is
   never nearest. A tie is said, and broken by HMAT initiators when they name one of the tied
   nodes, else by the lower id.
4. ``hmat``: the node's ``access1`` (CPU) or ``access0`` initiators that have CPUs.
5. ``none``: nothing links the node to a CPU node; the lowest CPU node is named and the evidence
   says so.
"""

from __future__ import annotations

from typing import Protocol

from sactool.topology.records import CxlMemdev, CxlRegion, DaxDevice, Locality, NumaNode


class Topology(Protocol):
    """What the rule reads of a machine (:class:`sactool.topology.model.Topology` has it): named
    structurally so this module needs only the element records and the model can call it."""

    @property
    def nodes(self) -> tuple[NumaNode, ...]: ...

    @property
    def regions(self) -> tuple[CxlRegion, ...]: ...

    @property
    def dax_devices(self) -> tuple[DaxDevice, ...]: ...

    @property
    def node_ids(self) -> tuple[int, ...]: ...

    def node(self, node_id: int) -> NumaNode: ...

    def memdevs_of_node(self, node_id: int) -> tuple[CxlMemdev, ...]: ...

    def memdevs_of_dax(self, name: str) -> tuple[CxlMemdev, ...]: ...


UNREACHABLE = 255  # SLIT: "no connection" (ACPI 6.5 §5.2.17)


def _cpu_nodes(topo: Topology) -> list[NumaNode]:
    return [n for n in topo.nodes if n.has_cpu]


def _slit(topo: Topology, cpu: int, mem: int | None) -> int | None:
    """SLIT entry in CPU node ``cpu``'s row toward ``mem`` (None when absent)."""
    if mem is None:
        return None
    node = next((n for n in topo.nodes if n.id == cpu), None)
    return None if node is None else node.distance_to(mem)


def _device_node(m: CxlMemdev) -> int | None:
    return m.affinity_node if m.affinity_node is not None else m.host_bridge_node


def _describe(m: CxlMemdev, topo: Topology) -> str:
    """``region0 ← mem1 (serial 0x3001): device numa_node 0, host bridge pci0000:0c on node0``."""
    regions = [r.name for r in topo.regions if m.name in r.memdevs]
    lead = f"{'+'.join(regions)} ← " if regions else ""
    serial = f" (serial {m.serial})" if m.serial else ""
    aff = "-1" if m.affinity_node is None else str(m.affinity_node)
    hb = ""
    if m.host_bridge:
        hb = f", host bridge {m.host_bridge} on " + ("node?" if m.host_bridge_node is None else f"node{m.host_bridge_node}")
    return f"{lead}{m.name}{serial}: device numa_node {aff}{hb}"


def _from_devices(topo: Topology, mem: int | None, devs: tuple[CxlMemdev, ...],
                  what: str) -> tuple[int, str] | None:
    """(cpu node, evidence) from the devices' affinity, or None when they give no CPU node."""
    cpu_ids = {n.id for n in _cpu_nodes(topo)}
    by_node: dict[int, list[CxlMemdev]] = {}
    for m in devs:
        nid = _device_node(m)
        if nid is not None and nid in cpu_ids:
            by_node.setdefault(nid, []).append(m)
    if not by_node:
        return None
    desc = "; ".join(_describe(m, topo) for m in devs)
    if len(by_node) == 1:
        (cpu,) = by_node
        return cpu, f"{what} ← {desc}"

    def key(c: int) -> tuple[int, int, int]:
        d = _slit(topo, c, mem)
        return (-len(by_node[c]), UNREACHABLE + 1 if d is None or d == UNREACHABLE else d, c)

    cpu = min(by_node, key=key)
    spread = ", ".join(f"node{c} ({len(v)})" for c, v in sorted(by_node.items()))
    return cpu, (f"{what} ← {desc}; its devices sit on several sockets ({spread}): node{cpu} holds the most"
                 " (then nearest by SLIT, then lowest id)")


def _hmat_cpus(node: NumaNode, cpu_ids: set[int]) -> tuple[int, tuple[int, ...]]:
    for cls in (1, 0):
        h = node.hmat_for(cls)
        if h is not None:
            inits = tuple(i for i in h.initiators if i in cpu_ids)
            if inits:
                return cls, inits
    return -1, ()


def node_locality(topo: Topology, node_id: int) -> Locality:
    """:class:`Locality` of memory node ``node_id`` (raises TopologyError for an unknown node)."""
    node = topo.node(node_id)
    if node.has_cpu:
        return Locality(node_id, node_id, node.distance_to(node_id), "cpus", f"{node.name} has CPUs itself")
    cpus = _cpu_nodes(topo)
    if not cpus:
        return Locality(node_id, None, None, "none", "no node has CPUs")
    cpu_ids = {n.id for n in cpus}
    hit = _from_devices(topo, node_id, topo.memdevs_of_node(node_id), node.name)
    if hit is not None:
        cpu, ev = hit
        return Locality(node_id, cpu, _slit(topo, cpu, node_id), "device-affinity", ev)
    reach = [(d, c.id) for c in cpus if (d := c.distance_to(node_id)) is not None and d != UNREACHABLE]
    if reach:
        best = min(d for d, _ in reach)
        tied = sorted(c for d, c in reach if d == best)
        far = sorted(c.id for c in cpus if c.distance_to(node_id) == UNREACHABLE)
        unreach = (f"; unreachable (255) from {', '.join(f'node{c}' for c in far)}" if far else "")
        if len(tied) == 1:
            return Locality(node_id, tied[0], best, "slit",
                            f"SLIT node{tied[0]} → {node.name} = {best}, the shortest CPU → memory distance{unreach}")
        cls, inits = _hmat_cpus(node, cpu_ids)
        pick = [c for c in tied if c in inits]
        names = ", ".join(f"node{c}" for c in tied)
        if pick:
            return Locality(node_id, pick[0], best, "slit",
                            f"SLIT tie: {names} all at {best} → {node.name}; HMAT access{cls} initiators name "
                            f"node{pick[0]}{unreach}")
        return Locality(node_id, tied[0], best, "slit",
                        f"SLIT tie: {names} all at {best} → {node.name}, nothing else tells them apart: "
                        f"lowest id node{tied[0]}{unreach}")
    cls, inits = _hmat_cpus(node, cpu_ids)
    if inits:
        return Locality(node_id, inits[0], _slit(topo, inits[0], node_id), "hmat",
                        f"HMAT access{cls} initiators of {node.name}: {', '.join(f'node{i}' for i in inits)}")
    first = min(cpu_ids)
    why = "unreachable (255) from every CPU node" if any(c.distance_to(node_id) == UNREACHABLE for c in cpus) \
        else "no SLIT entry"
    return Locality(node_id, first, _slit(topo, first, node_id), "none",
                    f"no CXL device affinity, {why} and no HMAT initiator links {node.name} to a CPU node: "
                    f"lowest CPU node node{first} named, not known to be near")


def dax_locality(topo: Topology, name: str) -> Locality:
    """:class:`Locality` of DAX device ``name``: its region's devices, else its target node's."""
    d = next((x for x in topo.dax_devices if x.name == name), None)
    if d is None:
        return Locality(None, None, None, "none", f"no DAX device {name}", device=name)
    online = d.target_node is not None and d.target_node in topo.node_ids
    hit = _from_devices(topo, d.target_node if online else None, topo.memdevs_of_dax(name), name)
    if hit is not None:
        cpu, ev = hit
        return Locality(d.target_node, cpu, _slit(topo, cpu, d.target_node if online else None),
                        "device-affinity", ev, device=name)
    if online and d.target_node is not None:
        loc = node_locality(topo, d.target_node)
        return Locality(loc.node, loc.cpu_node, loc.distance, loc.source,
                        f"{name} → node{d.target_node}: {loc.evidence}", device=name)
    cpus = _cpu_nodes(topo)
    first = min((n.id for n in cpus), default=None)
    return Locality(d.target_node, first, None, "none",
                    f"{name}: no CXL device behind it and its target node is not online"
                    + (f": lowest CPU node node{first} named, not known to be near" if first is not None else ""),
                    device=name)
