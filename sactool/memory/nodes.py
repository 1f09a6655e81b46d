"""What placement needs to know about NUMA nodes: existence, memory, CPUs, free memory.

Reads through :class:`SysfsReader`; once ``sactool.topology`` is available its ``probe()`` is the
model and this module only adds the free-memory rule placement needs.

Free memory. ``nodeN/meminfo`` ``MemFree`` is the kernel's per-node count, but with deferred
struct-page initialisation (``CONFIG_DEFERRED_STRUCT_PAGE_INIT``) a node can show only part of its
memory for a while after boot (seen on the development VM: node0 showed ~4.5 GiB of 23.5 GiB)
while ``/proc/meminfo`` is right. Memory the kernel counts as free in ``/proc/meminfo`` but that no
node reports is therefore added to each node's estimate (an upper bound: it belongs to some node);
on a one-node machine that is exact. A safety margin is kept back (see :data:`SAFETY_MARGIN_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.errors import CapacityError, TopologyError
from sactool.host.sysfs import SysfsReader

NODE_DIR = "sys/devices/system/node"

SAFETY_MARGIN_BYTES = 512 << 20
"""Kept free beyond the kernel's own reserve (vm.min_free_kbytes): room for the Python process,
page tables and the page cache the benchmark itself needs. A policy choice, not a measurement."""

SAFETY_MARGIN_FRACTION = 0.03
"""...or 3% of the node's memory, whichever is larger (policy choice)."""


@dataclass(frozen=True)
class NodeFacts:
    """``node``: id; ``cpus``: ``nodeN/cpulist``; ``mem_total_bytes``/``mem_free_bytes``:
    ``nodeN/meminfo`` (bytes); ``free_estimate_bytes``: see the module docstring."""

    node: int
    cpus: tuple[int, ...]
    has_memory: bool
    mem_total_bytes: int | None
    mem_free_bytes: int | None
    free_estimate_bytes: int | None
    free_source: str


def node_ids(reader: SysfsReader) -> list[int]:
    return sorted(int(n[4:]) for n in reader.listdir(NODE_DIR) if n.startswith("node") and n[4:].isdigit())


def _node_mem(reader: SysfsReader, nid: int) -> tuple[int | None, int | None]:
    kv = reader.kv(f"{NODE_DIR}/node{nid}/meminfo") or {}
    return kv.get("MemTotal"), kv.get("MemFree")


def node_facts(reader: SysfsReader, nid: int) -> NodeFacts:
    """Facts about node ``nid``; TopologyError when it does not exist."""
    ids = node_ids(reader)
    if nid not in ids:
        raise TopologyError(f"node{nid} does not exist (nodes: {', '.join(f'node{i}' for i in ids) or 'none'})",
                            "run 'sactool probe' to see the NUMA nodes of this machine")
    cpus = reader.cpulist(f"{NODE_DIR}/node{nid}/cpulist") or ()
    total, free = _node_mem(reader, nid)
    has_mem_mask = reader.cpulist(f"{NODE_DIR}/has_memory")
    has_memory = (nid in has_mem_mask) if has_mem_mask is not None else bool(total)
    est, source = free, f"{NODE_DIR}/node{nid}/meminfo MemFree"
    proc = reader.kv("proc/meminfo") or {}
    if free is not None and "MemFree" in proc:
        node_free_sum = sum((_node_mem(reader, i)[1] or 0) for i in ids)
        unreported = proc["MemFree"] - node_free_sum
        if unreported > 0:
            est = free + unreported
            source += " + free memory /proc/meminfo counts but no node reports (deferred page init)"
    return NodeFacts(nid, tuple(cpus), has_memory, total, free, est, source)


def nearest_cpu_node(reader: SysfsReader, nid: int) -> int:
    """The node with CPUs nearest to ``nid`` by ``nodeN/distance`` (itself if it has CPUs)."""
    ids = node_ids(reader)
    dist = (reader.text(f"{NODE_DIR}/node{nid}/distance") or "").split()
    best: tuple[int, int] | None = None
    for i, other in enumerate(ids):
        if not reader.cpulist(f"{NODE_DIR}/node{other}/cpulist"):
            continue
        d = int(dist[i]) if i < len(dist) and dist[i].isdigit() else (10 if other == nid else 1000)
        if best is None or (d, other) < best:
            best = (d, other)
    if best is None:
        raise TopologyError("no NUMA node has CPUs", "is the sysfs tree complete?")
    return best[1]


def check_memory_node(reader: SysfsReader, nid: int) -> NodeFacts:
    """The node must exist, hold memory, and be on the live system."""
    if not reader.live:
        raise TopologyError(f"node{nid} comes from a recorded topology ({reader.root}), not this system",
                            "placement binds memory on the running machine: drop --sysfs-root")
    f = node_facts(reader, nid)
    if not f.has_memory or not f.mem_total_bytes:
        raise TopologyError(f"node{nid} has no memory", "pick a node with memory (see 'sactool probe')")
    return f


def check_cpu_node(reader: SysfsReader, nid: int) -> NodeFacts:
    f = node_facts(reader, nid)
    if not f.cpus:
        raise TopologyError(f"node{nid} has no CPUs and cannot run the benchmark threads",
                            f"use --cpus from a node with CPUs (nearest to node{nid}: "
                            f"node{nearest_cpu_node(reader, nid)})")
    return f


def check_fits(facts: NodeFacts, size_bytes: int, *, what: str = "buffer") -> None:
    """CapacityError when ``size_bytes`` exceeds the node's free estimate minus the margin."""
    if facts.free_estimate_bytes is None:
        return
    margin = max(SAFETY_MARGIN_BYTES, int(SAFETY_MARGIN_FRACTION * (facts.mem_total_bytes or 0)))
    room = facts.free_estimate_bytes - margin
    if size_bytes > room:
        from sactool.units import format_bytes

        raise CapacityError(
            f"{what} of {format_bytes(size_bytes)} does not fit node{facts.node}: "
            f"{format_bytes(facts.free_estimate_bytes)} free, {format_bytes(margin)} kept back",
            f"use --size {format_bytes(max(room, 0)).replace(' ', '')} or less",
        )
