"""What placement needs about NUMA nodes, from :func:`sactool.topology.probe` — plus the
free-memory rule.

Free memory. ``nodeN/meminfo`` ``MemFree`` is the kernel's per-node count, but with deferred
struct-page initialisation (``CONFIG_DEFERRED_STRUCT_PAGE_INIT``) a node can show only part of its
memory for a while after boot (seen on the development VM: node0 showed ~4.5 GiB of 23.5 GiB)
while ``/proc/meminfo`` is right. Memory that ``/proc/meminfo`` counts as free but no node reports
is therefore added to each node's estimate (an upper bound: it belongs to some node; exact on a
one-node machine). A safety margin is kept back (:data:`SAFETY_MARGIN_BYTES`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.errors import CapacityError, TopologyError
from sactool.host.sysfs import SysfsReader

NODE_DIR = "sys/devices/system/node"

SAFETY_MARGIN_BYTES = 512 << 20
"""Kept free beyond the kernel's own reserve: room for the Python process, page tables and page
cache the benchmark needs. A policy choice, not a measurement."""

SAFETY_MARGIN_FRACTION = 0.03
"""...or 3% of the node's memory, whichever is larger (policy choice). A CPU-less node (CXL) runs no
process: only the 3% is kept back there."""


@dataclass(frozen=True)
class FreeEstimate:
    """``bytes``: free memory placement may use on ``node`` before the margin; ``source``: how."""

    node: int
    bytes: int | None
    total_bytes: int | None
    source: str
    cpu_less: bool = False

    @property
    def margin_bytes(self) -> int:
        """What is kept back on this node (:data:`SAFETY_MARGIN_BYTES`, :data:`SAFETY_MARGIN_FRACTION`)."""
        frac = int(SAFETY_MARGIN_FRACTION * (self.total_bytes or 0))
        return frac if self.cpu_less else max(SAFETY_MARGIN_BYTES, frac)

    @property
    def room_bytes(self) -> int | None:
        """Free estimate minus the margin (None when unknown): the one room rule — the size checks,
        the ``--size`` hints, the pool targets' capacity and the plug-in's budget all read it."""
        return None if self.bytes is None else max(self.bytes - self.margin_bytes, 0)


def topology(reader: SysfsReader | None = None):
    from sactool.topology import probe

    return probe(reader)


def reclaimable_file_bytes(reader: SysfsReader, nid: int) -> int:
    """Clean inactive page cache on node ``nid``: ``Inactive(file) − Dirty − Writeback`` of
    ``node<N>/meminfo`` (bytes, 0 when absent). The kernel reclaims these pages first when an
    allocation needs them; ``/proc/meminfo`` MemAvailable counts page cache the same way
    (Documentation/filesystems/proc.rst). Seen here: MemFree 0.2 GiB beside 8 GiB of inactive
    file pages and MemAvailable 20 GiB, after other jobs had read many files."""
    kv = reader.kv(f"{NODE_DIR}/node{nid}/meminfo") or {}
    return max(0, kv.get("Inactive(file)", 0) - kv.get("Dirty", 0) - kv.get("Writeback", 0))


def free_estimate(topo, reader: SysfsReader, nid: int) -> FreeEstimate:
    node = topo.node(nid)
    est, source = node.mem_free_bytes, f"node{nid}/meminfo MemFree"
    proc = reader.kv("proc/meminfo") or {}
    # deferred struct-page init leaves boot-time DRAM out of its node's MemFree; memory onlined later
    # (a CXL region through kmem: a CPU-less node) is fully counted, so it gets none of the difference
    if est is not None and "MemFree" in proc and node.has_cpu:
        unreported = proc["MemFree"] - sum(n.mem_free_bytes or 0 for n in topo.nodes)
        if unreported > 0:
            est += unreported
            source += " + free memory /proc/meminfo counts but no node reports (deferred page init)"
    cache = reclaimable_file_bytes(reader, nid) if est is not None else 0
    if cache:
        est += cache
        source += " + clean inactive page cache (Inactive(file) − Dirty − Writeback)"
    return FreeEstimate(nid, est, node.mem_total_bytes, source, cpu_less=not node.has_cpu)


def check_memory_node(topo, nid: int):
    """The node must exist, hold memory, and belong to the live system; returns the NumaNode."""
    if not topo.live:
        raise TopologyError(f"node{nid} comes from a recorded topology ({topo.sysfs_root}), not this system",
                            "placement binds memory on the running machine: drop --sysfs-root")
    node = topo.node(nid)
    if node.has_memory is False or not node.mem_total_bytes:
        raise TopologyError(f"node{nid} has no memory", "pick a node with memory (see 'sactool probe')")
    return node


def check_cpu_node(topo, nid: int):
    """The node must exist and have CPUs (CXL nodes have none); returns the NumaNode."""
    node = topo.node(nid)
    if not node.has_cpu or not node.cpus:
        raise TopologyError(f"node{nid} has no CPUs and cannot run the benchmark threads",
                            f"take CPUs from a node that has them (nearest to node{nid}: "
                            f"node{topo.nearest_cpu_node(nid)})")
    return node


def check_fits(free: FreeEstimate, size_bytes: int, *, what: str = "buffer", option: str = "--size",
               reader: SysfsReader | None = None) -> None:
    """CapacityError when ``size_bytes`` exceeds the node's free estimate minus the margin, or what this
    process may still map under its address-space/data limits (``ulimit -v``/``-d``: what it maps
    already counts against them; checked on the live machine only, ``reader`` None or live)."""
    room = free.room_bytes
    if free.bytes is not None and room is not None:
        margin = free.margin_bytes
        if size_bytes > room:
            from sactool.units import format_bytes

            raise CapacityError(
                f"{what} of {format_bytes(size_bytes)} does not fit node{free.node}: "
                f"{format_bytes(free.bytes)} free, {format_bytes(margin)} kept back",
                f"use {option} {format_bytes(room).replace(' ', '')} or less",
            )
    if reader is None or reader.live:
        left, limit = process_room()
        if left is not None and size_bytes > left:
            from sactool.units import format_bytes

            raise CapacityError(f"{what} of {format_bytes(size_bytes)} does not fit this process's limit: {limit} "
                                f"leaves {format_bytes(left)}",
                                f"use {option} {left >> 20}MiB or less, or raise the limit (ulimit -v/-d)")


def process_room(reader: SysfsReader | None = None) -> tuple[int | None, str]:
    """Bytes this process may still map under its address-space and data limits (``ulimit -v``,
    ``ulimit -d``: ``RLIMIT_AS`` − ``VmSize``, ``RLIMIT_DATA`` − ``VmData`` of ``/proc/self/status``):
    what the process maps already counts against them. (None, "") when unlimited or on a recording."""
    import resource

    from sactool.units import format_bytes

    reader = reader or SysfsReader()
    if not reader.live:
        return None, ""
    status = reader.kv("proc/self/status") or {}
    best: tuple[int | None, str] = (None, "")
    for lim, key, name in ((resource.RLIMIT_AS, "VmSize", "ulimit -v"), (resource.RLIMIT_DATA, "VmData", "ulimit -d")):
        soft = resource.getrlimit(lim)[0]
        if soft == resource.RLIM_INFINITY or key not in status:
            continue
        left = max(0, soft - status[key])
        if best[0] is None or left < best[0]:
            best = (left, f"{name} {format_bytes(soft)} with {format_bytes(status[key])} mapped")
    return best
