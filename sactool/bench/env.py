"""Facts about the measuring host the protocol needs: last-level cache size, CPU business."""

from __future__ import annotations

import time

from sactool.host.sysfs import SysfsReader

CPU_DIR = "sys/devices/system/cpu"


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
        mult = {"K": 1024, "M": 1 << 20, "G": 1 << 30}.get(size[-1].upper(), 1)
        try:
            b = int(size.rstrip("KMGkmg")) * mult
        except ValueError:
            continue
        if best is None or (level, b) > best:
            best = (level, b)
    return best[1] if best else None


def _cpu_times(reader: SysfsReader) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for line in (reader.text("proc/stat") or "").splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and parts[0][3:].isdigit():
            vals = [int(v) for v in parts[1:]]
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
            out[int(parts[0][3:])] = (sum(vals[:8]), idle)
    return out


def busy_fraction(reader: SysfsReader, cpus, seconds: float = 0.2) -> float | None:
    """Share of time ``cpus`` were busy over ``seconds`` (``/proc/stat``), before we measure."""
    if not reader.live:
        return None
    a = _cpu_times(reader)
    time.sleep(seconds)
    b = _cpu_times(reader)
    tot = idle = 0
    for c in cpus:
        if c in a and c in b:
            tot += b[c][0] - a[c][0]
            idle += b[c][1] - a[c][1]
    return None if tot <= 0 else max(0.0, 1 - idle / tot)
