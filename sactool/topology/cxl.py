"""CXL devices from ``/sys/bus/cxl/devices`` (Documentation/ABI/testing/sysfs-bus-cxl).

memdevs (``memN``), decoders (``decoderP.I`` under ``rootN``/``portN``/``endpointN``), regions
(``regionN`` under a root decoder). A region's ``targetI`` names an endpoint decoder; the decoder's
parent ``endpointP`` port has a ``uport`` link to its memdev — that is how a region is tied to its
devices, in interleave order.

Quirks handled: ``memN/numa_node`` is the device's CPU affinity, not the node its memory joins;
an unallocated region's ``resource`` reads all-ones; targets may name decoders that are gone.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from sactool.host.sysfs import SysfsReader
from sactool.topology.hints import NDCTL_RAM_REGIONS, create_region_command
from sactool.topology.link import read_link
from sactool.topology.records import CxlDecoder, CxlDport, CxlMemdev, CxlPort, CxlRegion, ProbeWarning
from sactool.topology.pci import HOST_BRIDGE_RE, PCI_FN_RE, host_bridge, narrowest, node_or_none, path_links
from sactool.units import format_bytes

CXL_DEVICES = "sys/bus/cxl/devices"
ALL_ONES = (1 << 64) - 1  # resource_size_t -1: "not allocated" (region/resource, decoder/start)

_MEM_RE = re.compile(r"^mem\d+$")
_DEC_RE = re.compile(r"^decoder(\d+)\.(\d+)$")
_REGION_RE = re.compile(r"^region\d+$")
_ENDPOINT_RE = re.compile(r"^endpoint\d+$")
_PORT_RE = re.compile(r"^(root|port|endpoint)\d+$")
_DPORT_RE = re.compile(r"^dport(\d+)$")


def _key(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def read_cxl(r: SysfsReader) -> tuple[list[CxlMemdev], list[CxlDecoder], list[CxlRegion], list[ProbeWarning], bool,
                                    list[CxlPort]]:
    """(memdevs, decoders, regions, warnings, bus_present, ports)."""
    warnings: list[ProbeWarning] = []
    if not r.is_dir(CXL_DEVICES):
        return [], [], [], warnings, False, []
    canon = _canonical(r, warnings)
    endpoint_mem = _endpoint_memdevs(r, canon)
    ports = _ports(r, canon)
    memdevs = _memdevs(r, canon, {m: e for e, m in endpoint_mem.items()})
    decoders = _decoders(r, canon, endpoint_mem, {p.name: p for p in ports})
    regions = _regions(r, canon, {d.name: d for d in decoders}, warnings)
    decoders = _with_free_extents(decoders, regions)
    warnings.extend(_unmapped_capacity(memdevs, decoders, regions))
    return memdevs, decoders, regions, warnings, True, ports


def _canonical(r: SysfsReader, warnings: list[ProbeWarning]) -> dict[str, str]:
    """Device name -> its resolved path under ``/sys/devices``; a link that leads nowhere is a warning."""
    canon: dict[str, str] = {}
    for name in r.listdir(CXL_DEVICES):
        path = r.resolve(f"{CXL_DEVICES}/{name}")
        if path is None:
            warnings.append(ProbeWarning("dangling-device", f"cxl device {name}: {r.why(f'{CXL_DEVICES}/{name}')}",
                                         "the device disappeared while probing, or the recording lacks it"))
            continue
        canon[name] = path
    return canon


def _endpoint_memdevs(r: SysfsReader, canon: dict[str, str]) -> dict[str, str]:
    """endpointP -> memN, through the endpoint port's ``uport`` link."""
    mem_by_path = {p: n for n, p in canon.items() if _MEM_RE.match(n)}
    endpoint_mem: dict[str, str] = {}
    for name, path in canon.items():
        if _ENDPOINT_RE.match(name):
            up = r.resolve(f"{path}/uport")
            if up is not None and up in mem_by_path:
                endpoint_mem[name] = mem_by_path[up]
    return endpoint_mem


