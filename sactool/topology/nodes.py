"""NUMA nodes from ``/sys/devices/system/node`` (+ memory tiers, memory blocks).

Sources (kernel ABI): Documentation/ABI/stable/sysfs-devices-node (cpulist, distance, meminfo,
accessN/initiators/*, memory_side_cache/indexN/*), Documentation/admin-guide/mm/numaperf.rst
(HMAT units: latency ns, bandwidth MiB/s), Documentation/ABI/testing/sysfs-kernel-mm-memory-tiers.
"""

from __future__ import annotations

import re

from sactool.errors import TopologyError
from sactool.host.machine import NODE_DIR, node_tiers
from sactool.host.sysfs import SysfsReader, parse_cpulist, parse_int
from sactool.topology.records import HmatAccess, HugePages, MemorySideCache, NumaNode, ProbeWarning

MEMORY_DIR = "sys/devices/system/memory"
MIB = 1 << 20  # numaperf.rst: bandwidth attributes are MiB/s
_NODE_RE = re.compile(r"^node(\d+)$")
_HUGE_RE = re.compile(r"^hugepages-(\d+)kB$")
_BLOCK_RE = re.compile(r"^memory(\d+)$")
_INDEXING = {0: "direct-mapped", 1: "indexed", 2: "other"}     # enum cache_indexing (linux/node.h)
_WRITE_POLICY = {0: "write-back", 1: "write-through", 2: "other"}  # enum cache_write_policy


def node_ids(r: SysfsReader) -> list[int]:
    """Node ids present under ``devices/system/node``; raises TopologyError when it is absent."""
    if not r.is_dir(NODE_DIR):
        where = "this system" if r.live else f"{r.root}"
        raise TopologyError(
            f"no sys/devices/system/node in {where}",
            "the kernel has no NUMA sysfs (CONFIG_NUMA=n?) or the recording is incomplete; "
            "record with 'sactool probe --snapshot' on the machine",
        )
    ids = sorted(int(m.group(1)) for name in r.listdir(NODE_DIR) if (m := _NODE_RE.match(name)))
    if not ids and r.why(NODE_DIR):
        raise TopologyError(f"{NODE_DIR} cannot be listed ({r.why(NODE_DIR)})",
                            "run as a user who can read the tree (or make it readable: chmod -R a+rX DIR)")
    if not ids:
        raise TopologyError(f"{NODE_DIR} lists no node<N> directory",
                            "the recording is incomplete; record it again with 'sactool probe --snapshot'")
    return ids


def _mask(r: SysfsReader, name: str) -> tuple[int, ...] | None:
    return r.cpulist(f"{NODE_DIR}/{name}")


def _hmat(r: SysfsReader, base: str) -> tuple[HmatAccess, ...]:
    out = []
    for entry in r.listdir(base):
        m = re.match(r"^access(\d+)$", entry)
        if not m:
            continue
        d = f"{base}/{entry}/initiators"
        inits = tuple(sorted(int(x.group(1)) for e in r.listdir(d) if (x := _NODE_RE.match(e))))
        rbw, wbw = r.int(f"{d}/read_bandwidth"), r.int(f"{d}/write_bandwidth")
        out.append(HmatAccess(
            access_class=int(m.group(1)),
            initiators=inits,
            read_latency_ns=r.int(f"{d}/read_latency"),
            write_latency_ns=r.int(f"{d}/write_latency"),
            read_bandwidth_bytes_per_s=None if rbw is None else rbw * MIB,
            write_bandwidth_bytes_per_s=None if wbw is None else wbw * MIB,
        ))
    return tuple(sorted(out, key=lambda h: h.access_class))


def _caches(r: SysfsReader, base: str) -> tuple[MemorySideCache, ...]:
    d = f"{base}/memory_side_cache"
    out = []
    for entry in r.listdir(d):
        m = re.match(r"^index(\d+)$", entry)
        if not m:
            continue
        idx, wp = r.int(f"{d}/{entry}/indexing"), r.int(f"{d}/{entry}/write_policy")
        out.append(MemorySideCache(
            level=int(m.group(1)),
            size_bytes=r.int(f"{d}/{entry}/size"),
            line_size_bytes=r.int(f"{d}/{entry}/line_size"),
            indexing=None if idx is None else _INDEXING.get(idx, str(idx)),
            write_policy=None if wp is None else _WRITE_POLICY.get(wp, str(wp)),
        ))
    return tuple(sorted(out, key=lambda c: c.level))


