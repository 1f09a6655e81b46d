"""Traffic counters the kernel exposes under ``/sys/bus/event_source/devices``: which exist, which
sactool reads, and why the others are not read.

**cxl_pmu** (``drivers/perf/cxl_pmu.c``, Documentation/admin-guide/perf/cxl.rst): a CXL device with
a CPMU capability gets a PMU ``cxl_pmu_mem<X>.<Y>`` whose device parent is the CXL bus device
``pmu_mem<X>.<Y>``, a child of the memdev's PCI function — so the memdev is the ``mem<N>`` beside it
under that function (the kernel document says the id itself carries no meaning). Its ``events/``
files read ``config=<vid<<48 | gid<<32 | mask>`` (format ``mask`` config:0-31, ``gid`` 32-47,
``vid`` 48-63); an event the device cannot count is hidden. Counted here:

* ``s2m_drs_memdata`` (group 0x25 S2M DRS, bit 0): MemData responses — read data the device
  returns to the host, one 64-byte cache line each (CXL 3.0 §3.3.9 S2M DRS);
* ``m2s_rwd_memwr`` (group 0x21 M2S RwD, bit 1): MemWr requests with data — one 64-byte line each.

Bytes per second are those counts × 64 over the interval, set beside probe's link ceiling of the
memdev (a computed per-direction ceiling, not a measurement). The events are system-wide: they are
opened with ``pid = -1`` on the CPU of the PMU's ``cpumask`` (:mod:`sactool.host.perf`).

**Intel uncore CXL PMUs** (``uncore_cxlcm_<n>``, ``uncore_cxldp_<n>`` on Sapphire Rapids and later):
listed, not read — their sysfs carries formats but no named events; the event codes live in perf's
JSON event lists, which sactool does not carry. **Memory-controller PMUs** (``uncore_imc_<n>``,
``amd_umc_<n>``) count DRAM channels, not the CXL links: listed, not read.
Everything absent says so (``sources`` in the record), never a number made up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

EVENT_SOURCE = "sys/bus/event_source/devices"
LINE_BYTES = 64
"""Bytes one CXL.mem data message carries (a cache line; CXL 3.0 §3.3, 68B/256B flit data slots)."""

CXL_EVENTS = {"read": "s2m_drs_memdata", "write": "m2s_rwd_memwr"}
"""Direction → the cxl_pmu event counted (see the module docstring)."""

_CXL_PMU = re.compile(r"^cxl_pmu_mem(\d+)\.(\d+)$")
_UNCORE_CXL = re.compile(r"^uncore_(cxlcm|cxldp)_\d+$")
_MEMCTL = re.compile(r"^(uncore_imc(_free_running)?_\d+|amd_umc_\d+)$")


@dataclass(frozen=True)
class PmuEvent:
    """One event of a PMU: its name, the config word (``events/<name>``), None when absent."""

    name: str
    config: int | None
    reason: str = ""


@dataclass(frozen=True)
class Pmu:
    """One PMU under ``/sys/bus/event_source/devices``.

    ``kind``: cxl_pmu | uncore_cxl | memory_controller; ``read``: whether sactool counts it;
    ``memdev``: the CXL memdev (cxl_pmu: the ``mem<N>`` beside its parent under the PCI function);
    ``type``: ``<pmu>/type`` (perf_event_attr.type); ``cpu``: first CPU of ``<pmu>/cpumask``."""

    name: str
    kind: str
    read: bool
    reason: str
    type: int | None = None
    cpu: int | None = None
    memdev: str | None = None
    pci_device: str | None = None
    events: tuple[PmuEvent, ...] = field(default_factory=tuple)

    def event(self, name: str) -> PmuEvent | None:
        return next((e for e in self.events if e.name == name), None)


def parse_event(text: str) -> int:
    """``config=0x1e98002500000001`` (cxl_pmu's events/ form) → the config word."""
    terms = dict(t.split("=", 1) for t in text.strip().split(",") if "=" in t)
    if "config" not in terms:
        raise ValueError(f"no config= term in {text.strip()[:60]!r}")
    return int(terms["config"], 0)


def _cxl_pmu(reader: Any, name: str) -> Pmu:
    base = f"{EVENT_SOURCE}/{name}"
    where = reader.resolve(base)
    pci = memdev = None
    if where is not None:
        parts = where.split("/")
        if len(parts) >= 3:   # …/<pci function>/pmu_memX.Y/cxl_pmu_memX.Y
            fn_dir = "/".join(parts[:-2])
            pci = parts[-3]
            memdev = next((e for e in reader.listdir(fn_dir) if re.fullmatch(r"mem\d+", e)), None)
    ptype = reader.int(f"{base}/type")
    cpus = reader.cpulist(f"{base}/cpumask")
    events = []
    for ev in CXL_EVENTS.values():
        rel = f"{base}/events/{ev}"
        text = reader.text(rel)
        if text is None:
            events.append(PmuEvent(ev, None, "the device does not count it (the driver hides events its CPMU lacks)"
                                   if reader.why(rel) == "missing" else f"{rel}: {reader.why(rel)}"))
            continue
        try:
            events.append(PmuEvent(ev, parse_event(text)))
        except ValueError as e:
            events.append(PmuEvent(ev, None, f"{rel}: unparsable ({e})"))
    problems = []
    if ptype is None:
        problems.append(f"no type ({reader.why(base + '/type')})")
    if not cpus:
        problems.append("no cpumask CPU")
    if memdev is None:
        problems.append("no memdev beside its parent device")
    if all(e.config is None for e in events):
        problems.append("neither " + " nor ".join(CXL_EVENTS.values()) + " is offered")
    ok = not problems
    return Pmu(name, "cxl_pmu", ok, "counted: " + ", ".join(f"{d} {e}" for d, e in CXL_EVENTS.items()) if ok
               else "; ".join(problems), ptype, cpus[0] if cpus else None, memdev, pci, tuple(events))


def discover(reader: Any) -> tuple[list[Pmu], str]:
    """(the PMUs that bear on the pool, a line saying what is absent)."""
    names = reader.listdir(EVENT_SOURCE)
    out: list[Pmu] = []
    for n in names:
        if _CXL_PMU.match(n):
            out.append(_cxl_pmu(reader, n))
        elif _UNCORE_CXL.match(n):
            out.append(Pmu(n, "uncore_cxl", False, "listed, not read: the kernel names no events for it in sysfs "
                           "(their codes are in perf's JSON event lists, which sactool does not carry)",
                           reader.int(f"{EVENT_SOURCE}/{n}/type")))
        elif _MEMCTL.match(n):
            out.append(Pmu(n, "memory_controller", False, "listed, not read: it counts DRAM channels, not CXL links",
                           reader.int(f"{EVENT_SOURCE}/{n}/type")))
    absent = []
    if not any(p.kind == "cxl_pmu" for p in out):
        absent.append("no cxl_pmu PMU (cxl_pmu_mem<X>.<Y>): the kernel registers one only for a CXL device with a "
                      "CPMU capability, with the cxl_pmu driver loaded")
    if not any(p.kind == "uncore_cxl" for p in out):
        absent.append("no uncore CXL PMU (uncore_cxlcm/uncore_cxldp: Intel Sapphire Rapids or later with the "
                      "uncore driver)")
    if not names:
        why = reader.why(EVENT_SOURCE) or "empty"
        absent = [f"no {'/' + EVENT_SOURCE}: {why}"]
    return out, "; ".join(absent)


__all__ = ["CXL_EVENTS", "LINE_BYTES", "Pmu", "PmuEvent", "discover", "parse_event"]