def _memdevs(r: SysfsReader, canon: dict[str, str], mem_endpoint: dict[str, str]) -> list[CxlMemdev]:
    """Every ``memN``: capacities, CPU affinity, its endpoint and ports, host bridge and PCIe links."""
    memdevs = []
    for name in sorted((n for n in canon if _MEM_RE.match(n)), key=_key):
        path = canon[name]
        serial = r.str(f"{path}/serial")
        hb, hb_node = host_bridge(r, path)
        links = path_links(r, posixpath.dirname(path))
        ep = mem_endpoint.get(name)
        parent = posixpath.basename(posixpath.dirname(path))
        memdevs.append(CxlMemdev(
            name=name,
            serial=serial,
            ram_size_bytes=r.hex(f"{path}/ram/size"),
            pmem_size_bytes=r.hex(f"{path}/pmem/size"),
            firmware_version=r.str(f"{path}/firmware_version"),
            affinity_node=_node_or_none(r.int(f"{path}/numa_node")),
            endpoint=ep,
            link=read_link(r, posixpath.dirname(path)),
            host_bridge=hb,
            host_bridge_node=hb_node,
            ports=tuple(p for p in canon[ep].split("/") if _PORT_RE.match(p)) if ep else (),
            path_links=links,
            narrowest_link=narrowest(links),
            pci_device=parent if PCI_FN_RE.match(parent) else None,
            ram_qos_class=_qos(r.int(f"{path}/ram/qos_class")),
            pmem_qos_class=_qos(r.int(f"{path}/pmem/qos_class")),
        ))
    return memdevs


def _decoder_index(name: str) -> int:
    """``decoderP.I`` → I (the caller has matched the name against ``_DEC_RE``)."""
    return int(name.rsplit(".", 1)[1])


def _qos(v: int | None) -> int | None:
    """A ``qos_class`` attribute; -1 (CXL_QOS_CLASS_INVALID / none) → None."""
    return None if v is None or v < 0 else v


def _decoders(r: SysfsReader, canon: dict[str, str], endpoint_mem: dict[str, str],
              ports: dict[str, CxlPort]) -> list[CxlDecoder]:
    """Every ``decoderP.I``, by the level of the port it sits under (root, switch, endpoint)."""
    decoders = []
    for name in sorted((n for n in canon if _DEC_RE.match(n)), key=_key):
        path = canon[name]
        port = posixpath.basename(posixpath.dirname(path))
        level = "root" if port.startswith("root") else "endpoint" if port.startswith("endpoint") else "switch"
        start = r.hex(f"{path}/start")
        common: dict[str, Any] = dict(  # CxlDecoder's fields shared by the levels, of mixed types
            name=name, level=level, port=port,
            start=None if start == ALL_ONES else start,
            size_bytes=r.hex(f"{path}/size"),
            interleave_ways=r.int(f"{path}/interleave_ways"),
            interleave_granularity_bytes=r.int(f"{path}/interleave_granularity"),
            locked=r.bool(f"{path}/locked"),
        )
        if level != "root":
            committed = ports[port].decoders_committed if port in ports else None
            common.update(target_type=r.str(f"{path}/target_type"),
                          committed=None if committed is None else _decoder_index(name) < committed)
        if level == "endpoint":
            dpa = r.hex(f"{path}/dpa_resource")
            decoders.append(CxlDecoder(**common, mode=r.str(f"{path}/mode"), region=r.str(f"{path}/region") or None,
                                       memdev=endpoint_mem.get(port),
                                       dpa_resource=None if dpa == ALL_ONES else dpa,
                                       dpa_size_bytes=r.hex(f"{path}/dpa_size")))
            continue
        tl = r.str(f"{path}/target_list")
        common.update(target_list=tl, targets=_targets(tl, ports.get(port)))
        if level == "switch":
            common.update(region=r.str(f"{path}/region") or None)
        if level == "root":
            caps = tuple(c for c in ("ram", "pmem", "type2", "type3") if r.bool(f"{path}/cap_{c}"))
            decoders.append(CxlDecoder(**common, capabilities=caps,
                                       can_create_ram_region=r.exists(f"{path}/create_ram_region"),
                                       qos_class=_qos(r.int(f"{path}/qos_class"))))
        else:
            decoders.append(CxlDecoder(**common))
    return decoders


