"""Warnings computed once everything is read: degraded links, CXL memory left in devdax mode,
per-node meminfo that counts less memory than /proc/meminfo, and every attribute that could not be
read (permission denied, garbage) — named, not guessed."""

from __future__ import annotations

from sactool.host.sysfs import SysfsReader
from sactool.topology.model import ProbeWarning, Topology

_MAX_LISTED = 8


def late_warnings(r: SysfsReader, topo: Topology, earlier: list[ProbeWarning] = ()) -> list[ProbeWarning]:
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
    for d in topo.dax_devices:
        if d.region and d.mode == "devdax":
            out.append(ProbeWarning(
                "cxl-devdax", f"{d.name} (from {d.region}) is in devdax mode: its memory is not a NUMA node",
                f"to use it as a node: daxctl reconfigure-device --mode=system-ram {d.name}"))
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
Seen on the development VMs (shared/DESIGN.md): node0's meminfo showed ~6.7 GB of 23.5 GiB while
/proc/meminfo was right (lazy struct-page initialisation hands memory to the node late)."""


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
