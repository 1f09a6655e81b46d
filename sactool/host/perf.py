"""``perf_event_open(2)`` through ctypes: open a counting event of a PMU the kernel lists under
``/sys/bus/event_source/devices/<pmu>`` and read its count — no perf binary, no C extension.

Sources: perf_event_open(2); ``include/uapi/linux/perf_event.h`` (``struct perf_event_attr``, its
``PERF_ATTR_SIZE_VER1`` = 72 bytes up to ``config2``; ``PERF_FORMAT_TOTAL_TIME_ENABLED`` = 1,
``PERF_FORMAT_TOTAL_TIME_RUNNING`` = 2; the ``disabled`` flag is bit 0 of the flags word);
syscall numbers from ``arch/x86/entry/syscalls/syscall_64.tbl`` (298) and
``include/uapi/asm-generic/unistd.h`` (241, arm64 and riscv64).

A system-wide (uncore-style) event is opened with ``pid = -1`` on the CPU the PMU's ``cpumask``
names; that needs ``CAP_PERFMON`` (or root) or ``/proc/sys/kernel/perf_event_paranoid`` <= 0, and
the error says which.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

PERF_ATTR_SIZE_VER1 = 72
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0

_NR = {"x86_64": 298, "aarch64": 241, "riscv64": 241}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class PerfEventAttr(ctypes.Structure):
    """``struct perf_event_attr`` up to ``config2`` (PERF_ATTR_SIZE_VER1)."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


assert ctypes.sizeof(PerfEventAttr) == PERF_ATTR_SIZE_VER1


def why_not(e: int) -> str:
    """One line for a perf_event_open errno."""
    return {errno.EACCES: "permission denied: system-wide counters need CAP_PERFMON or root, or "
                          "kernel.perf_event_paranoid <= 0",
            errno.EPERM: "not permitted (CAP_PERFMON, or kernel.perf_event_paranoid)",
            errno.ENOENT: "the PMU does not know this event",
            errno.EINVAL: "the PMU refused the event's configuration",
            errno.ENODEV: "the PMU's device is gone",
            errno.EOPNOTSUPP: "the PMU counts only system-wide, not per task",
            errno.EBUSY: "no free counter on the PMU",
            errno.ENOSYS: "perf_event_open is not available on this architecture"}.get(e, os.strerror(e))


def open_counter(pmu_type: int, config: int, *, cpu: int, config1: int = 0, config2: int = 0, pid: int = -1) -> int:
    """A counting event's file descriptor (enabled at once); OSError with errno on failure."""
    nr = _NR.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"perf_event_open: syscall number unknown on {platform.machine()}")
    attr = PerfEventAttr(type=pmu_type, size=PERF_ATTR_SIZE_VER1, config=config, config1=config1, config2=config2,
                         read_format=PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING)
    ctypes.set_errno(0)
    fd = _libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_int(pid), ctypes.c_int(cpu),
                       ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"perf_event_open: {why_not(e)}")
    return int(fd)


def read_counter(fd: int) -> tuple[int, int, int]:
    """(count, time enabled ns, time running ns): the counter multiplexed for part of the time
    has running < enabled, and its count is scaled by the caller (as perf stat does)."""
    data = os.read(fd, 24)
    if len(data) != 24:
        raise OSError(errno.EIO, f"perf counter read returned {len(data)} bytes")
    count, enabled, running = struct.unpack("=QQQ", data)
    return count, enabled, running


__all__ = ["PerfEventAttr", "open_counter", "read_counter", "why_not", "PERF_TYPE_SOFTWARE", "PERF_COUNT_SW_CPU_CLOCK"]
