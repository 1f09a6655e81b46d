"""Classify every node (dram/cxl/hbm/pmem/unknown) with the evidence chain, and pick the KV pool.

Rules, strongest evidence first:
1. a DAX device onlined by ``kmem`` into the node: from a CXL region → ``cxl``
   ("node2 ← dax0.0 (kmem) ← region0 (ram, 1-way, mem0)"); from an NVDIMM namespace outside any
   CXL region → ``pmem``;
   from ``hmem`` (Soft Reserved, EFI specific-purpose memory) inside a CXL window → ``cxl``;
2. the node's memory blocks lie inside a CXL region or window (a root decoder, or a ``CXL Window``
   of ``/proc/iomem``) → ``cxl``;
3. the node has CPUs → ``dram``;
4. CPU-less: HMAT read bandwidth above every CPU node's → ``hbm``; Soft Reserved / hmem memory in
   no CXL window → ``unknown`` with a ``soft-reserved-unattributed`` warning; memory onlined from a
   DAX device is not boot-time memory; boot-time normal memory (``has_normal_memory``) → ``dram``;
   otherwise ``unknown``.
Supporting facts (CPU-less, memory tier vs the DRAM tier, HMAT latency vs DRAM, memory-side cache)
are appended as evidence; they never decide the kind on their own.
"""

from __future__ import annotations

import re
from dataclasses import replace

from sactool.topology.records import (
    CxlDecoder, CxlRegion, DaxDevice, NumaNode, ProbeWarning, Verdict,
)
from sactool.topology.hints import system_ram_steps
from sactool.units import format_bytes

# Published idle-latency ratios of CXL (or any far memory) to local DRAM are 1.5–6×
# (Melody/ASPLOS'25: 140–410 ns CXL; Micron reskit: 564.5 vs 84.5 ns). A ratio beyond 100× between
# two nodes' HMAT latencies is not physical; it means the two figures are on different scales.
HMAT_SCALE_RATIO = 100

SOFT_RESERVED = "Soft Reserved"  # /proc/iomem name of EFI_MEMORY_SP ranges (kernel/resource.c, e820)
_CXL_WINDOW_RE = re.compile(r"^CXL Window \d+$")  # drivers/cxl/acpi.c: "CXL Window %d"


def _fmt_range(a: int, b: int) -> str:
    return f"{a:#x}-{b - 1:#x}"


def _first_hmat(n: NumaNode):
    h = n.hmat_for(1) or n.hmat_for(0)
    return h


class _Maps:
    """What every node is checked against: CXL windows (root decoders and ``/proc/iomem``), Soft
    Reserved ranges, regions, and the CPU nodes that serve as the DRAM reference."""

    def __init__(self, nodes, decoders, regions, cxl_present, iomem, iomem_reason):
        self.iomem, self.iomem_reason, self.cxl_present = iomem, iomem_reason, cxl_present
        self.iomem_windows = [x for x in iomem or () if x.depth == 0 and _CXL_WINDOW_RE.match(x.name)]
        self.soft_reserved = [x for x in iomem or () if x.name == SOFT_RESERVED]
        self.cpu_nodes = [n for n in nodes if n.has_cpu]
        self.dram_tiers = sorted({n.tier for n in self.cpu_nodes if n.tier is not None})
        self.dram_ref = next((n for n in self.cpu_nodes if _first_hmat(n) and _first_hmat(n).read_latency_ns), None)
        self.windows = [d for d in decoders if d.level == "root" and d.start is not None and d.size_bytes]
        self.regions = regions
        self.reg_by = {r.name: r for r in regions}

    def window_of(self, addr: int | None) -> str | None:
        if addr is None:
            return None
        w = next((w for w in self.windows if w.start <= addr < w.start + w.size_bytes), None)
        if w:
            return f"CXL window {w.name}"
        x = next((x for x in self.iomem_windows if x.contains(addr)), None)
        return f"/proc/iomem '{x.name}' ({x.start:#x}-{x.end:#x})" if x else None

    def soft_of(self, addr: int | None):
        return None if addr is None else next((x for x in self.soft_reserved if x.contains(addr)), None)


