"""NUMA-placed anonymous buffers: mmap → madvise → mbind → pre-fault → move_pages verification.

One placement implementation for the whole project (bench kernels and the SGLang plug-in).
The mapping is a Python ``mmap.mmap`` so it exports the buffer protocol
(``np.frombuffer(buf.mmap, …)``, ``torch.frombuffer``).
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import threading
from dataclasses import dataclass

from sactool.errors import UsageError
from sactool.host.sysfs import SysfsReader
from sactool.memory import syscalls as sc

PAGE_SIZE = mmap.PAGESIZE
HUGE_2M = 2 << 20
HUGE_1G = 1 << 30
HUGEPAGE_CHOICES = ("thp", "none", "2MB", "1GB")


@dataclass(frozen=True)
class PlacementReport:
    """Where the pages of a buffer really are (``move_pages(2)`` with nodes=NULL).

    ``pages_checked``: 4 KiB-granular addresses asked about (all, or a stated sample);
    ``node_pages``: node id → pages found there (negative keys are errnos, e.g. -2 ENOENT =
    not present); ``verified_fraction``: share of checked pages on an expected node;
    ``hugepage_bytes``: ``AnonHugePages`` (THP) or the hugetlb size of the mapping from
    ``/proc/self/smaps``; ``page_size_bytes``: the mapping's base page size (``KernelPageSize``).
    """

    expected_nodes: tuple[int, ...]
    pages_checked: int
    pages_total: int
    node_pages: dict[int, int]
    verified_fraction: float
    hugepage_bytes: int
    page_size_bytes: int

    @property
    def hugepage_fraction(self) -> float:
        return 0.0 if not self.pages_total else min(1.0, self.hugepage_bytes / (self.pages_total * PAGE_SIZE))


def _smaps_entry(addr: int, reader: SysfsReader | None = None) -> dict[str, int]:
    """The ``/proc/self/smaps`` block of the mapping that starts at ``addr`` (sizes in bytes).

    Streamed line by line (the file is larger than the reader's 1 MiB cap in a numba process).
    """
    reader = reader or SysfsReader()
    if not reader.live:   # a recording holds no mapping of this process
        return {}
    path = reader.path("proc/self/smaps")
    out: dict[str, int] = {}
    inside = False
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                head = line.split(" ", 1)[0]
                if "-" in head and ":" not in head:
                    if inside:
                        break
                    lo, hi = head.split("-")
                    inside = int(lo, 16) <= addr < int(hi, 16)
                elif inside and ":" in line:
                    k, _, v = line.partition(":")
                    parts = v.split()
                    if parts and parts[0].isdigit():
                        out[k] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    except OSError:
        return {}
    return out


@dataclass(frozen=True)
class MappingReport:
    """Where a device-DAX buffer really is: its line of ``/proc/self/maps``. ``move_pages(2)`` cannot
    say (ENOENT for every page of a ``/dev/dax`` mapping on Linux 6.12: device memory has no NUMA page
    to report), so a devdax placement is verified as a mapping: the file mapped (``path``), the
    ``offset_bytes`` into it (the kernel's ``pgoff`` field), the mapped ``length_bytes`` from the
    buffer's address on, and the virtual start on the device's ``align_bytes``.

    ``expected_*``: what the placement asked for; ``verified``: every field as asked; ``reason``:
    what differs (empty when verified)."""

    path: str | None
    offset_bytes: int | None
    length_bytes: int | None
    start: int | None
    align_bytes: int
    expected_path: str
    expected_offset_bytes: int
    expected_length_bytes: int
    verified: bool
    reason: str = ""

    def describe(self) -> dict:
        return {"path": self.path, "expected_path": self.expected_path, "offset_bytes": self.offset_bytes, "length_bytes": self.length_bytes,
                "start": None if self.start is None else f"{self.start:#x}", "align_bytes": self.align_bytes,
                "verified": self.verified, "reason": self.reason, "source": "/proc/self/maps"}


def maps_entry(addr: int, reader: SysfsReader | None = None) -> dict | None:
    """The ``/proc/self/maps`` line of the mapping that holds ``addr``: start, end, perms, offset
    (bytes), dev, inode, path (None: anonymous); None when no mapping holds it (or not live)."""
    reader = reader or SysfsReader()
    if not reader.live:
        return None
    try:
        with open(reader.path("proc/self/maps"), encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(None, 5)
                if len(parts) < 5:
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= addr < hi:
                    return {"start": lo, "end": hi, "perms": parts[1], "offset": int(parts[2], 16),
                            "dev": parts[3], "inode": int(parts[4]), "path": parts[5] if len(parts) > 5 else None}
    except (OSError, ValueError):
        return None
    return None


def _is_char_device(path: str) -> bool:
    import stat

    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def check_mapping(addr: int, size: int, path: str, offset: int, align: int,
                  reader: SysfsReader | None = None) -> MappingReport:
    """Verify that ``[addr, addr+size)`` maps ``path`` from ``offset`` on, starting on ``align``."""
    e = maps_entry(addr, reader)
    want = os.path.realpath(path)
    if e is None:
        return MappingReport(None, None, None, None, align, want, offset, size, False,
                             f"no mapping holds {addr:#x} in /proc/self/maps")
    got_off = e["offset"] + (addr - e["start"])
    length = e["end"] - addr
    why = []
    if e["path"] is None or os.path.realpath(e["path"].removesuffix(" (deleted)")) != want:
        why.append(f"maps {e['path'] or 'anonymous memory'}, not {want}")
    if got_off != offset:
        why.append(f"at offset {got_off}, not {offset}")
    if length < size:
        why.append(f"only {length} of {size} bytes mapped from {addr:#x}")
    if align and (got_off % align or size % align):
        why.append(f"offset {got_off} or length {size} is not a multiple of the {align}-byte align")
    if align and addr % align and _is_char_device(want):   # device-DAX places its mappings on its align
        why.append(f"starts at {addr:#x}, not on the device's {align}-byte align")
    return MappingReport(e["path"], got_off, length, e["start"], align, want, offset, size, not why, "; ".join(why))


class PlacedBuffer:
    """A mapping placed on NUMA memory. Use as a context manager or call :meth:`close`.

    ``address``: virtual address (int); ``size_bytes``: mapping length; ``node``: the memory node
    asked for (None for devdax); ``policy``: "bind", "preferred", "interleave",
    "weighted_interleave" or "devdax"; ``nodes``: all nodes of the policy; ``hugepages``: what
    was asked ("thp", "none", "2MB", "1GB", or the devdax align); ``prefault_seconds``;
    ``offset_bytes``/``path``: for devdax, the device mapped and the slice's offset in it.
    """

    def __init__(self, mm: mmap.mmap, size_bytes: int, *, node, policy: str, nodes, hugepages: str,
                 page_size_bytes: int = PAGE_SIZE, prefault_seconds: float = 0.0, source: str = "anonymous",
                 notes: tuple[str, ...] = ()):
        self.mmap = mm
        self.size_bytes = size_bytes
        self.node = node
        self.policy = policy
        self.nodes = tuple(nodes)
        self.hugepages = hugepages
        self.page_size_bytes = page_size_bytes
        self.prefault_seconds = prefault_seconds
        self.source = source
        self.notes = notes
        self.offset_bytes = 0          # devdax: where the mapping starts in the device (a rank's slice)
        self.path: str | None = None   # devdax: the device (or the file standing in for it)
        c = ctypes.c_char.from_buffer(mm)
        self.address = ctypes.addressof(c)
        del c
        self._closed = False
        self.report: PlacementReport | None = None
        self.mapping: MappingReport | None = None   # devdax: the mapping verified (verify())

    def array(self, dtype="uint8"):
        """A numpy view of the whole buffer as ``dtype`` (no copy)."""
        import numpy as np

        dt = np.dtype(dtype)
        return np.frombuffer(self.mmap, dtype=dt, count=self.size_bytes // dt.itemsize)

    def verify(self, sample_pages: int | None = None) -> PlacementReport:
        """Ask the kernel which node holds each page (or ``sample_pages`` evenly spread ones); a
        device-DAX buffer (``source`` "devdax") is verified as a mapping instead
        (:func:`check_mapping`: device, offset, length, align — from ``/proc/self/maps``)."""
        import numpy as np

        if self.source == "devdax" and self.path is not None:
            m = check_mapping(self.address, self.size_bytes, self.path, self.offset_bytes, self.page_size_bytes)
            self.mapping = m
            sm = _smaps_entry(self.address)
            self.report = PlacementReport(self.nodes, 0, self.size_bytes // PAGE_SIZE, {},
                                          1.0 if m.verified else 0.0, 0,
                                          sm.get("KernelPageSize", self.page_size_bytes) or self.page_size_bytes)
            return self.report

        total = self.size_bytes // PAGE_SIZE
        if sample_pages is None or sample_pages >= total:
            idx = np.arange(total, dtype=np.uint64)
        else:
            idx = np.unique(np.linspace(0, total - 1, max(1, sample_pages)).astype(np.uint64))
        addrs = np.uint64(self.address) + idx * np.uint64(PAGE_SIZE)
        status = []
        for s in range(0, len(addrs), 1 << 18):  # bounded chunks keep the kernel's work short
            status.extend(sc.page_nodes(addrs[s:s + (1 << 18)]))
        counts: dict[int, int] = {}
        for st in status:
            counts[st] = counts.get(st, 0) + 1
        good = sum(v for k, v in counts.items() if k in self.nodes)
        sm = _smaps_entry(self.address)
        huge = sm.get("AnonHugePages", 0)
        if self.hugepages in ("2MB", "1GB") or self.source == "devdax":
            huge = sm.get("Rss", 0) if self.hugepages in ("2MB", "1GB") else huge
        self.report = PlacementReport(self.nodes, len(status), total, counts,
                                      good / len(status) if status else 0.0, huge,
                                      sm.get("KernelPageSize", self.page_size_bytes) or self.page_size_bytes)
        return self.report

    def close(self) -> None:
        """Unmap now. Views (numpy/torch arrays over the mapping) must be gone by then: views that only
        a reference cycle keeps alive are collected first; views still in use raise BufferError and
        the buffer stays open (and says how large it is) — a mapping is never kept silently."""
        if self._closed:
            return
        try:
            self.mmap.close()
        except BufferError:
            import gc

            gc.collect()   # views held only by a cycle (closures over an array) go now
            try:
                self.mmap.close()
            except BufferError:
                from sactool.units import format_bytes

                raise BufferError(f"the {format_bytes(self.size_bytes)} mapping at {self.address:#x} is still "
                                  "exported by live views (numpy/torch arrays over it): it stays mapped until "
                                  "they are dropped and close() is called again") from None
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed


    def __enter__(self) -> "PlacedBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> dict:
        """The ``buffer`` block of a bench record."""
        r = self.report
        return {
            "size_bytes": self.size_bytes, "source": self.source, "policy": self.policy,
            "memory_nodes": list(self.nodes), "hugepages_requested": self.hugepages,
            "page_size_bytes": r.page_size_bytes if r else self.page_size_bytes,
            "hugepage_bytes": r.hugepage_bytes if r else None,
            "hugepage_fraction": round(r.hugepage_fraction, 4) if r else None,
            "pages_checked": r.pages_checked if r else 0, "pages_total": r.pages_total if r else None,
            "node_pages": {(f"node{k}" if k >= 0 else f"errno{-k}"): v for k, v in r.node_pages.items()} if r else {},
            "verified_fraction": r.verified_fraction if r else None,
            "prefault_seconds": round(self.prefault_seconds, 4), "notes": list(self.notes),
            "verified_by": "mapping" if self.mapping is not None else "move_pages",
            **({"mapping": self.mapping.describe()} if self.mapping is not None else {}),
        }


def close_after(buf: PlacedBuffer, *, interrupted: bool | None = None) -> None:
    """``buf.close()`` in a ``finally``: on a clean exit a view still alive is an error (BufferError);
    while another error is on its way out, whose traceback's frames may still view the buffer, that
    error is what the caller must see — the mapping then goes with those frames (or the process).
    ``interrupted``: a signal stopped the work, which is caught and returned as finished-so-far; a
    view the interrupted frames left must not turn the save of those results into a crash (the
    process is on its way out: the mapping goes with it). None: whether a SIGINT/SIGTERM has
    arrived (:func:`sactool.errors.signalled`)."""
    import sys

    from sactool.errors import signalled

    if interrupted is None:
        interrupted = signalled()
    pending = sys.exc_info()[1]
    try:
        buf.close()
    except BufferError:
        if pending is None and not interrupted:
            raise


def _over_threads(size: int, unit: int, threads: int, cpus, fill) -> None:
    """Run ``fill(lo, hi)`` over ``[0, size)`` cut into ``threads`` chunks of whole ``unit``s, each in a
    thread pinned to one of ``cpus`` (round robin); the first error of any thread is raised."""
    cpus = list(cpus or [])
    threads = max(1, min(threads, max(1, size // unit)))
    chunk = math.ceil(size / unit / threads) * unit
    if threads == 1 and not cpus:
        fill(0, size)
        return
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            if cpus:
                os.sched_setaffinity(0, {cpus[i % len(cpus)]})  # pid 0 = this thread
            fill(i * chunk, min(size, (i + 1) * chunk))
        except BaseException as e:  # pragma: no cover - surfaced below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    started = []
    try:
        for t in ts:
            t.start()
            started.append(t)
    finally:   # even when a signal lands while starting: no thread outlives the mapping it writes
        interrupt = None
        for t in started:
            while t.is_alive():
                try:
                    t.join()
                except KeyboardInterrupt as e:
                    interrupt = e
        if interrupt is not None:
            raise interrupt
    if errors:
        raise errors[0]


def prefault(buf_mm: mmap.mmap, size: int, page: int, threads: int, cpus) -> None:
    """Write one byte in every page, split over ``threads`` threads pinned to ``cpus``."""
    import numpy as np

    view = np.frombuffer(buf_mm, dtype=np.uint8, count=size)
    try:
        def touch(lo: int, hi: int) -> None:
            view[lo:hi:PAGE_SIZE] = 1
        _over_threads(size, page, threads, cpus, touch)
    finally:
        del view


def zero_fill(buf_mm: mmap.mmap, size: int, threads: int, cpus) -> float:
    """Write zeros over the whole mapping, split over ``threads`` threads pinned to ``cpus``;
    returns the seconds it took. For shared mappings (a devdax slice) that hold what an earlier
    user left: the authors' fork zero-fills its CXL pool the same way; anonymous memory needs it not."""
    import time

    import numpy as np

    view = np.frombuffer(buf_mm, dtype=np.uint8, count=size)
    t0 = time.perf_counter()
    try:
        def zero(lo: int, hi: int) -> None:
            view[lo:hi] = 0
        _over_threads(size, HUGE_2M, threads, cpus, zero)
    finally:
        del view
    return time.perf_counter() - t0


def aligned_zeros(nbytes: int, align: int = PAGE_SIZE):
    """A zeroed ``uint8`` numpy array of ``nbytes`` whose first byte sits on a multiple of ``align``
    (a power of two; default the page). Its pages are faulted in by whichever thread writes them
    first, as ``np.zeros``'s are (a ring written by a pinned thread is local to that thread's node).

    ``np.zeros`` of a large array starts 16 B past a page (the C library's header of an mmap-backed
    ``calloc``): records copied from line-aligned sources into it are misaligned against them by
    16 B, and ``memcpy`` of a 4096 B record then ran 15-35 % slower on the development machine
    (docs/accuracy/bench.md, "The C program's own buffer"). A serving engine's staging buffer is
    page aligned (pinned host memory)."""
    import numpy as np

    if align <= 0 or align & (align - 1):
        raise ValueError(f"alignment {align} is not a power of two")
    whole = np.zeros(nbytes + align, dtype=np.uint8)
    off = -int(whole.ctypes.data) % align
    return whole[off:off + nbytes]


def _policy_nodes(node, policy, nodes, weights) -> tuple[int, list[int]]:
    if policy not in sc.POLICIES:
        raise UsageError(f"unknown placement policy {policy!r}", f"use one of: {', '.join(sc.POLICIES)}")
    if weights:
        ns = sorted(int(n) for n in weights)
        return sc.MPOL_WEIGHTED_INTERLEAVE, ns
    if nodes:
        return sc.POLICIES[policy], sorted(int(n) for n in nodes)
    if node is None:
        raise UsageError("no memory node given", "pass node=N")
    return sc.POLICIES[policy], [int(node)]
