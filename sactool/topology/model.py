"""The topology model: the whole machine (:class:`Topology`) that :func:`sactool.topology.probe`
fills, with its look-ups. Its element records live in :mod:`sactool.topology.records` (re-exported
here); which CPU node is next to a memory node is :mod:`sactool.topology.locality`'s rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sactool.errors import TopologyError
from sactool.topology import locality as _locality
from sactool.topology.hardware import GpuDevice, IomemInfo, PcieLink  # noqa: F401 (re-exported)
from sactool.topology.origin import Origin
from sactool.topology.health import MemdevHealth
from sactool.topology.records import (  # noqa: F401 (re-exported: the model's element types)
    CxlDecoder,
    CxlDport,
    CxlMemdev,
    CxlPort,
    CxlRegion,
    DaxDevice,
    DaxMapping,
    DaxRegion,
    HmatAccess,
    HugePages,
    KINDS,
    LOCALITY_SOURCES,
    Locality,
    MemorySideCache,
    NumaNode,
    ProbeWarning,
    SCHEMA_VERSION,
    Verdict,
)


@dataclass(frozen=True)
class Topology:
    """What :func:`sactool.topology.probe` found."""

    live: bool                       # False: read from a recording, NOT this system
    sysfs_root: str
    created_at: str
    machine: dict[str, Any]
    nodes: tuple[NumaNode, ...]
    memdevs: tuple[CxlMemdev, ...]
    decoders: tuple[CxlDecoder, ...]
    regions: tuple[CxlRegion, ...]
    dax_devices: tuple[DaxDevice, ...]
    demotion_enabled: bool | None    # /sys/kernel/mm/numa/demotion_enabled
    verdict: Verdict
    warnings: tuple[ProbeWarning, ...] = ()
    cxl_bus: bool = False            # /sys/bus/cxl/devices exists (CXL core loaded)
    ports: tuple[CxlPort, ...] = ()  # the CXL port tree (root → host bridge → switch → endpoint)
    gpus: tuple[GpuDevice, ...] = ()
    gpu_scan: str | None = None      # what was scanned for GPUs, or why nothing could be
    gpus_scanned: bool = False       # the PCI bus was read and lists devices (sys/bus/pci/devices), and the NVIDIA
    #                                  driver names no GPU: an empty ``gpus`` means none there, not unknown (a
    #                                  recording without the PCI tree, an empty one in a sandbox, a reloaded snapshot)
    iomem: IomemInfo | None = None
    origin: Origin | None = None     # live / recording / generated (topology/origin.py); None: as ``live`` says
    health: tuple[MemdevHealth, ...] = ()   # per memdev: media, AER, error mode, poison (topology/health.py)
    schema_version: int = field(default=SCHEMA_VERSION)

    # ---- look-ups ----------------------------------------------------------------------
    @property
    def origin_of(self) -> Origin:
        """Where this topology comes from (a topology built without one: live or a recording)."""
        return self.origin or Origin("live" if self.live else "recording")

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes)

    @property
    def windows(self) -> tuple[CxlDecoder, ...]:
        """Root decoders (CFMWS windows)."""
        return tuple(d for d in self.decoders if d.level == "root")

    def node(self, node_id: int) -> NumaNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        have = ", ".join(n.name for n in self.nodes) or "none"
        raise TopologyError(f"no NUMA node {node_id}" + ("" if self.live else " in the recorded machine"),
                            f"nodes here: {have} (see 'sactool probe')")

    def nodes_of_kind(self, kind: str) -> tuple[NumaNode, ...]:
        return tuple(n for n in self.nodes if n.kind == kind)

    def memdev(self, name: str) -> CxlMemdev | None:
        return next((m for m in self.memdevs if m.name == name), None)

    def region(self, name: str) -> CxlRegion | None:
        return next((r for r in self.regions if r.name == name), None)

    def locality(self, node_id: int) -> Locality:
        """The CPU node next to memory node ``node_id``, with the evidence used: the node's own
        CPUs; else the affinity of the CXL device(s) behind it; else the CPU → memory SLIT entry;
        else HMAT initiators (:func:`sactool.topology.locality.node_locality`)."""
        return _locality.node_locality(self, node_id)

    def dax_locality(self, name: str) -> Locality:
        """The CPU node next to DAX device ``name`` (e.g. a devdax device, whose memory is no node)."""
        return _locality.dax_locality(self, name)

    def nearest_cpu_node(self, node_id: int) -> int:
        """The CPU node next to ``node_id`` (itself if it has CPUs): :meth:`locality`'s pick.

        Used to pin threads near a CPU-less (CXL) node. A node that is not online but is the target of
        a DAX device (devdax mode) gets that device's CPU node (:meth:`dax_locality`). Raises
        TopologyError for an unknown node, or when no node has CPUs.
        """
        dax = next((d for d in self.dax_devices if d.target_node == node_id), None)
        if node_id not in self.node_ids and dax is not None:
            loc = self.dax_locality(dax.name)
        else:
            loc = self.locality(node_id)
        if loc.cpu_node is None:
            raise TopologyError("no node has CPUs", "is this a complete sysfs tree?")
        return loc.cpu_node

    def memdevs_of_node(self, node_id: int) -> tuple[CxlMemdev, ...]:
        """Memdevs behind ``node_id``: of the regions onlined into it via DAX system-ram, or whose
        address range holds the node's memory blocks."""
        names: list[str] = []
        for d in self.dax_devices:
            if d.target_node == node_id and d.region and d.mode == "system-ram":
                reg = self.region(d.region)
                if reg:
                    names.extend(m for m in reg.memdevs if m and m not in names)
        ranges = next((n.phys_ranges for n in self.nodes if n.id == node_id), ())
        for reg in self.regions:
            if reg.resource is None or not reg.size_bytes:
                continue
            if any(reg.resource <= a < reg.resource + reg.size_bytes for a, _ in ranges):
                names.extend(m for m in reg.memdevs if m and m not in names)
        return tuple(m for m in self.memdevs if m.name in names)

    def memdevs_of_dax(self, name: str) -> tuple[CxlMemdev, ...]:
        """Memdevs of the CXL region a DAX device comes from."""
        d = next((x for x in self.dax_devices if x.name == name), None)
        reg = self.region(d.region) if d is not None and d.region else None
        names = [m for m in (reg.memdevs if reg else ()) if m]
        return tuple(m for m in self.memdevs if m.name in names)

    def to_data(self) -> dict[str, Any]:
        from sactool import __version__
        from sactool.records import to_data

        return {
            "kind": "topology",
            "schema_version": self.schema_version,
            "sactool_version": __version__,
            "created_at": self.created_at,
            "live": self.live,
            "source": self.origin_of.source,
            "sysfs_root": self.sysfs_root,
            "machine": to_data(self.machine),
            "nodes": [n.to_data() for n in self.nodes],
            "demotion_enabled": self.demotion_enabled,
            "cxl": {
                "bus_present": self.cxl_bus,
                "memdevs": to_data(self.memdevs),
                "windows": [_hex_start(to_data(d)) for d in self.windows],
                "regions": [dict(to_data(r), resource=None if r.resource is None else f"{r.resource:#x}")
                            for r in self.regions],
                "decoders": [_hex_start(to_data(d)) for d in self.decoders if d.level != "root"],
                "ports": to_data(self.ports),
            },
            "iomem": to_data(self.iomem),
            "gpus": to_data(self.gpus),
            "gpu_scan": self.gpu_scan,
            "dax_devices": [dict(to_data(d), resource=None if d.resource is None else f"{d.resource:#x}",
                                 locality=self.dax_locality(d.name).to_data())
                            for d in self.dax_devices],
            "health": [h.to_data() for h in self.health],
            "warnings": to_data(self.warnings),
            "verdict": to_data(self.verdict),
        }


def _hex_start(d: dict[str, Any]) -> dict[str, Any]:
    """Addresses (HPA, DPA) as ``0x…`` strings in records, like the kernel prints them."""
    for key in ("start", "dpa_resource"):
        if isinstance(d.get(key), int):
            d[key] = f"{d[key]:#x}"
    return d
