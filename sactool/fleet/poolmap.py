"""The pool map: which hosts see the same physical CXL device.

A CXL Type-3 device behind a switch is enumerated by every host it is bound to, each host naming
it its own way (``mem0`` on one, ``mem3`` on another; memdev numbering is not even stable across
boots of one host — qemu-cxl fixtures README, sac2s addendum). What identifies the device is its
serial number (``/sys/bus/cxl/devices/memX/serial``, the PCIe Device Serial Number capability,
printed ``%#llx``). So memdevs are matched across hosts by serial, and DAX devices by the serials
of the memdevs behind their region (``daxX.Y`` → region → ``targetN`` → memdev).

Works on per-host topology *records* (``Topology.to_data()``), so a saved fleet record can be
mapped again without the hosts. Pure: no MPI, no sysfs.
"""

from __future__ import annotations

from typing import Any, Sequence

from sactool import records

MATCH_RULE = ("memdevs matched by serial number (memX/serial); DAX devices by the serials of the memdevs "
              "behind their CXL region; a memdev without a usable serial (absent, unreadable or 0) is "
              "not matched")


def norm_serial(value: Any) -> str | None:
    """``0x1001`` / ``0X01001`` / ``1001`` (sysfs prints serials in hex) → ``0x1001``; None for
    absent, unparsable or zero (what devices without the DSN capability report: it identifies nothing)."""
    if value is None:
        return None
    try:
        n = int(str(value).strip(), 16)
    except ValueError:
        return None
    return f"{n:#x}" if n else None


def _regions_of(topo: dict, memdev: str) -> list[dict]:
    return [r for r in topo.get("cxl", {}).get("regions", []) if memdev in (r.get("memdevs") or [])]


def _serials_of_region(topo: dict, region: str | None) -> tuple[str, ...]:
    if not region:
        return ()
    serial = {m["name"]: norm_serial(m.get("serial")) for m in topo.get("cxl", {}).get("memdevs", [])}
    for r in topo.get("cxl", {}).get("regions", []):
        if r.get("name") == region:
            return tuple(sorted({s for m in r.get("memdevs") or [] if (s := serial.get(m))}))
    return ()


def pool_map(hosts: Sequence[tuple[str, dict]]) -> dict[str, Any]:
    """``hosts``: (host name, topology record) pairs. Returns ``memdevs`` (one entry per physical
    device: its serial, ``shared`` when more than one host sees it, and per host the memdev name,
    capacities, regions, nodes its memory became, DAX devices), ``dax_devices`` (grouped by
    backing serials), ``unmatched`` memdevs and ``warnings``."""
    devices: dict[str, dict] = {}
    unmatched: list[dict] = []
    warnings: list[dict] = []
    dax_groups: dict[tuple[str, ...], dict] = {}
    for host, topo in hosts:
        seen_here: dict[str, str] = {}
        for m in topo.get("cxl", {}).get("memdevs", []):
            s = norm_serial(m.get("serial"))
            if s is None:
                unmatched.append({"host": host, "memdev": m.get("name"),
                                  "reason": f"serial {m.get('serial')!r} identifies no device"})
                continue
            if s in seen_here:
                warnings.append(records.warning("duplicate_serial",
                                                 f"{host}: {seen_here[s]} and {m.get('name')} report the same serial {s}",
                                 "emulated devices (QEMU sn=) or a firmware bug: matching by serial "
                                                 "cannot tell them apart"))
            seen_here[s] = m.get("name")
            regs = _regions_of(topo, m.get("name"))
            reg_names = [r.get("name") for r in regs]
            daxes = [d for d in topo.get("dax_devices", []) if d.get("region") in reg_names]
            nodes = sorted({d["target_node"] for d in daxes if d.get("mode") == "system-ram"
                            and d.get("target_node") is not None})
            ram, pmem = m.get("ram_size_bytes"), m.get("pmem_size_bytes")
            entry = {"host": host, "memdev": m.get("name"), "ram_size_bytes": ram, "pmem_size_bytes": pmem,
                     "capacity_bytes": (ram or 0) + (pmem or 0) or None,
                     "regions": [{"region": r.get("name"), "mode": r.get("mode"), "size_bytes": r.get("size_bytes"),
                                  "interleave_ways": r.get("interleave_ways")} for r in regs],
                     "nodes": list(nodes), "dax_devices": [d.get("name") for d in daxes]}
            dev = devices.setdefault(s, {"serial": s, "hosts": []})
            dev["hosts"].append(entry)
        for d in topo.get("dax_devices", []):
            serials = _serials_of_region(topo, d.get("region"))
            if not serials:
                continue
            g = dax_groups.setdefault(serials, {"memdev_serials": list(serials), "hosts": []})
            g["hosts"].append({"host": host, "dax": d.get("name"), "mode": d.get("mode"),
                               "size_bytes": d.get("size_bytes"), "target_node": d.get("target_node")})
    out_devs = []
    for s in sorted(devices, key=lambda x: int(x, 16)):
        dev = devices[s]
        names = sorted({h["host"] for h in dev["hosts"]})
        caps = sorted({h["capacity_bytes"] for h in dev["hosts"] if h["capacity_bytes"]})
        dev.update({"shared": len(names) > 1, "host_names": names})
        if len(caps) > 1:
            warnings.append(records.warning("capacity_differs",
                                             f"device {s} shows different capacities on its hosts "
                                        f"({', '.join(str(c) for c in caps)} bytes)",
                             "the hosts may see different partitions of it (check the switch's binding)"))
        out_devs.append(dev)
    out_dax = []
    for key in sorted(dax_groups):
        g = dax_groups[key]
        names = sorted({h["host"] for h in g["hosts"]})
        g.update({"shared": len(names) > 1, "host_names": names})
        out_dax.append(g)
    return {"match_rule": MATCH_RULE, "hosts": [h for h, _ in hosts], "memdevs": out_devs,
            "dax_devices": out_dax, "unmatched": unmatched, "warnings": warnings}


def shared_devices(pmap: dict[str, Any]) -> list[dict]:
    """The memdev entries of ``pmap`` that more than one host sees."""
    return [d for d in pmap.get("memdevs", []) if d.get("shared")]


__all__ = ["pool_map", "shared_devices", "norm_serial", "MATCH_RULE"]