class _Node:
    """One node's classification in progress: its kind, evidence lines, and whether specific-purpose
    (Soft Reserved) memory was seen in it."""

    def __init__(self, n: NumaNode, kmem: list[DaxDevice]):
        self.n, self.kmem = n, kmem
        self.kind, self.specific = "unknown", False
        self.ev: list[str] = []


def classify(nodes: list[NumaNode], decoders: list[CxlDecoder], regions: list[CxlRegion],
             dax: list[DaxDevice], cxl_present: bool, iomem=None,
             iomem_reason: str | None = None) -> tuple[list[NumaNode], list[ProbeWarning]]:
    """``iomem``: the ranges of ``/proc/iomem`` (:func:`sactool.host.iomem.read_iomem`), or None
    with ``iomem_reason``."""
    warnings: list[ProbeWarning] = []
    maps = _Maps(nodes, decoders, regions, cxl_present, iomem, iomem_reason)
    out = []
    for n in nodes:
        st = _Node(n, [d for d in dax if d.target_node == n.id and d.mode == "system-ram"])
        _rule_dax(st, maps)                      # rule 1
        _rule_ranges(st, maps)                   # rule 2
        if n.has_cpu:
            _rule_cpus(st, warnings)             # rule 3
        else:
            st.ev.append("CPU-less")
        if st.kind == "unknown":
            _rule_cpu_less(st, maps, warnings)   # rule 4
        _supporting_facts(st, maps, warnings)
        out.append(replace(n, kind=st.kind, evidence=tuple(st.ev)))
    return out, warnings


def _rule_dax(st: _Node, maps: _Maps) -> None:
    """Rule 1: DAX devices onlined by kmem into the node (CXL region, NVDIMM namespace, hmem)."""
    n, ev = st.n, st.ev
    for d in st.kmem:
        reg = maps.reg_by.get(d.region) if d.region else None
        if reg is not None:
            st.kind = "cxl"
            via = " (nd namespace)" if d.source == "nd" else ""
            ev.append(f"{n.name} ← {d.name} ({d.driver}){via} ← {reg.describe()}")
        elif d.source == "nd" and st.kind != "cxl":
            st.kind = "pmem"
            ev.append(f"{n.name} ← {d.name} ({d.driver}) ← NVDIMM namespace (not in any CXL region)")
        elif d.source == "hmem":
            sr, win = maps.soft_of(d.resource), maps.window_of(d.resource)
            what = f"{n.name} ← {d.name} ({d.driver}) ← hmem" + (
                f" (Soft Reserved {sr.start:#x}-{sr.end:#x})" if sr else
                f" (/proc/iomem: {maps.iomem_reason})" if maps.iomem is None and maps.iomem_reason else "")
            if win:
                st.kind = "cxl"
                ev.append(f"{what} in {win}: firmware-mapped CXL memory, no CXL region assembled it")
            else:
                st.specific = True
                ev.append(f"{what}, in no CXL window")
        elif st.kind == "unknown":
            ev.append(f"{n.name} ← {d.name} ({d.driver}, source {d.source or 'unknown'})")


def _rule_ranges(st: _Node, maps: _Maps) -> None:
    """Rule 2: the node's memory blocks lie in a CXL region or window (or in Soft Reserved memory,
    which is noted as specific-purpose)."""
    if not ((st.kind == "unknown" or st.n.has_cpu) and st.n.phys_ranges):
        return
    for a, b in st.n.phys_ranges:
        hit = next((r for r in maps.regions if r.resource is not None and r.size_bytes
                    and r.resource <= a < r.resource + r.size_bytes), None)
        if hit:
            st.kind = "cxl"
            st.ev.append(f"memory {_fmt_range(a, b)} lies in {hit.describe()}")
            break
        win = maps.window_of(a)
        if win:
            st.kind = "cxl"
            st.ev.append(f"memory {_fmt_range(a, b)} lies in {win}")
            break
        sr = maps.soft_of(a)
        if sr and not st.specific:
            st.specific = True
            st.ev.append(f"memory {_fmt_range(a, b)} lies in Soft Reserved {sr.start:#x}-{sr.end:#x} "
                         "(EFI specific-purpose memory: CXL or HBM the firmware set aside)")


