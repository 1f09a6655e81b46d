"""Where the pool is on a machine, for tune: the verdict's CXL nodes, else DAX devices in devdax
mode, else the DRAM node that stands in — each as a :class:`~sactool.pool.targets.Target` with its
capacity — and the socket of each CUDA device (a rank's GPU, for the locality rule).

On a machine without CXL the topology's verdict names a DRAM node that stands in; the figures
measured on it describe DRAM, and everything downstream says so (``stand_in``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.errors import TopologyError
from sactool.pool.targets import Target, target_facts


@dataclass(frozen=True)
class PoolInfo:
    mode: str                          # numa | devdax
    targets: tuple[Target, ...]        # each with a known capacity_bytes
    stand_in: bool
    reason: str
    cpu_node: int | None               # the first target's CPU node (each target has its own: targets[i].cpu_node)
    cpus_near: int                     # CPUs available to prefault every target from its own CPU node
                                       # (the fewest any target's CPU node has)
    gpu_nodes: tuple[int | None, ...] = ()   # CPU node of each CUDA device (gpu_nodes(); () = none seen)


def gpu_nodes(topo, environ=None) -> tuple[int | None, ...]:
    """The socket of each CUDA device, device 0 first, as a process started by ``sactool serve``
    numbers them (:func:`sactool.topology.cuda.cuda_devices`: PCI bus order, which serve sets with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, narrowed by ``CUDA_VISIBLE_DEVICES``); NVIDIA GPUs only.
    () when the numbering cannot be told (another CUDA_DEVICE_ORDER, UUIDs)."""
    import os

    from sactool.topology.cuda import cuda_devices

    view = cuda_devices(getattr(topo, "gpus", ()) or (), os.environ if environ is None else environ)
    return tuple(g.cpu_node for g in view.gpus) if view.known else ()


def pool_info(topo, reader=None, *, pool_bytes: int | None = None) -> PoolInfo:
    """Pool targets from ``sactool.topology.probe()`` (live or recorded), via
    :func:`sactool.pool.targets.target_facts`: the verdict's CXL nodes (capacity = free memory
    plus reclaimable page cache, :mod:`sactool.memory.nodes`, minus the margin kept back), else DAX
    devices in devdax mode (capacity = their size) — real CXL as devdax wins over a DRAM node the
    verdict would let stand in — else the stand-in node. ``pool_bytes`` (``--pool-bytes``) pins the
    capacity of each target (never above a device's size)."""
    from sactool.host.sysfs import SysfsReader

    if reader is None:      # the tree the topology was read from
        reader = SysfsReader() if topo.live else SysfsReader(topo.sysfs_root)
    nodes = tuple(topo.verdict.pool_nodes)
    dax = [d for d in topo.dax_devices if d.mode == "devdax" and d.size_bytes]
    if nodes and not (topo.verdict.stand_in and dax):
        targets = target_facts(topo, reader, [f"node{n}" for n in nodes], capacity_bytes=pool_bytes,
                               pinned_source="--pool-bytes")
        for t in targets:
            if not t.capacity_bytes:
                raise TopologyError(f"{t.name} reports no free memory", "check 'sactool probe'")
        return PoolInfo("numa", tuple(targets), bool(topo.verdict.stand_in), _one_free_figure(topo, targets),
                        targets[0].cpu_node, _cpus_near(topo, targets), gpu_nodes(topo))
    if dax:
        targets = target_facts(topo, reader, [d.name for d in dax], capacity_bytes=pool_bytes,
                               pinned_source="--pool-bytes")
        for t in targets:
            if t.capacity_bytes is None:   # not reached: only DAX devices with a size are asked for
                raise TopologyError(f"{t.name} reports no size", "check 'sactool probe'")
        why = ("devdax devices hold the pool: " + "; ".join(f"{t.name} ({t.cpu_node_evidence})" for t in targets)
               + (f" (they win over {', '.join(f'node{n}' for n in nodes)}, a DRAM node the verdict would let "
                  "stand in)" if nodes else ""))
        return PoolInfo("devdax", tuple(targets), False, why, targets[0].cpu_node, _cpus_near(topo, targets),
                        gpu_nodes(topo))
    raise TopologyError("no pool memory found: no CXL node, no stand-in node, no devdax device",
                        "run 'sactool probe' to see why")


def _one_free_figure(topo, targets) -> str:
    """The verdict's reason with each node's free figure replaced by the capacity tune uses, so its
    output does not name two free figures for one node (probe's MemFree, tune's estimate)."""
    from sactool.units import format_bytes

    reason = topo.verdict.reason
    for t in targets:
        n = topo.node(t.node)   # a numa target's node
        for lead in ("(", " "):   # "(DRAM, 19.5 GiB free)" and "256 MiB (250 MiB free)" (topology.classify)
            reason = reason.replace(f"{lead}{format_bytes(n.mem_free_bytes or 0)} free)",
                                    f"{lead}{format_bytes(t.capacity_bytes)} free)")
    return reason


def _cpus_near(topo, targets) -> int:
    """CPUs each target can be prefaulted with from its own CPU node: the fewest any of them has."""
    counts = [len(topo.node(t.cpu_node).cpus) for t in targets if t.cpu_node is not None]
    return min(counts) if counts else 1
