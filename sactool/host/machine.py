"""The machine block every record carries (docs/sources.md, style §3): enough to tell two hosts apart and to
know whether a measurement was taken on the same memory layout.

Read through :class:`SysfsReader`, so a recorded tree yields the recorded machine's block
(marked ``live: false``). Cheap: no numba/numpy imports.
"""

from __future__ import annotations

import os
from typing import Any

from sactool.host.sysfs import SysfsReader, parse_cpulist
from sactool.units import node_number

NODE_DIR = "sys/devices/system/node"
TIER_DIR = "sys/devices/virtual/memory_tiering"


def _cpu_model(r: SysfsReader) -> str | None:
    text = r.text("proc/cpuinfo")
    if not text:
        return None
    for line in text.splitlines():
        if line.lower().startswith(("model name", "cpu model", "processor\t: ")) and ":" in line:
            val = line.split(":", 1)[1].strip()
            if val and not val.isdigit():
                return val
    return None


def _kernel_from_version(r: SysfsReader) -> str | None:
    """``/proc/version`` ("Linux version 6.12.95+deb12-amd64 (…") → release, for recordings
    that kept /proc/version but not /proc/sys (the QEMU captures)."""
    text = r.text("proc/version")
    if text and text.startswith("Linux version "):
        parts = text.split()
        return parts[2] if len(parts) > 2 else None
    return None


def node_tiers(r: SysfsReader) -> dict[int, int]:
    """``{node: tier}`` from ``memory_tiering/memory_tierT/nodelist``."""
    out: dict[int, int] = {}
    for name in r.listdir(TIER_DIR):
        if not name.startswith("memory_tier"):
            continue
        try:
            tier = int(name[len("memory_tier"):])
        except ValueError:
            continue
        for n in r.cpulist(f"{TIER_DIR}/{name}/nodelist") or ():
            out[n] = tier
    return out


def machine_block(r: SysfsReader | None = None) -> dict[str, Any]:
    """hostname, kernel, CPU model, CPU count, THP mode, governor, NUMA nodes (tier, CPU-less).
    ``numa_nodes[].node`` is the node's number (``2``; docs/reference/units.md)."""
    r = r or SysfsReader()
    live = r.live
    kernel = r.str("proc/sys/kernel/osrelease") or _kernel_from_version(r) or (os.uname().release if live else None)
    hostname = r.str("proc/sys/kernel/hostname") or (os.uname().nodename if live else None)
    thp = r.str("sys/kernel/mm/transparent_hugepage/enabled")
    thp_mode = None
    if thp and "[" in thp:
        thp_mode = thp[thp.index("[") + 1: thp.index("]")]
    governor = r.str("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    online = r.cpulist("sys/devices/system/cpu/online")
    tiers = node_tiers(r)
    nodes: list[dict[str, Any]] = []
    for name in r.listdir(NODE_DIR):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        nid = int(name[4:])
        cpus = r.attr(f"{NODE_DIR}/{name}/cpulist", parse_cpulist).value or ()
        nodes.append({"node": nid, "cpus": len(cpus), "cpu_less": not cpus, "tier": tiers.get(nid)})
    nodes.sort(key=lambda n: n["node"])
    return {
        "hostname": hostname,
        "live": live,
        "kernel": kernel,
        "cpu_model": _cpu_model(r),
        "cpus_online": len(online) if online else (os.cpu_count() if live else None),
        "thp": thp_mode,
        "governor": governor,
        "numa_nodes": nodes,
    }


def upgrade_machine(block: Any) -> Any:
    """A machine block written before NUMA nodes were numbers (``numa_nodes[].node: "node2"``) in
    today's form (``2``): the upgrade step every record that embeds the block runs. Anything else
    is left as it is, for the record's own checks to judge."""
    if not isinstance(block, dict) or not isinstance(block.get("numa_nodes"), list):
        return block
    nodes = []
    for n in block["numa_nodes"]:
        if isinstance(n, dict) and isinstance(n.get("node"), str) and node_number(n["node"]) is not None:
            n = {**n, "node": node_number(n["node"])}
        nodes.append(n)
    return {**block, "numa_nodes": nodes}


def machine_differences(a: Any, b: Any) -> list[str]:
    """What tells machine block ``a`` (a record's: where it was made) from ``b`` (here), in words; [] for
    the same machine as far as the blocks can tell. Identity, not settings: the host name and CPU model
    (where both are known), the online CPU count, and the NUMA layout (node numbers, CPUs per node,
    CPU-less or not). A kernel update, THP mode or governor does not make another machine."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return []
    out = []
    for key, label in (("hostname", "host"), ("cpu_model", "CPU model"), ("cpus_online", "online CPUs")):
        if a.get(key) is not None and b.get(key) is not None and a[key] != b[key]:
            out.append(f"{label} {a[key]!r} there, {b[key]!r} here")

    def layout(block: dict) -> dict[Any, tuple[Any, Any]]:
        nodes = block.get("numa_nodes")
        return {n.get("node"): (n.get("cpus"), n.get("cpu_less")) for n in nodes if isinstance(n, dict)} \
            if isinstance(nodes, list) else {}

    la, lb = layout(a), layout(b)
    if la and lb and la != lb:
        def word(v) -> str:
            return "absent" if v is None else "CPU-less" if v[1] else f"{v[0]} CPUs"
        keys = sorted(set(la) | set(lb), key=lambda k: (not isinstance(k, int), str(k) if not isinstance(k, int) else k))
        diff = [f"node{k} {word(la.get(k))} there, {word(lb.get(k))} here" for k in keys if la.get(k) != lb.get(k)]
        out.append("NUMA layout differs: " + ", ".join(diff[:4]) + (f" and {len(diff) - 4} more" if len(diff) > 4 else ""))
    return out