def _rule_cpus(st: _Node, warnings: list[ProbeWarning]) -> None:
    """Rule 3: a node with CPUs is DRAM; other memory found in it becomes "also holds" evidence."""
    n = st.n
    if st.kind == "cxl":  # CXL memory onlined into a CPU node (no SRAT proximity domain for it)
        warnings.append(ProbeWarning(
            "cxl-in-cpu-node",
            f"CXL memory was onlined into {n.name}, which also has CPUs and DRAM: {st.ev[0]}",
            "node-level placement cannot separate the two; give the CXL window its own proximity "
            "domain (firmware SRAT/CEDT) or use the DAX device in devdax mode"))
        st.ev = [f"also holds CXL memory: {e}" for e in st.ev]
    elif st.kind != "unknown":
        st.ev = [f"also holds {st.kind} memory: {e}" for e in st.ev]
    st.kind = "dram"
    st.ev.insert(0, f"CPUs {_cpus(n.cpus)}")


def _rule_cpu_less(st: _Node, maps: _Maps, warnings: list[ProbeWarning]) -> None:
    """Rule 4: a CPU-less node nothing above decided: HBM by HMAT bandwidth, unattributed Soft
    Reserved memory, DAX-onlined memory, boot-time normal memory, or unknown."""
    n, ev = st.n, st.ev
    h, best = _first_hmat(n), max((_first_hmat(c).read_bandwidth_bytes_per_s or 0
                                  for c in maps.cpu_nodes if _first_hmat(c)), default=0)
    if h and h.read_bandwidth_bytes_per_s and best and h.read_bandwidth_bytes_per_s > best:
        st.kind = "hbm"
        ev.append(f"HMAT read bandwidth {h.read_bandwidth_bytes_per_s >> 20} MiB/s above every CPU node's "
                  f"({best >> 20} MiB/s)")
    elif st.specific:
        ev.append("specific-purpose memory in no CXL window: CXL or HBM, nothing here says which")
        warnings.append(ProbeWarning(
            "soft-reserved-unattributed",
            f"{n.name} is specific-purpose (Soft Reserved) memory onlined through hmem, and no CXL window "
            "covers it: sactool cannot tell CXL from HBM, so it is not used as the pool",
            "load the CXL driver (modprobe cxl_acpi cxl_pci) so the CXL windows appear, then re-probe"
            + (" as root (/proc/iomem addresses need CAP_SYS_ADMIN)" if maps.iomem is None else "")))
    elif st.kmem:
        ev.append(f"onlined from {', '.join(d.name for d in st.kmem)} (not boot-time memory), and no CXL region "
                  "or window maps it")
    elif n.has_normal_memory:
        st.kind = "dram"
        ev.append("boot-time normal memory, and no CXL region, window or DAX device maps it")
    elif n.has_memory is False or n.mem_total_bytes == 0:
        ev.append("no memory online")
    else:
        ev.append("no CXL region, window or DAX device maps it" if maps.cxl_present else "no CXL bus in sysfs")


