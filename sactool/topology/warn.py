"""Warnings computed once everything is read: degraded links, CXL memory left in devdax mode,
per-node meminfo that counts less memory than /proc/meminfo, and every attribute that could not be
read (permission denied, garbage) — named, not guessed."""

from __future__ import annotations

from typing import Sequence

from sactool.host.sysfs import SysfsReader
from sactool.topology.hints import auto_online_policy, system_ram_steps
from sactool.topology.model import IomemInfo, ProbeWarning, Topology

_MAX_LISTED = 8


def late_warnings(r: SysfsReader, topo: Topology, earlier: Sequence[ProbeWarning] = ()) -> list[ProbeWarning]:
    out: list[ProbeWarning] = []
    for m in topo.memdevs:
        lk = m.link
        if lk is None:
            continue
        slow = lk.speed_gt_s is not None and lk.max_speed_gt_s is not None and lk.speed_gt_s < lk.max_speed_gt_s
        narrow = lk.width is not None and lk.max_width is not None and lk.width < lk.max_width
        if slow or narrow:
            out.append(ProbeWarning(
                "link-degraded",
                f"{m.name} ({lk.pci_device}) link runs at {lk.speed_gt_s} GT/s x{lk.width}, "
                f"capable of {lk.max_speed_gt_s} GT/s x{lk.max_width}",
                "check the slot, riser and BIOS link settings (lspci -vv: LnkSta vs LnkCap)"))
    out.extend(_path_narrower(topo))
    out.extend(_dax_partial(topo))
    out.extend(_not_cuda(topo))
    out.extend(gpu_link_warnings(topo.gpus))
    policy = auto_online_policy(r)
    for d in topo.dax_devices:
        if d.region and d.mode == "devdax":
            out.append(ProbeWarning(
                "cxl-devdax", f"{d.name} (from {d.region}) is in devdax mode: its memory is not a NUMA node",
                "to use it as a node: " + system_ram_steps(d.name, policy)))
    out.extend(_meminfo_short(r, topo))
    bad = sorted((p, why) for p, why in r.reasons.items()
                 if why.startswith(("permission denied", "unparsable", "unreadable")))
    already = {w.message.split(":", 1)[0] for w in [*earlier, *out]}
    bad = [(p, why) for p, why in bad if p not in already]
    for p, why in bad[:_MAX_LISTED]:
        out.append(ProbeWarning("unreadable-attribute", f"{p}: {why}",
                                "run as a user allowed to read it (some CXL attributes need root), "
                                "or check the recording" if why.startswith("permission") else
                                "the kernel printed something sactool cannot parse; value left unknown"))
    if len(bad) > _MAX_LISTED:
        out.append(ProbeWarning("unreadable-attribute", f"{len(bad) - _MAX_LISTED} more attributes unreadable",
                                "likely the same cause as the ones listed above"))
    return out


MEMINFO_SHORT_FRACTION = 0.9
"""Warn when the nodes' MemTotal adds up to less than this share of /proc/meminfo's MemTotal.
Seen on the development VMs (docs/sources.md, design facts): node0's meminfo showed ~6.7 GB of 23.5 GiB while
/proc/meminfo was right (lazy struct-page initialisation hands memory to the node late)."""


def _not_cuda(topo: Topology) -> list[ProbeWarning]:
    """GPUs of another vendor than NVIDIA are no CUDA devices (sactool.topology.cuda): one warning
    per kind of part, naming every such GPU."""
    from sactool.topology.cuda import is_cuda

    kinds: dict[str, list[str]] = {}
    for g in topo.gpus:
        if not is_cuda(g):
            kinds.setdefault(f"{g.vendor_name} {g.vendor}:{g.device}, {g.class_name}", []).append(g.pci_device)
    return [ProbeWarning("gpu-not-cuda", f"{', '.join(bdfs)} ({kind}) "
                         + ("is not a CUDA device" if len(bdfs) == 1 else "are not CUDA devices") + ": sactool serve and tune plan no SGLang rank on "
                         f"{'it' if len(bdfs) == 1 else 'them'} (SGLang HiSparse with the sactool_cxl plug-in "
                         "runs on CUDA GPUs only)", "serve on NVIDIA GPUs")
            for kind, bdfs in kinds.items()]


def gpu_link_warnings(gpus) -> list[ProbeWarning]:
    """A GPU whose host link trained below what both its ends can do (x8 in an x16 slot, Gen4 on Gen5):
    its copies to and from host memory — the KV pool's swap-in — get that share of the link's ceiling."""
    out = []
    for g in gpus:
        why = gpu_link_downgrade(g)
        if why is not None:
            out.append(ProbeWarning(
                "gpu-link-degraded", f"GPU {g.pci_device} link trained at {why}",
                "reseat the GPU or check its riser and the BIOS link settings (lspci -vv: LnkSta vs LnkCap)"))
    return out