def _targets(target_list: str | None, port: CxlPort | None) -> tuple[str | None, ...]:
    """The dport device behind each id of a decoder's ``target_list`` (``12`` → ``pci0000:0c``)."""
    if not target_list:
        return ()
    by_id = {d.id: d.device for d in port.dports} if port else {}
    out: list[str | None] = []
    for t in target_list.split(","):
        t = t.strip()
        out.append(by_id.get(int(t)) if t.isdigit() else None)
    return tuple(out)


def _with_free_extents(decoders: list[CxlDecoder], regions: list[CxlRegion]) -> list[CxlDecoder]:
    """Root decoders with ``max_available_extent_bytes``: the largest gap of the window between the
    allocated regions under it (libcxl's cxl_decoder_calc_max_available_extent: regions sorted by
    start, gaps before, between and after them)."""
    from dataclasses import replace

    out = []
    for d in decoders:
        if d.level != "root" or d.start is None or not d.size_bytes:
            out.append(d)
            continue
        used = sorted((g.resource, g.size_bytes) for g in regions
                      if g.root_decoder == d.name and g.resource is not None and g.size_bytes)
        best, cur = 0, d.start
        for start, size in used:
            best, cur = max(best, start - cur), max(cur, start + size)
        out.append(replace(d, max_available_extent_bytes=max(best, d.start + d.size_bytes - cur)))
    return out


def _regions(r: SysfsReader, canon: dict[str, str], dec_by_name: dict[str, CxlDecoder],
             warnings: list[ProbeWarning]) -> list[CxlRegion]:
    """Every ``regionN``: its targets in interleave order, the memdevs behind them, and warnings for
    targets that lead nowhere, regions still being assembled and uncommitted regions."""
    regions = []
    for name in sorted((n for n in canon if _REGION_RE.match(n)), key=_key):
        path = canon[name]
        parent = posixpath.basename(posixpath.dirname(path))
        ways = r.int(f"{path}/interleave_ways")
        res = r.hex(f"{path}/resource")
        targets = [t for t in (r.str(f"{path}/target{i}") for i in range(ways or 0)) if t]
        mems = _region_memdevs(name, targets, dec_by_name, warnings)
        if ways and len(targets) < ways:
            warnings.append(ProbeWarning("region-incomplete", f"{name} is {ways}-way but has {len(targets)} target(s) set",
                                         "the region is still being assembled (cxl create-region did not finish)"))
        committed = r.bool(f"{path}/commit")
        if committed is False:
            warnings.append(ProbeWarning("region-uncommitted", f"{name} is not committed: its memory is not usable",
                                         "commit it (cxl create-region does) or destroy it (cxl destroy-region)"))
        regions.append(CxlRegion(
            name=name,
            root_decoder=parent if _DEC_RE.match(parent) else None,
            mode=r.str(f"{path}/mode"),
            size_bytes=r.hex(f"{path}/size"),
            resource=None if res in (None, ALL_ONES) else res,
            allocated=res is not None and res != ALL_ONES,
            interleave_ways=ways,
            interleave_granularity_bytes=r.int(f"{path}/interleave_granularity"),
            targets=tuple(targets),
            memdevs=tuple(mems),
            committed=committed,
        ))
    return regions


def _region_memdevs(name: str, targets: list[str], dec_by_name: dict[str, CxlDecoder],
                    warnings: list[ProbeWarning]) -> list[str | None]:
    """The memdev behind each target decoder of region ``name`` (None, with a warning, where none)."""
    mems: list[str | None] = []
    for t in targets:
        d = dec_by_name.get(t)
        mem = d.memdev if d else None
        if mem is None:
            warnings.append(ProbeWarning(
                "region-target-missing",
                f"{name} target {t} leads to no memdev ({'decoder not found' if d is None else 'endpoint has no memdev'})",
                "the device was removed or the recording is incomplete; the region's devices are partly unknown"))
        mems.append(mem)
    return mems


_node_or_none = node_or_none


