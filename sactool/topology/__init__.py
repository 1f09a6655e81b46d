"""Topology: what memory this machine (or a recorded one) has, and which of it is CXL.

``probe(reader)`` reads NUMA nodes, HMAT, memory tiers, CXL memdevs/decoders/regions and DAX
devices through one :class:`~sactool.host.sysfs.SysfsReader`, classifies every node with an
evidence chain, and returns a frozen :class:`Topology`. No numpy/numba: ``sactool probe`` is fast.
"""

from __future__ import annotations

from sactool.errors import TopologyError
from sactool.topology.model import (
    KINDS, LOCALITY_SOURCES, SCHEMA_VERSION, CxlDecoder, CxlMemdev, CxlRegion, DaxDevice, HmatAccess, HugePages,
    Locality, MemorySideCache, NumaNode, PcieLink, ProbeWarning, Topology, Verdict, Warning,
)

__all__ = [
    "probe", "Topology", "NumaNode", "CxlMemdev", "CxlDecoder", "CxlRegion", "DaxDevice", "HmatAccess",
    "HugePages", "Locality", "LOCALITY_SOURCES", "MemorySideCache", "PcieLink", "ProbeWarning", "Warning", "Verdict", "TopologyError",
    "KINDS", "SCHEMA_VERSION",
]


def probe(reader=None) -> Topology:
    """Probe the live system (``reader=None``) or a recorded tree (``SysfsReader(root)``).

    Raises TopologyError (exit code 3) when the tree has no ``devices/system/node``; anything
    else missing or unreadable becomes a warning inside the result.
    """
    from sactool.host.machine import machine_block
    from sactool.host.sysfs import SysfsReader
    import datetime as dt
    from sactool.topology.classify import classify, verdict
    from sactool.topology.cxl import read_cxl
    from sactool.topology.dax import read_dax
    from sactool.topology.nodes import read_nodes
    from sactool.topology.warn import late_warnings

    r = reader if reader is not None else SysfsReader()
    nodes, warnings, demotion = read_nodes(r)
    memdevs, decoders, regions, cxl_warnings, cxl_present = read_cxl(r)
    dax = read_dax(r, regions)
    nodes, class_warnings = classify(nodes, decoders, regions, dax, cxl_present)
    machine = machine_block(r)
    draft = Topology(
        live=r.live, sysfs_root=str(r.root), created_at=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"), machine=machine, nodes=tuple(nodes),
        memdevs=tuple(memdevs), decoders=tuple(decoders), regions=tuple(regions), dax_devices=tuple(dax),
        demotion_enabled=demotion, verdict=Verdict((), False, ""), cxl_bus=cxl_present,
    )
    v = verdict(nodes, regions, dax, draft.locality, memdevs, cxl_present)
    early = warnings + cxl_warnings + class_warnings
    all_warnings = early + late_warnings(r, draft, early)
    from dataclasses import replace

    return replace(draft, verdict=v, warnings=tuple(all_warnings))
