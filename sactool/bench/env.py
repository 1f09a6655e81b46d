"""Facts about the measuring host the protocol needs: last-level cache size, CPU business."""

from __future__ import annotations

import time

from sactool.host.sysfs import SysfsReader
from sactool.units import parse_kernel_size

CPU_DIR = "sys/devices/system/cpu"

ASSUMED_LLC_BYTES = 32 << 20
"""Where no CPU reports a cache: the footprint the gather index sets and chain checks are built for
(a 32 MiB L3, the development machines'); the record's ``buffer_rule`` says the cache was unreported."""


def llc_bytes(reader: SysfsReader, cpu: int) -> int | None:
    """Size of the highest cache level of ``cpu`` (``cpuN/cache/indexI/{level,size}``), bytes."""
    best: tuple[int, int] | None = None
    for name in reader.listdir(f"{CPU_DIR}/cpu{cpu}/cache"):
        if not name.startswith("index"):
            continue
        level = reader.int(f"{CPU_DIR}/cpu{cpu}/cache/{name}/level")
        size = reader.str(f"{CPU_DIR}/cpu{cpu}/cache/{name}/size")
        if level is None or not size:
            continue
        try:
            b = parse_kernel_size(size)
        except ValueError:
            continue
        if best is None or (level, b) > best:
            best = (level, b)
    return best[1] if best else None


def _cpu_times(reader: SysfsReader) -> dict[int, tuple[float, float]]:
    """CPU id → (total, idle + iowait) seconds, from psutil (this live machine only).

    psutil lists the online CPUs in ascending order without their ids (the kernel skips
    offline ones), so the ids come from ``sys/devices/system/cpu/online``; a mismatch gives {}.
    """
    import psutil

    times = psutil.cpu_times(percpu=True)
    online = reader.cpulist("sys/devices/system/cpu/online")
    if online is None or len(online) != len(times):
        return {}
    out: dict[int, tuple[float, float]] = {}
    for cpu, t in zip(online, times):
        busy_and_idle = (t.user + t.nice + t.system + t.idle + getattr(t, "iowait", 0.0) + getattr(t, "irq", 0.0)
                         + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0))
        out[cpu] = (busy_and_idle, t.idle + getattr(t, "iowait", 0.0))
    return out


def busy_fraction(reader: SysfsReader, cpus, seconds: float = 0.2) -> float | None:
    """Share of time ``cpus`` were busy over ``seconds`` (psutil's per-CPU times), before we measure.

    None for a recorded tree (psutil reads this machine, never a recording) or when unknown.
    """
    if not reader.live:
        return None
    a = _cpu_times(reader)
    time.sleep(seconds)
    b = _cpu_times(reader)
    tot = idle = 0.0
    for c in cpus:
        if c in a and c in b:
            tot += b[c][0] - a[c][0]
            idle += b[c][1] - a[c][1]
    return None if tot <= 0 else max(0.0, 1 - idle / tot)
