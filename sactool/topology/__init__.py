"""Topology: what memory this machine (or a recorded one) has, and which of it is CXL.

``probe(reader)`` reads NUMA nodes, HMAT, memory tiers, CXL memdevs/decoders/regions and DAX
devices through one :class:`~sactool.host.sysfs.SysfsReader`, classifies every node with an
evidence chain, and returns a frozen :class:`Topology`. No numpy/numba: ``sactool probe`` is fast.
"""

from __future__ import annotations

from sactool.errors import TopologyError
from sactool.records import Warning
from sactool.topology.hardware import GpuDevice, IomemInfo, PcieLink
from sactool.topology.model import Topology
from sactool.topology.records import (
    KINDS, LOCALITY_SOURCES, SCHEMA_VERSION, CxlDecoder, CxlMemdev, CxlPort, CxlRegion, DaxDevice, HmatAccess,
    HugePages, Locality, MemorySideCache, NumaNode, ProbeWarning, Verdict,
)

__all__ = [
    "probe", "Topology", "NumaNode", "CxlMemdev", "CxlDecoder", "CxlPort", "CxlRegion", "DaxDevice", "GpuDevice",
    "HmatAccess", "IomemInfo",
    "HugePages", "Locality", "LOCALITY_SOURCES", "MemorySideCache", "PcieLink", "ProbeWarning", "Warning", "Verdict", "TopologyError",
    "KINDS", "SCHEMA_VERSION",
]


def probe(reader=None, *, poison: bool = False) -> Topology:
    """Probe the live system (``reader=None``) or a recorded tree (``SysfsReader(root)``).

    ``poison``: live, ask every memdev for its poison list (writes ``memX/trigger_poison_list``; root) —
    the only write probe makes, and only when asked; a recording replays the list it captured.

    Raises TopologyError (exit code 3) when the tree has no ``devices/system/node``; anything
    else missing or unreadable becomes a warning inside the result.
    """
    from sactool.host.iomem import read_iomem
    from sactool.host.machine import machine_block
    from sactool.host.sysfs import SysfsReader
    import datetime as dt
    from sactool.topology.classify import classify, verdict
    from sactool.topology.cxl import read_cxl
    from sactool.topology.dax import read_dax
    from sactool.topology.gpus import PCI_DEVICES, read_gpus
    from sactool.topology.nodes import read_nodes
    from sactool.topology.origin import read_origin
    from sactool.topology.warn import iomem_info, late_warnings

    r = reader if reader is not None else SysfsReader()
    nodes, warnings, demotion = read_nodes(r)
    memdevs, decoders, regions, cxl_warnings, cxl_present, ports = read_cxl(r)
    dax = read_dax(r, regions)
    ranges, iomem_reason = read_iomem(r)
    nodes, class_warnings = classify(nodes, decoders, regions, dax, cxl_present, ranges, iomem_reason)
    gpus, gpu_scan = read_gpus(r, nodes)
    machine = machine_block(r)
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    draft = Topology(
        live=r.live, sysfs_root=str(r.root), created_at=created, machine=machine, nodes=tuple(nodes),
        memdevs=tuple(memdevs), decoders=tuple(decoders), regions=tuple(regions), dax_devices=tuple(dax),
        demotion_enabled=demotion, verdict=Verdict((), False, ""), cxl_bus=cxl_present, ports=tuple(ports),
        gpus=tuple(gpus), gpu_scan=gpu_scan, gpus_scanned=_pci_bus_read(r, PCI_DEVICES), iomem=iomem_info(ranges, iomem_reason), origin=read_origin(r),
    )
    from sactool.topology.hints import auto_online_policy

    v = verdict(nodes, regions, dax, draft.locality, memdevs, cxl_present, auto_online_policy(r))
    early = warnings + cxl_warnings + class_warnings
    all_warnings = early + late_warnings(r, draft, early)
    from dataclasses import replace

    from sactool.topology.health import health_warnings, read_health

    health = read_health(r, draft, poison=poison)
    all_warnings += health_warnings(health)
    from sactool.topology.warn import devdax_pool

    names, note = devdax_pool(replace(draft, verdict=v))
    v = replace(v, devdax_pool=names, devdax_note=note)   # the JSON says what the table says
    return replace(draft, verdict=v, warnings=tuple(all_warnings), health=health)


def _pci_bus_read(r, pci_devices: str) -> bool:
    """Whether an empty GPU list means "no GPU" (the PCI bus was read and lists devices, and the NVIDIA
    driver names no GPU of its own that the scan could have missed) rather than "not known" (no PCI bus
    directory, an empty one as a sandbox shows, or a recording without it)."""
    return bool(r.is_dir(pci_devices) and r.listdir(pci_devices) and not r.listdir("proc/driver/nvidia/gpus"))