def _ports(r: SysfsReader, canon: dict[str, str]) -> list[CxlPort]:
    """Every ``rootN``/``portN``/``endpointN`` with its parent port, upstream device and the
    parent's downstream port it hangs off (``uport``/``parent_dport`` links, sysfs-bus-cxl)."""
    out = []
    for name in sorted((n for n in canon if _PORT_RE.match(n)), key=lambda n: (canon[n].count("/"), _key(n))):
        path = canon[name]
        parent = posixpath.basename(posixpath.dirname(path))
        uport = r.basename_of_link(f"{path}/uport")
        if name.startswith("root"):
            kind = "root"
        elif name.startswith("endpoint"):
            kind = "endpoint"
        else:
            # a host bridge's uport is its PCI root (pci0000:0c), or on 6.1 the ACPI0016 device itself
            kind = "host-bridge" if uport and (HOST_BRIDGE_RE.match(uport) or uport.startswith("ACPI0016:")) \
                else "switch"
        out.append(CxlPort(
            name=name, kind=kind, parent=parent if _PORT_RE.match(parent) else None, uport=uport,
            parent_dport=None if kind == "root" else r.basename_of_link(f"{path}/parent_dport"),
            depth=sum(1 for p in path.split("/")[:-1] if _PORT_RE.match(p)),
            decoders_committed=None if kind == "root" else r.int(f"{path}/decoders_committed"),
            dports=_dports(r, path),
        ))
    return out


def _dports(r: SysfsReader, path: str) -> tuple[CxlDport, ...]:
    """The ``dport<id>`` links of the port at ``path``, by id, with each target's firmware alias."""
    out = []
    for entry in r.listdir(path):
        m = _DPORT_RE.match(entry)
        if m:
            dev = r.basename_of_link(f"{path}/{entry}")
            alias = next((r.basename_of_link(f"{path}/{entry}/{k}") for k in ("physical_node", "firmware_node")
                          if r.exists(f"{path}/{entry}/{k}")), None)   # libcxl's order
            out.append(CxlDport(int(m.group(1)), dev, alias))
    return tuple(sorted(out, key=lambda d: d.id))


def _root_for(m: CxlMemdev, roots: list[CxlDecoder]) -> CxlDecoder | None:
    """The root decoder (CFMWS window) a 1-way ram region of ``m`` goes under: one that can take ram,
    whose single target is ``m``'s host bridge, with room for the device's capacity."""
    fits = [d for d in roots if m.host_bridge and d.targets == (m.host_bridge,) and "ram" in d.capabilities
            and d.can_create_ram_region is not False
            and (d.max_available_extent_bytes is None or d.max_available_extent_bytes >= (m.ram_size_bytes or 0))]
    return fits[0] if fits else None


def _unmapped_capacity(memdevs: list[CxlMemdev], decoders: list[CxlDecoder],
                       regions: list[CxlRegion]) -> list[ProbeWarning]:
    """Memdevs whose volatile capacity no region maps (e.g. 6.1 cannot create ram regions)."""
    in_region = {m for reg in regions for m in reg.memdevs if m}
    roots = [d for d in decoders if d.level == "root"]
    out = []
    for m in memdevs:
        if (m.ram_size_bytes or 0) > 0 and m.name not in in_region:
            no_ram_regions = roots and not any(d.can_create_ram_region for d in roots)
            root = _root_for(m, roots)
            if no_ram_regions:
                hint = ("this kernel has no create_ram_region on any root decoder (volatile CXL regions need "
                        "Linux ≥ 6.3); use a newer kernel, or firmware that maps the memory at boot")
            elif root is not None:
                hint = (f"create one with ndctl/cxl-cli ≥ {NDCTL_RAM_REGIONS} (76 creates no ram region and still "
                        f"exits 0): '{create_region_command(m.name, root.name)}' — then kmem onlines it as a NUMA node")
            else:
                cands = ", ".join(d.name for d in roots if "ram" in d.capabilities) or "none"
                hint = (f"no root decoder has {m.host_bridge or 'its host bridge'} as its only target with room for "
                        f"it (ram-capable windows: {cands}); an interleaved region names all its memdevs: "
                        f"'cxl create-region -t ram -d decoderX.Y -w N -m memA memB' (ndctl/cxl-cli ≥ "
                        f"{NDCTL_RAM_REGIONS})")
            out.append(ProbeWarning("memdev-unmapped",
                                    f"{m.name} has {format_bytes(m.ram_size_bytes)} of volatile capacity in no region", hint))
    return out
