"""What else ran on the machine during each sample: the CPUs' busy time outside the bench's own threads.

A bench on CPU 0 beside a memory-copy loop on CPU 1 loses 10–30 % of its bandwidth (measured here,
issue 28) and its own threads never notice: they ran the whole sample. So every timed sample also
reads the machine's CPU time (psutil's ``cpu_times()``: the aggregate ``cpu`` line of the kernel's
CPU statistics — user, nice, system, irq, softirq: busy; steal: the hypervisor ran someone else on
these CPUs) before and after, and
this process's own CPU time (``time.process_time``: the bench threads and the main thread). Their
difference is the CPU time other work took during the sample. A result then carries
``other_cpu_busy``: the mean number of CPUs busy with other work (``cpus``), that as a share of the
CPUs the bench's threads did not use (``share``), and the stolen time likewise; it is flagged
``cpus_shared`` when the share reaches :data:`SHARED_MIN` — its memory bandwidth and caches were shared.

The kernel counts in clock ticks (``USER_HZ``, 10 ms): one sample's figure is uncertain by about a
tick per CPU, so the result's figure is taken over all of its samples together.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from sactool.host.sysfs import SysfsReader

SHARED_MIN = 0.10
"""Share of the other CPUs' time that other work may take before a result is flagged (policy: a tenth;
one memory-copy loop beside a one-thread bench on a 2-CPU machine is a share of ~1.0)."""

def cpu_times() -> tuple[float, float]:
    """(busy, stolen) CPU seconds of the whole machine since boot: psutil's aggregate ``cpu_times()`` (the
    ``cpu`` line of ``/proc/stat``; busy = user + nice + system + irq + softirq, guest time being inside
    user). This live machine only."""
    import psutil

    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return busy, getattr(t, "steal", 0.0)


@dataclass
class Observer:
    """Start/stop around each timed sample (:func:`sactool.bench.protocol.run_protocol`'s ``observe``)."""

    reader: "SysfsReader"
    cpus_online: int | None = None
    times: Callable[[], tuple[float, float] | None] = cpu_times   # (busy, stolen) seconds; tests give their own

    def __post_init__(self) -> None:
        if self.cpus_online is None:
            self.cpus_online = len(self.reader.cpulist("sys/devices/system/cpu/online") or ()) or os.cpu_count()

    def start(self):
        return self.times(), time.process_time(), time.perf_counter()

    def stop(self, token) -> dict | None:
        """``{wall_seconds, other_cpu_seconds, steal_cpu_seconds}`` of one sample; None when unreadable."""
        t1, p1, w1 = self.times(), time.process_time(), time.perf_counter()
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
            "source": "the kernel's CPU times (psutil.cpu_times: user+nice+system+irq+softirq) minus this "
                      "process's CPU time"}


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
