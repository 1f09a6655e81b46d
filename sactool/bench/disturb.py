"""What else ran on the machine during each sample: the CPUs' busy time outside the bench's own threads.

A bench on CPU 0 beside a memory-copy loop on CPU 1 loses 10–30 % of its bandwidth (measured here,
issue 28) and its own threads never notice: they ran the whole sample. So every timed sample also
reads the machine's CPU time from ``/proc/stat`` (its aggregate ``cpu`` line: user, nice, system,
irq, softirq — busy; steal — the hypervisor ran someone else on these CPUs) before and after, and
this process's own CPU time (``time.process_time``: the bench threads and the main thread). Their
difference is the CPU time other work took during the sample. A result then carries
``other_cpu_busy``: the mean number of CPUs busy with other work (``cpus``), that as a share of the
CPUs the bench's threads did not use (``share``), and the stolen time likewise; it is flagged
``cpus_shared`` when the share reaches :data:`SHARED_MIN` — its memory bandwidth and caches were shared.

``/proc/stat`` counts in clock ticks (``USER_HZ``, 10 ms): one sample's figure is uncertain by about a
tick per CPU, so the result's figure is taken over all of its samples together.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sactool.host.sysfs import SysfsReader

SHARED_MIN = 0.10
"""Share of the other CPUs' time that other work may take before a result is flagged (policy: a tenth;
one memory-copy loop beside a one-thread bench on a 2-CPU machine is a share of ~1.0)."""

_BUSY = (0, 1, 2, 5, 6)   # user nice system [idle iowait] irq softirq; guest time is inside user
_STEAL = 7


def cpu_times(reader) -> tuple[float, float] | None:
    """(busy, stolen) CPU seconds of the whole machine since boot, from ``/proc/stat``'s ``cpu`` line; None
    when unreadable."""
    text = reader.text("proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    try:
        f = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    except ValueError:
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return sum(f[i] for i in _BUSY if i < len(f)) / hz, (f[_STEAL] / hz if len(f) > _STEAL else 0.0)


@dataclass
class Observer:
    """Start/stop around each timed sample (:func:`sactool.bench.protocol.run_protocol`'s ``observe``)."""

    reader: "SysfsReader"
    cpus_online: int | None = None

    def __post_init__(self) -> None:
        if self.cpus_online is None:
            self.cpus_online = len(self.reader.cpulist("sys/devices/system/cpu/online") or ()) or os.cpu_count()

    def start(self):
        return cpu_times(self.reader), time.process_time(), time.perf_counter()

    def stop(self, token) -> dict | None:
        """``{wall_seconds, other_cpu_seconds, steal_cpu_seconds}`` of one sample; None when unreadable."""
        t1, p1, w1 = cpu_times(self.reader), time.process_time(), time.perf_counter()
        t0, p0, w0 = token
        if t0 is None or t1 is None:
            return None
        return {"wall_seconds": round(w1 - w0, 6), "other_cpu_seconds": round(max(0.0, (t1[0] - t0[0]) - (p1 - p0)), 4),
                "steal_cpu_seconds": round(max(0.0, t1[1] - t0[1]), 4)}


def summary(samples: list, cpus_online: int | None, threads: int) -> dict | None:
    """A result's ``other_cpu_busy`` from its samples' figures (None: not observed): totals over the
    samples, so the tick resolution averages out."""
    got = [s for s in samples if s]
    wall = sum(s["wall_seconds"] for s in got)
    if not got or wall <= 0:
        return None
    cpus = sum(s["other_cpu_seconds"] for s in got) / wall
    steal = sum(s["steal_cpu_seconds"] for s in got) / wall
    others = max(1, (cpus_online or 1) - threads)
    return {"cpus": round(cpus, 3), "share": round(min(1.0, cpus / others), 3), "steal_cpus": round(steal, 3),
            "cpus_online": cpus_online, "bench_threads": threads, "samples": len(got),
            "source": "/proc/stat cpu line (busy: user+nice+system+irq+softirq) minus this process's CPU time"}


def effect(result: dict) -> str:
    return ("its latency may be overstated" if result.get("unit") == "ns"
            else "its bandwidth may be understated")


def shared_warning(result: dict, where: str = "") -> dict | None:
    """The ``cpus_shared`` warning of one result, or None."""
    from sactool.records import warning

    ob = result.get("other_cpu_busy")
    if not isinstance(ob, dict) or not isinstance(ob.get("share"), (int, float)) or ob["share"] < SHARED_MIN:
        return None
    key = result.get("key") or result.get("test") or "result"
    others = max(1, (ob.get("cpus_online") or 1) - (ob.get("bench_threads") or 0))
    steal = ob.get("steal_cpus") or 0
    return warning("cpus_shared", f"{where}{key}: while it was measured, other work kept {ob['cpus']:.2f} CPUs busy on "
                   f"average ({ob['share']:.0%} of the {others} CPU{'s' if others != 1 else ''} its threads did not use"
                   + (f"; the hypervisor also stole {steal:.2f} CPUs" if steal >= 0.05 else "")
                   + f"): memory bandwidth and caches were shared, so {effect(result)}",
                   "see what else runs (top), or rerun when the machine is idle; the record's other_cpu_busy "
                   "has the figures")