def _hugepages(r: SysfsReader, base: str) -> tuple[HugePages, ...]:
    d = f"{base}/hugepages"
    out = []
    for entry in r.listdir(d):
        m = _HUGE_RE.match(entry)
        if m:
            out.append(HugePages(
                page_size_bytes=int(m.group(1)) * 1024,
                total=r.int(f"{d}/{entry}/nr_hugepages"),
                free=r.int(f"{d}/{entry}/free_hugepages"),
                surplus=r.int(f"{d}/{entry}/surplus_hugepages"),
            ))
    return tuple(sorted(out, key=lambda h: h.page_size_bytes))


def _ranges(blocks: list[int], block_size: int) -> tuple[tuple[int, int], ...]:
    """Memory block ids → merged physical [start, end) ranges."""
    out: list[list[int]] = []
    for b in sorted(blocks):
        start = b * block_size
        if out and out[-1][1] == start:
            out[-1][1] = start + block_size
        else:
            out.append([start, start + block_size])
    return tuple((a, b) for a, b in out)


def read_nodes(r: SysfsReader) -> tuple[list[NumaNode], list[ProbeWarning], bool | None]:
    """All nodes (kind still "unknown"), warnings, and ``demotion_enabled``."""
    ids = node_ids(r)
    warnings: list[ProbeWarning] = []
    has_cpu, has_mem, has_normal = _mask(r, "has_cpu"), _mask(r, "has_memory"), _mask(r, "has_normal_memory")
    tiers = node_tiers(r)
    block_size = r.hex(f"{MEMORY_DIR}/block_size_bytes")
    nodes = []
    for nid in ids:
        base = f"{NODE_DIR}/node{nid}"
        cpus_attr = r.attr(f"{base}/cpulist", parse_cpulist)
        cpus = cpus_attr.value or ()
        if cpus_attr.value is None:
            warnings.append(ProbeWarning("unreadable-attribute", f"{base}/cpulist: {cpus_attr.reason}",
                                         "CPUs of this node are unknown; treated as CPU-less"))
        meminfo = r.kv(f"{base}/meminfo")
        if meminfo is None:
            warnings.append(ProbeWarning("unreadable-attribute", f"{base}/meminfo: {r.why(base + '/meminfo')}",
                                         "the node's memory size is unknown"))
        dist_text = r.str(f"{base}/distance")
        distances: tuple[tuple[int, int], ...] = ()
        if dist_text is not None:
            try:
                vals = [parse_int(v) for v in dist_text.split()]
            except ValueError:
                vals = []
                warnings.append(ProbeWarning("unreadable-attribute",
                                             f"node{nid}/distance unparsable: {dist_text[:40]!r}", None))
            if vals and len(vals) == len(ids):
                distances = tuple(zip(ids, vals))
            elif vals:
                warnings.append(ProbeWarning(
                    "slit-mismatch", f"node{nid}/distance has {len(vals)} entries for {len(ids)} nodes",
                    "distances ignored for this node"))
        blocks = [int(m.group(1)) for e in r.listdir(base) if (m := _BLOCK_RE.match(e))]
        nodes.append(NumaNode(
            id=nid,
            name=f"node{nid}",
            cpus=cpus,
            has_cpu=bool(cpus) or (has_cpu is not None and nid in has_cpu),
            has_memory=None if has_mem is None else nid in has_mem,
            has_normal_memory=None if has_normal is None else nid in has_normal,
            mem_total_bytes=None if meminfo is None else meminfo.get("MemTotal"),
            mem_free_bytes=None if meminfo is None else meminfo.get("MemFree"),
            distances=distances,
            tier=tiers.get(nid),
            hugepages=_hugepages(r, base),
            hmat=_hmat(r, base),
            memory_side_caches=_caches(r, base),
            phys_ranges=_ranges(blocks, block_size) if block_size else (),
        ))
    demotion = r.bool("sys/kernel/mm/numa/demotion_enabled")
    return nodes, warnings, demotion