def _supporting_facts(st: _Node, maps: _Maps, warnings: list[ProbeWarning]) -> None:
    """Evidence that never decides the kind: memory tier vs DRAM's, HMAT latency vs DRAM's (with a
    scale-mismatch warning), memory-side caches."""
    n, ev = st.n, st.ev
    if n.tier is not None and maps.dram_tiers and not n.has_cpu:
        ref = maps.dram_tiers[0]
        rel = "below" if n.tier > ref else "same as" if n.tier == ref else "above"
        ev.append(f"tier {n.tier} {rel} DRAM tier {ref}")
    h, dram_ref = _first_hmat(n), maps.dram_ref
    if h and h.read_latency_ns is not None and dram_ref and dram_ref.id != n.id:
        ref_lat = _first_hmat(dram_ref).read_latency_ns
        ev.append(f"HMAT read latency {h.read_latency_ns} vs {ref_lat} ({dram_ref.name})")
        if ref_lat and max(h.read_latency_ns, ref_lat) >= HMAT_SCALE_RATIO * max(1, min(h.read_latency_ns, ref_lat)):
            warnings.append(ProbeWarning(
                "hmat-scale-mismatch",
                f"HMAT read latency of {n.name} ({h.read_latency_ns}) is {h.read_latency_ns / ref_lat:.0f}× "
                f"{dram_ref.name}'s ({ref_lat}); "
                + ("its values have no initiator link (CXL-derived), " if not h.initiators else "")
                + "the two are on different scales (seen on 6.12: CXL-derived values look like ps); shown as read",
                "compare against a measured latency ('sactool bench') before trusting either figure"))
    for c in n.memory_side_caches:
        ev.append(f"memory-side cache L{c.level} {format_bytes(c.size_bytes) if c.size_bytes else '?'}")


def _cpus(cpus: tuple[int, ...]) -> str:
    from sactool.host.sysfs import format_cpulist

    return format_cpulist(cpus) or "none"


def verdict(nodes: list[NumaNode], regions: list[CxlRegion], dax: list[DaxDevice],
            locality, memdevs=(), cxl_bus: bool = True, auto_online: str | None = None) -> Verdict:
    """KV pool choice: every CXL node with memory; else the DRAM CPU node with most free memory.

    ``locality(node_id)`` gives each pool node its own CPU node (:meth:`Topology.locality`);
    ``auto_online``: the kernel's ``auto_online_blocks`` policy (the system-ram step depends on it)."""
    cxl = [n for n in nodes if n.kind == "cxl" and (n.mem_total_bytes or 0) > 0]
    if cxl:
        ids = tuple(n.id for n in cxl)
        pool = tuple(locality(i) for i in ids)
        parts = [f"{'; '.join(e for e in n.evidence if '←' in e) or n.name + ': ' + n.evidence[0]}, "
                 f"{format_bytes(n.mem_total_bytes or 0)} ({format_bytes(n.mem_free_bytes or 0)} free)"
                 for n in cxl]
        near = ", ".join(f"node{p.node} near node{p.cpu_node} ({_SOURCE_WORDS[p.source]})" for p in pool
                         if p.cpu_node is not None)
        return Verdict(ids, False, "CXL memory onlined as NUMA node(s) — " + " | ".join(parts)
                       + (f"; pin each node's threads to its own CPU node: {near}" if near else ""),
                       pool[0].cpu_node, pool)
    dram = [n for n in nodes if n.kind == "dram" and n.has_cpu]
    if not dram:
        return Verdict((), False, "no CXL node and no DRAM node with CPUs: nothing to use as a KV pool")
    best = max(dram, key=lambda n: (n.mem_free_bytes or 0, -n.id))
    why = [f"no CXL memory is onlined as a NUMA node here, so {best.name} (DRAM, "
           f"{format_bytes(best.mem_free_bytes or 0)} free) stands in for the KV pool; "
           f"figures measured on it describe DRAM, not CXL"]
    if not cxl_bus:
        why.append("no /sys/bus/cxl: the CXL core is not loaded or there is no CXL hardware")
    elif not memdevs:
        why.append("the CXL bus has no memory devices")
    devdax = [d for d in dax if d.source == "cxl" or d.region]
    for d in devdax:
        if d.mode == "devdax":
            why.append(f"CXL memory exists as {d.name} in devdax mode (not a node): "
                       + system_ram_steps(d.name, auto_online))
    if not any(r.committed for r in regions) and any(r for r in regions):
        why.append("a CXL region exists but is not committed")
    return Verdict((best.id,), True, "; ".join(why), best.id, (locality(best.id),))


_SOURCE_WORDS = {"cpus": "its own CPUs", "device-affinity": "CXL device affinity", "slit": "SLIT",
                 "hmat": "HMAT initiators", "none": "nothing links it to a CPU node"}
