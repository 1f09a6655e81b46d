"""The topology's element records (nodes, CXL devices, DAX, locality, the verdict): frozen
dataclasses filled by :func:`sactool.topology.probe`; the whole machine is
:class:`sactool.topology.model.Topology`.

Every field names the sysfs attribute it comes from and its unit. ``None`` always means "the
kernel did not say" (missing, unreadable or unparsable attribute) — never a guessed default.
Identifiers are the kernel's own (``node2``, ``mem0``, ``region0``, ``decoder2.0``, ``dax0.0``).

Units, from the kernel documentation:
- HMAT ``accessN/initiators/read_latency`` etc.: nanoseconds; ``read_bandwidth``: MiB/s
  (Documentation/admin-guide/mm/numaperf.rst). Bandwidths are stored in bytes/s (× 2**20, per that
  document; ACPI 6.4 Table 5.129 says the HMAT base unit is MB/s — a 2022 patch to change the kernel
  document to MB/s was posted, the document still says MiB/s; the two differ by 4.9 %);
  latencies are stored exactly as the kernel printed them. On 6.12, CXL-derived nodes have been seen
  with values on another scale (see the qemu-cxl fixtures' README): the prober flags that with a
  ``hmat-scale-mismatch`` warning instead of converting.
- per-node ``meminfo``: kB (KiB) → bytes. CXL ``size``/``resource``/``serial``: hex (``%#llx``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sactool.records import Warning
from sactool.topology.hardware import PcieLink

SCHEMA_VERSION = 4
"""Version of the ``topology`` record (``sactool probe --format json``); its history:

1 — the first format (fields added since are optional: the CPU node of each pool node, DAX locality, GPUs, …).
2 — a locality's ``node``/``cpu_node`` (``verdict.pool[]``, ``dax_devices[].locality``) are numbers.
3 — so is the machine block's ``numa_nodes[].node`` (``sactool.host.machine``).
4 — a ``health`` block, one entry per memdev (media health, AER, error-handling mode, poison; :mod:`sactool.topology.health`)."""


def upgrade_topology_3_to_4(rec: dict[str, Any]) -> dict[str, Any]:
    """A schema-3 topology record gains ``health``: empty — nothing was read then."""
    return {**rec, "schema_version": 4, "health": rec.get("health") or []}

KINDS = ("dram", "cxl", "hbm", "pmem", "unknown")


# Something the prober could not read or found inconsistent, kept inside the record: the one
# warning type of every record (:class:`sactool.records.Warning`)
ProbeWarning = Warning


@dataclass(frozen=True)
class HugePages:
    """``node<N>/hugepages/hugepages-<size>kB/{nr,free,surplus}_hugepages`` (page counts)."""

    page_size_bytes: int
    total: int | None
    free: int | None
    surplus: int | None


@dataclass(frozen=True)
class HmatAccess:
    """``node<N>/access<C>/initiators/*``: what firmware (HMAT) or the CXL driver (CDAT) claims.

    ``access_class`` 0 = best initiator of any kind, 1 = best CPU initiator. ``initiators`` are the
    node ids linked in the ``initiators/`` directory (empty for CXL-derived values on 6.12).
    Latencies as printed (documented as ns); bandwidths converted from MiB/s to bytes/s.
    """

    access_class: int
    initiators: tuple[int, ...]
    read_latency_ns: int | None
    write_latency_ns: int | None
    read_bandwidth_bytes_per_s: int | None
    write_bandwidth_bytes_per_s: int | None


@dataclass(frozen=True)
class MemorySideCache:
    """``node<N>/memory_side_cache/index<L>/*`` (HMAT memory-side cache in front of the node)."""

    level: int
    size_bytes: int | None
    line_size_bytes: int | None
    indexing: str | None      # 0 direct-mapped, 1 indexed, 2 other (enum cache_indexing)
    write_policy: str | None  # 0 write-back, 1 write-through, 2 other (enum cache_write_policy)


@dataclass(frozen=True)
class NumaNode:
    """One ``/sys/devices/system/node/node<N>`` and what sactool concluded about it."""

    id: int
    name: str
    cpus: tuple[int, ...]                 # node<N>/cpulist
    has_cpu: bool                         # N in node/has_cpu (or cpulist non-empty)
    has_memory: bool | None               # N in node/has_memory
    has_normal_memory: bool | None        # N in node/has_normal_memory
    mem_total_bytes: int | None           # node<N>/meminfo MemTotal (kB → bytes)
    mem_free_bytes: int | None            # node<N>/meminfo MemFree (kB → bytes)
    distances: tuple[tuple[int, int], ...]  # node<N>/distance (SLIT): ((node, distance), …); 255 = unreachable
    tier: int | None                      # memory_tiering/memory_tier<T>/nodelist
    hugepages: tuple[HugePages, ...] = ()
    hmat: tuple[HmatAccess, ...] = ()
    memory_side_caches: tuple[MemorySideCache, ...] = ()
    phys_ranges: tuple[tuple[int, int], ...] = ()  # [start, end) of node<N>/memory<B> blocks
    kind: str = "unknown"                 # one of KINDS
    evidence: tuple[str, ...] = ()        # the reasoning that led to ``kind``

    def distance_to(self, other: int) -> int | None:
        """SLIT distance from this node to ``other`` (None when the kernel gave none)."""
        for n, d in self.distances:
            if n == other:
                return d
        return None

    def hmat_for(self, access_class: int = 0) -> HmatAccess | None:
        for h in self.hmat:
            if h.access_class == access_class:
                return h
        return None

    def to_data(self) -> dict[str, Any]:
        from sactool.records import to_data

        return {
            "node": self.name,
            "id": self.id,
            "kind": self.kind,
            "evidence": list(self.evidence),
            "cpus": list(self.cpus),
            "has_cpu": self.has_cpu,
            "has_memory": self.has_memory,
            "has_normal_memory": self.has_normal_memory,
            "mem_total_bytes": self.mem_total_bytes,
            "mem_free_bytes": self.mem_free_bytes,
            "tier": self.tier,
            "distances": {f"node{n}": d for n, d in self.distances},
            "hugepages": to_data(self.hugepages),
            "hmat": to_data(self.hmat),
            "memory_side_caches": to_data(self.memory_side_caches),
            "phys_ranges": [{"start": f"{a:#x}", "end": f"{b:#x}"} for a, b in self.phys_ranges],
        }


@dataclass(frozen=True)
class CxlMemdev:
    """``/sys/bus/cxl/devices/mem<N>``: a CXL Type-3 memory device."""

    name: str
    serial: str | None              # memN/serial (hex, kept as printed)
    ram_size_bytes: int | None      # memN/ram/size
    pmem_size_bytes: int | None     # memN/pmem/size
    firmware_version: str | None    # memN/firmware_version
    affinity_node: int | None       # memN/numa_node: the DEVICE's CPU affinity, not its memory's node
    endpoint: str | None            # endpoint<P> port whose uport is this memdev
    link: PcieLink | None
    host_bridge: str | None = None  # the PCI host bridge the device sits under (``pci0000:0c``)
    host_bridge_node: int | None = None  # numa_node of that bridge: its own attribute, else its root
                                          # port's (``pci0000:0c/0000:0c:00.0/numa_node``); None: -1 or unread
    ports: tuple[str, ...] = ()     # CXL ports from the root to its endpoint: ("root0", "port2", "endpoint4")
    path_links: tuple[PcieLink, ...] = ()  # every PCIe function's link, device first, up to the root port
    narrowest_link: PcieLink | None = None  # the lowest ceiling among path_links: the path's limit
    pci_device: str | None = None   # the PCI function the memdev sits on (its parent directory, ``0000:0d:00.0``)
    ram_qos_class: int | None = None   # memN/ram/qos_class (platform QTG id; None: absent, or -1 "none")
    pmem_qos_class: int | None = None  # memN/pmem/qos_class


@dataclass(frozen=True)
class CxlPort:
    """``root<N>``/``port<N>``/``endpoint<N>`` under ``/sys/bus/cxl/devices`` (sysfs-bus-cxl).

    ``kind``: "root" (ACPI0017, the CXL root), "host-bridge" (its ``uport`` is a PCI host bridge),
    "switch" (a switch upstream port) or "endpoint" (its ``uport`` is a memdev).
    """

    name: str
    kind: str
    parent: str | None               # the port above (the directory it sits in)
    uport: str | None                # basename of the ``uport`` link: ACPI0017:00, pci0000:0c, 0000:0e:00.0, mem1
    parent_dport: str | None         # basename of ``parent_dport``: the parent's downstream port it hangs off
    depth: int | None = None         # ports above it (root0 0, a host bridge 1, …): cxl list's ``depth``
    decoders_committed: int | None = None  # ``<port>/decoders_committed``: HDM decoders committed (v6.7)
    dports: tuple[CxlDport, ...] = ()  # ``<port>/dport<id>`` links: the downstream ports, by id


@dataclass(frozen=True)
class CxlDport:
    """One ``<port>/dport<id>`` link: a downstream port of a CXL port (cxl list's ``dports``).

    ``id`` is the number in the link's name (the port id decoders' ``target_list`` names);
    ``device`` the basename of its target (a host bridge ``pci0000:0c`` under the root, a root
    or switch downstream port ``0000:0c:00.0`` below; on 6.1 the root's dports are the ACPI
    devices ``ACPI0016:00``).
    """

    id: int
    device: str | None
    alias: str | None = None         # basename of the target's ``physical_node`` (an ACPI dport, 6.1) or
                                     # ``firmware_node`` link (``ACPI0016:01``), libcxl's order; None: neither


@dataclass(frozen=True)
class CxlDecoder:
    """``decoder<P>.<I>``: root (a CFMWS window), switch, or endpoint HDM decoder."""

    name: str
    level: str                      # "root", "switch" or "endpoint"
    port: str                       # parent port directory: root0, port1, endpoint2
    start: int | None               # decoder/start (HPA)
    size_bytes: int | None          # decoder/size
    interleave_ways: int | None
    interleave_granularity_bytes: int | None
    mode: str | None = None         # endpoint: ram/pmem/none
    region: str | None = None       # endpoint/switch: decoder/region, the region it decodes for
    memdev: str | None = None       # endpoint: the memdev behind the endpoint port
    capabilities: tuple[str, ...] = ()   # root: cap_ram, cap_pmem, cap_type2, cap_type3
    can_create_ram_region: bool | None = None  # root: create_ram_region exists (kernel ≥ 6.3)
    target_list: str | None = None  # root/switch: target_list (dport ids)
    targets: tuple[str | None, ...] = ()  # root/switch: the dport device of each target_list id, in
                                          # interleave order (``pci0000:0c``; None: no such dport link)
    dpa_resource: int | None = None     # endpoint: decoder/dpa_resource (device physical base, hex; all-ones: none)
    dpa_size_bytes: int | None = None   # endpoint: decoder/dpa_size (hex)
    locked: bool | None = None          # decoder/locked: the platform locked its settings (no reprogramming)
    target_type: str | None = None      # switch/endpoint: decoder/target_type (``expander`` = Type-3 memory)
    qos_class: int | None = None        # root: decoder/qos_class (the CFMWS QTG id; -1 none → None)
    committed: bool | None = None       # switch/endpoint: decoder id < its port's decoders_committed (the
                                        # kernel commits a port's HDM decoders in id order, drivers/cxl/core/hdm.c
                                        # cxl_decoder_commit; a single-dport port's pass-through decoder has
                                        # no HDM registers: it decodes, uncommitted)
    max_available_extent_bytes: int | None = None  # root: the largest part of the window no region uses
                                                   # (computed like libcxl's max_available_extent)


@dataclass(frozen=True)
class CxlRegion:
    """``region<N>`` under a root decoder: an HPA range interleaved over endpoint decoders."""

    name: str
    root_decoder: str | None
    mode: str | None                 # region/mode: ram or pmem
    size_bytes: int | None           # region/size
    resource: int | None             # region/resource; None when all-ones (not allocated)
    allocated: bool                  # resource was not all-ones
    interleave_ways: int | None
    interleave_granularity_bytes: int | None
    targets: tuple[str, ...]         # region/target<i>, in interleave order (endpoint decoders)
    memdevs: tuple[str | None, ...]  # memdev behind each target, same order (None: not found)
    committed: bool | None           # region/commit

    def describe(self) -> str:
        """``region0 (ram, 2-way, mem1+mem2)``."""
        ways = f"{self.interleave_ways}-way" if self.interleave_ways else "?-way"
        devs = "+".join(m or "?" for m in self.memdevs) or "no targets"
        return f"{self.name} ({self.mode or '?'}, {ways}, {devs})"


@dataclass(frozen=True)
class DaxDevice:
    """``/sys/bus/dax/devices/dax<R>.<N>``."""

    name: str
    size_bytes: int | None           # dax/size (bytes)
    target_node: int | None          # dax/target_node: node its memory joins when onlined
    align_bytes: int | None          # dax/align
    mode: str | None                 # "system-ram" (bound to kmem), "devdax" (device_dax), None
    driver: str | None               # bound driver name
    resource: int | None             # dax/resource (HPA start)
    source: str | None               # "cxl", "nd" (NVDIMM namespace), "hmem", None
    region: str | None               # the CXL region it comes from, when known
    memory_blocks: int | None = None         # system-ram: memory blocks wholly inside [resource, +size)
                                             # (daxctl's ``total_memblocks``)
    memory_blocks_online: int | None = None  # …of which ``memory<N>/state`` reads "online" (``online_memblocks``)
    block_size_bytes: int | None = None      # ``devices/system/memory/block_size_bytes`` (hex)
    movable: bool | None = None              # system-ram: every online block's ``memory<N>/valid_zones`` reads
                                             # "Movable" (daxctl's ``movable``); None: no block online/readable
    mappings: tuple[DaxMapping, ...] = ()    # ``dax/mapping<N>/{start,end,page_offset}``: its physical extents
    dax_region: DaxRegion | None = None      # the dax region it was carved from (``../dax_region/*``)


@dataclass(frozen=True)
class DaxMapping:
    """``daxX.Y/mapping<N>``: one physical extent of a DAX device (daxctl list -M's ``mappings``).

    ``start``/``end``: HPA, inclusive, as the kernel prints them (hex); ``page_offset``: the extent's
    first page within the device (hex, in pages); ``size_bytes`` = end - start + 1."""

    index: int
    start: int | None
    end: int | None
    page_offset: int | None

    @property
    def size_bytes(self) -> int | None:
        return None if self.start is None or self.end is None else self.end - self.start + 1

    def to_data(self) -> dict[str, Any]:
        return {"mapping": f"mapping{self.index}", "start": None if self.start is None else f"{self.start:#x}",
                "end": None if self.end is None else f"{self.end:#x}", "page_offset": self.page_offset,
                "size_bytes": self.size_bytes}


@dataclass(frozen=True)
class DaxRegion:
    """``<dax region>/dax_region/{id,size,align,available_size}`` (sysfs-bus-dax; daxctl list -R)."""

    path: str                        # the directory holding ``dax_region/``, below /sys/devices, as daxctl
                                     # prints it (``/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0``)
    id: int | None
    size_bytes: int | None
    align_bytes: int | None
    available_size_bytes: int | None


LOCALITY_SOURCES = ("cpus", "device-affinity", "slit", "hmat", "none")
"""How a memory node's CPU node was found, strongest first (see :mod:`sactool.topology.locality`)."""


@dataclass(frozen=True)
class Locality:
    """The CPU node that sits next to one memory node (or DAX device), and the evidence.

    ``distance``: the SLIT entry read in the CPU node's row toward the memory node
    (``node<cpu_node>/distance``), as the kernel printed it (255 = unreachable); None when the
    kernel gave none or the memory is not an online node (a devdax device).
    ``source``: one of :data:`LOCALITY_SOURCES`.
    """

    node: int | None                 # the memory node (None: a devdax device whose node is offline)
    cpu_node: int | None             # None only when no node has CPUs
    distance: int | None
    source: str
    evidence: str
    device: str | None = None        # the DAX device, for devdax entries

    def to_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.device is not None:
            out["device"] = self.device
        out.update({
            "node": self.node,           # NUMA node numbers as the kernel's own integers (docs/reference/units.md)
            "cpu_node": self.cpu_node,
            "distance": self.distance,
            "source": self.source,
            "evidence": self.evidence,
        })
        return out


@dataclass(frozen=True)
class Verdict:
    """Which node(s) sactool would use as the KV pool, and why.

    ``pool``: one :class:`Locality` per pool node, in ``pool_nodes`` order — each node's own CPU
    node. ``cpu_node`` is the first pool node's (kept for readers of the single field); with
    several pool nodes use :meth:`cpu_node_of`.
    """

    pool_nodes: tuple[int, ...]
    stand_in: bool                   # True: no CXL node; a DRAM node stands in
    reason: str
    cpu_node: int | None = None      # the first pool node's CPU node (see ``pool`` for each)
    pool: tuple[Locality, ...] = ()
    devdax_pool: tuple[str, ...] = ()   # stand-in verdict beside devdax devices (the SAC shape): the devices
    devdax_note: str = ""               # tune and serve put the pool on, and why (the table prints the same)

    def cpu_node_of(self, node_id: int) -> int | None:
        """The CPU node of pool node ``node_id`` (None when it is not a pool node)."""
        return next((p.cpu_node for p in self.pool if p.node == node_id), None)