def gpu_link_downgrade(g) -> str | None:
    """How GPU ``g``'s own link trained below both its ends (:func:`sactool.topology.link.trained_below`),
    or None."""
    from sactool.topology.link import trained_below

    links: tuple = tuple(g.path_links or ())
    own = links[0] if links and links[0].pci_device == g.pci_device else g.link
    up = links[1] if len(links) > 1 and own is links[0] else None
    return trained_below(own, up)


def _meminfo_short(r: SysfsReader, topo: Topology) -> list[ProbeWarning]:
    proc = r.kv("proc/meminfo") or {}
    total = proc.get("MemTotal")
    node_total = sum(n.mem_total_bytes or 0 for n in topo.nodes)
    if not total or not node_total or node_total >= MEMINFO_SHORT_FRACTION * total:
        return []
    from sactool.units import format_bytes

    return [ProbeWarning(
        "node-meminfo-short",
        f"the nodes' meminfo adds up to {format_bytes(node_total)} but /proc/meminfo MemTotal is "
        f"{format_bytes(total)}: per-node figures under-count (deferred struct-page initialisation)",
        "node totals and free memory shown here are the kernel's per-node figures; sactool's "
        "free-memory checks add the memory /proc/meminfo counts but no node reports")]


def iomem_info(ranges, reason: str | None) -> IomemInfo:
    """The part of ``/proc/iomem`` a record keeps: CXL windows and Soft Reserved ranges."""
    if ranges is None:
        return IomemInfo(False, reason)
    from sactool.topology.classify import _CXL_WINDOW_RE, SOFT_RESERVED

    return IomemInfo(True, None,
                     tuple((x.start, x.end, x.name) for x in ranges if x.depth == 0 and _CXL_WINDOW_RE.match(x.name)),
                     tuple((x.start, x.end) for x in ranges if x.name == SOFT_RESERVED))


def _dax_partial(topo: Topology) -> list[ProbeWarning]:
    """kmem DAX devices with some of their memory blocks not online."""
    from sactool.units import format_bytes

    out = []
    for d in topo.dax_devices:
        total, online = d.memory_blocks, d.memory_blocks_online
        if d.mode != "system-ram" or total is None or online is None or online >= total:
            continue
        node = "?" if d.target_node is None else f"node{d.target_node}"
        out.append(ProbeWarning(
            "dax-partially-online",
            f"{d.name}: {online} of {total} memory blocks ({format_bytes(d.block_size_bytes or 0)} each) are online; "
            f"{format_bytes((total - online) * (d.block_size_bytes or 0))} of it is not in {node}",
            f"online the rest (daxctl online-memory {d.name}); if that fails, dmesg says why "
            "(e.g. a memmap that could not be allocated, or unmovable pages)"))
    return out


def _path_narrower(topo: Topology) -> list[ProbeWarning]:
    """A link above the device narrower than the device's own: the device's link is not its ceiling."""
    out = []
    for m in topo.memdevs:
        own, low = m.link, m.narrowest_link
        if own and low and own.ceiling_bytes_per_s and low.ceiling_bytes_per_s and low.ceiling_bytes_per_s < own.ceiling_bytes_per_s:
            out.append(ProbeWarning(
                "link-path-narrower",
                f"{m.name}'s own link ({own.pci_device}, {own.speed_gt_s} GT/s x{own.width}) is wider than "
                f"{low.pci_device}'s on its path ({low.speed_gt_s} GT/s x{low.width}): that one is the ceiling",
                "check the switch or riser upstream of the device (lspci -vv: LnkSta)"))
    return out


def devdax_pool(topo: Topology) -> tuple[tuple[str, ...], str]:
    """Where no CXL node exists but devdax devices do (the SAC shape), tune and serve put the pool on
    the devices (devdax wins over a stand-in node): their names and the sentence saying so."""
    from sactool.units import format_bytes

    dax = [d for d in topo.dax_devices if d.mode == "devdax" and d.size_bytes]
    if not topo.verdict.stand_in or not dax:
        return (), ""
    cells = []
    for d in dax:
        cpu = topo.dax_locality(d.name).cpu_node
        cells.append(f"{d.name} ({format_bytes(d.size_bytes or 0)}, socket {'?' if cpu is None else f'node{cpu}'})")
    return tuple(d.name for d in dax), (
        f"devdax pool: {', '.join(cells)} — tune and serve place the KV pool on these devices (each rank maps its "
        f"slice); the stand-in node is only for node benches ('sactool bench --node {dax[0].name}' measures a device)")

