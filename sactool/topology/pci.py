"""A PCI device's place in the PCI tree, read from its canonical sysfs path.

``sys/devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/mem1``: ``pci0000:0c`` is the host bridge
(the PCI root: one per CXL host bridge, one or more per socket), ``0000:0c:00.0`` its root port,
``0000:0d:00.0`` the device; switches add an upstream and a downstream port per level. Every PCIe
function on the way reports the link it sits on (``current_link_speed``/``_width``); the
narrowest of them bounds what the device can move (Documentation/ABI/testing/sysfs-bus-pci).
"""

from __future__ import annotations

import re

from sactool.host.sysfs import SysfsReader
from sactool.topology.link import read_link
from sactool.topology.hardware import PcieLink

HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
PCI_FN_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def node_or_none(v: int | None) -> int | None:
    """``numa_node`` of -1 (no affinity, NUMA_NO_NODE) → None."""
    return None if v is None or v < 0 else v


def functions(path: str) -> list[str]:
    """PCI function directories on ``path`` from the root port down (canonical, root-relative)."""
    parts = path.split("/")
    out = []
    for i, p in enumerate(parts):
        if PCI_FN_RE.match(p):
            out.append("/".join(parts[:i + 1]))
    return out


def host_bridge(r: SysfsReader, path: str) -> tuple[str | None, int | None]:
    """(host bridge name, its NUMA node) for a device at canonical ``path``.

    The host bridge directory has no ``numa_node`` of its own on 6.12; its PCI functions inherit
    the bridge's node (ACPI _PXM), so the root port's ``numa_node`` is read when the bridge has none.
    """
    parts = path.split("/")
    idx = next((i for i, p in enumerate(parts) if HOST_BRIDGE_RE.match(p)), None)
    if idx is None:
        return None, None
    hb = "/".join(parts[:idx + 1])
    node = r.int(f"{hb}/numa_node") if r.exists(f"{hb}/numa_node") else None
    if node is None and idx + 1 < len(parts) and PCI_FN_RE.match(parts[idx + 1]):
        node = r.int(f"{hb}/{parts[idx + 1]}/numa_node")
    return parts[idx], node_or_none(node)


def path_links(r: SysfsReader, path: str) -> tuple[PcieLink, ...]:
    """The link of every PCIe function from the device at ``path`` up to its root port
    (device first). Both ends of one link report it, so each physical link may appear twice."""
    out = []
    for d in reversed(functions(path)):
        lk = read_link(r, d)
        if lk is not None:
            out.append(lk)
    return tuple(out)


def narrowest(links: tuple[PcieLink, ...]) -> PcieLink | None:
    """The link with the lowest per-direction ceiling (the path's real limit); None when no link's
    ceiling is known. Ties go to the one nearest the device."""
    known = [lk for lk in links if lk.ceiling_bytes_per_s]
    return min(known, key=lambda lk: lk.ceiling_bytes_per_s or 0) if known else None
