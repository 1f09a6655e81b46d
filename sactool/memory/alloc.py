"""``allocate()`` (anonymous, NUMA-placed) and ``map_devdax()`` (a /dev/daxX.Y character device)."""

from __future__ import annotations

import errno
import math
import mmap
import os
import time
from functools import reduce

from sactool.errors import CapacityError, SactoolError, TopologyError, UsageError
from sactool.host.sysfs import SysfsReader
from sactool.memory import nodes as _nodes
from sactool.memory import syscalls as sc
from sactool.memory.placed import (HUGE_1G, HUGE_2M, HUGEPAGE_CHOICES, PAGE_SIZE, PlacedBuffer, _policy_nodes,
                                   prefault)
from sactool.units import format_bytes

WI_DIR = "sys/kernel/mm/mempolicy/weighted_interleave"


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def default_prefault_cpus(topo, node: int) -> list[int]:
    """CPUs of the CPU node nearest to memory ``node`` that this process may run on."""
    allowed = os.sched_getaffinity(0)
    try:
        cpus = [c for c in topo.node(topo.nearest_cpu_node(node)).cpus if c in allowed]
    except TopologyError:
        cpus = []
    return cpus or sorted(allowed)


def _mbind_or_raise(addr: int, length: int, mode: int, nodes: list[int]) -> None:
    try:
        sc.mbind(addr, length, mode, nodes)
    except OSError as e:
        what = {errno.EINVAL: "the kernel refused the policy or node set (not allowed by this cpuset, "
                              "or the policy is not supported)",
                errno.ENOSYS: "mbind is not available", errno.EPERM: "not permitted"}.get(e.errno or 0, e.strerror or str(e))
        raise TopologyError(f"cannot bind memory to {', '.join(f'node{n}' for n in nodes)}: {what}",
                            "check the node is online and allowed (cat /proc/self/status | grep Mems_allowed)") from None


def allocate(size_bytes: int, *, node: int | None, policy: str = "bind", nodes=None, weights=None,
             hugepages: str = "thp", prefault_threads: int = 1, prefault_cpus=None, check_free: bool = True,
             verify_sample: int | None = None, reader: SysfsReader | None = None, topo=None) -> PlacedBuffer:
    """A pre-faulted anonymous buffer of ``size_bytes`` placed on NUMA memory and verified.

    ``policy``: "bind" (MPOL_BIND, strict), "preferred", "interleave" over ``nodes``;
    ``weights`` {node: weight} gives weighted interleave — native MPOL_WEIGHTED_INTERLEAVE when the
    kernel's global weights (``/sys/kernel/mm/mempolicy/weighted_interleave/nodeN``) already equal
    them, otherwise emulated with one mbind per stripe (2 MiB stripes with huge pages, 4 KiB
    without), which the buffer's notes say. ``hugepages``: "thp" (MADV_HUGEPAGE), "none"
    (MADV_NOHUGEPAGE), "2MB"/"1GB" (MAP_HUGETLB from the reserved pool). Pages are written by
    ``prefault_threads`` threads pinned to ``prefault_cpus`` (default: the CPU node nearest the
    memory node), then every page (or ``verify_sample`` pages) is checked with move_pages(2).
    ``topo``: a :class:`sactool.topology.Topology` already probed (else probed from ``reader``).
    """
    reader = reader or SysfsReader()
    if not isinstance(size_bytes, int) or size_bytes <= 0:
        raise UsageError(f"buffer size {size_bytes!r} must be a positive number of bytes", "e.g. 2GiB")
    if hugepages not in HUGEPAGE_CHOICES:
        raise UsageError(f"unknown huge-page choice {hugepages!r}", f"use one of: {', '.join(HUGEPAGE_CHOICES)}")
    mode, pnodes = _policy_nodes(node, policy, nodes, weights)
    if not reader.live:
        raise TopologyError(f"the topology comes from a recording ({reader.root}), not this system",
                            "placement binds memory on the running machine: drop --sysfs-root")
    topo = topo or _nodes.topology(reader)
    for n in pnodes:
        _nodes.check_memory_node(topo, n)
    unit = {"2MB": HUGE_2M, "1GB": HUGE_1G}.get(hugepages, PAGE_SIZE)
    size = _round_up(size_bytes, unit)
    if check_free:
        wsum = sum(weights.values()) if weights else len(pnodes)
        for n in pnodes:
            share = size * (weights[n] if weights else 1) // wsum if mode != sc.MPOL_BIND or len(pnodes) > 1 else size
            _nodes.check_fits(_nodes.free_estimate(topo, reader, n), share if mode != sc.MPOL_PREFERRED else size)
    flags = mmap.MAP_PRIVATE
    if unit != PAGE_SIZE:
        flags |= sc.MAP_HUGETLB | (sc.MAP_HUGE_2MB if unit == HUGE_2M else sc.MAP_HUGE_1GB)
    try:
        mm = mmap.mmap(-1, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        if unit != PAGE_SIZE:
            kb = unit // 1024
            raise CapacityError(f"cannot map {format_bytes(size)} of {hugepages} huge pages: {e.strerror}",
                                f"reserve them: echo N > /sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages, "
                                "or use --hugepages thp") from None
        raise CapacityError(f"cannot map {format_bytes(size)}: {e.strerror}", "use a smaller --size") from None
    notes: list[str] = []
    try:
        if hugepages in ("thp", "none"):
            try:
                mm.madvise(sc.MADV_HUGEPAGE if hugepages == "thp" else sc.MADV_NOHUGEPAGE)
            except OSError as e:
                notes.append(f"madvise({'MADV_HUGEPAGE' if hugepages == 'thp' else 'MADV_NOHUGEPAGE'}) failed: "
                             f"{e.strerror}")
        buf = PlacedBuffer(mm, size, node=node if node is not None else pnodes[0],
                           policy="weighted_interleave" if weights else policy, nodes=pnodes,
                           hugepages=hugepages, page_size_bytes=unit, notes=())
        if weights:
            _weighted(reader, buf, weights, unit if unit != PAGE_SIZE else (HUGE_2M if hugepages == "thp" else PAGE_SIZE),
                      notes)
        else:
            _mbind_or_raise(buf.address, size, mode, pnodes)
        t0 = time.perf_counter()
        cpus = list(prefault_cpus) if prefault_cpus else default_prefault_cpus(topo, pnodes[0])
        try:
            prefault(mm, size, PAGE_SIZE, prefault_threads, cpus)
        except OSError as e:
            raise TopologyError(f"cannot pin pre-fault threads to CPUs {cpus}: {e.strerror}",
                                "pass CPUs this process may use (taskset -p $$)") from None
        buf.prefault_seconds = time.perf_counter() - t0
        buf.notes = tuple(notes)
        buf.verify(verify_sample)
        return buf
    except BaseException:
        try:
            mm.close()
        except BufferError:
            pass
        raise


def _weighted(reader: SysfsReader, buf: PlacedBuffer, weights: dict, stripe: int, notes: list[str]) -> None:
    ws = {int(n): int(w) for n, w in weights.items()}
    if any(w <= 0 for w in ws.values()):
        raise UsageError(f"interleave weights must be positive integers (got {weights})", "e.g. {0: 3, 2: 1}")
    g = reduce(math.gcd, ws.values())
    ws = {n: w // g for n, w in ws.items()}
    ns = sorted(ws)
    kernel = {n: reader.int(f"{WI_DIR}/node{n}") for n in ns}
    if sc_native_ok(reader, ws, kernel):
        _mbind_or_raise(buf.address, buf.size_bytes, sc.MPOL_WEIGHTED_INTERLEAVE, ns)
        notes.append("weighted interleave: native MPOL_WEIGHTED_INTERLEAVE (kernel weights match)")
        return
    if len(set(ws.values())) == 1:
        _mbind_or_raise(buf.address, buf.size_bytes, sc.MPOL_INTERLEAVE, ns)
        notes.append("equal weights: plain MPOL_INTERLEAVE")
        return
    off, i = 0, 0
    order = [n for n in ns for _ in range(ws[n])]
    while off < buf.size_bytes:
        n = order[i % len(order)]
        length = min(stripe, buf.size_bytes - off)
        _mbind_or_raise(buf.address + off, length, sc.MPOL_BIND, [n])
        off += length
        i += 1
    notes.append(f"weighted interleave emulated: MPOL_BIND per {stripe}-byte stripe, pattern "
                 + ",".join(f"node{n}x{ws[n]}" for n in ns))


def sc_native_ok(reader: SysfsReader, ws: dict[int, int], kernel: dict[int, int | None]) -> bool:
    known = {n: v for n, v in kernel.items() if v is not None}
    if not sc.kernel_has_weighted_interleave(reader) or len(known) < len(kernel):
        return False
    g = reduce(math.gcd, known.values())
    return {n: v // g for n, v in known.items()} == ws


def map_devdax(name_or_path: str, size_bytes: int | None = None, *, offset_bytes: int = 0,
               reader: SysfsReader | None = None) -> PlacedBuffer:
    """Map a device-DAX character device (``dax0.0`` or ``/dev/dax0.0``) with its alignment.

    ``size_bytes`` (default: the whole device from ``offset_bytes`` on) is rounded up to
    ``daxX.Y/align``; ``offset_bytes`` (a rank's slice of a shared device) must be a multiple of it.
    Errors: device missing, bound to kmem (system-ram mode: use its NUMA node instead), offset not
    aligned, or the slice not inside the device.
    """
    reader = reader or SysfsReader()
    name = os.path.basename(str(name_or_path))
    if not name.startswith("dax"):
        raise UsageError(f"{name_or_path!r} is not a DAX device name", "give daxX.Y or /dev/daxX.Y")
    topo = _nodes.topology(reader)
    dev = next((d for d in topo.dax_devices if d.name == name), None)
    if dev is None:
        have = ", ".join(d.name for d in topo.dax_devices) or "none"
        raise TopologyError(f"{name} does not exist (DAX devices: {have})", "run 'sactool probe' to list DAX devices")
    if dev.mode == "system-ram":
        raise TopologyError(f"{name} is in system-ram mode (bound to kmem): its memory is NUMA node{dev.target_node}",
                            f"use --node {dev.target_node}, or 'daxctl reconfigure-device --mode=devdax {name}'")
    if dev.mode != "devdax":
        raise TopologyError(f"{name} is not bound to device_dax (driver: {dev.driver or 'none'})",
                            f"daxctl reconfigure-device --mode=devdax {name}")
    slice_size(name, dev.size_bytes or 0, dev.align_bytes or HUGE_2M, size_bytes, offset_bytes)
    if not reader.live:
        raise TopologyError(f"{name} comes from a recorded topology ({reader.root}), not this system",
                            "map DAX devices on the running machine: drop --sysfs-root")
    path = str(name_or_path) if str(name_or_path).startswith("/") else f"/dev/{name}"
    return map_shared(path, dev.size_bytes or 0, dev.align_bytes or HUGE_2M, size_bytes, offset_bytes=offset_bytes,
                      node=dev.target_node, name=name)


def slice_size(name: str, device_bytes: int, align: int, size_bytes: int | None, offset_bytes: int) -> int:
    """The mapped length of a slice: ``size_bytes`` (default: to the device's end) rounded up to
    ``align``; UsageError for an unaligned offset, CapacityError when it does not fit the device."""
    if offset_bytes < 0 or offset_bytes % align:
        raise UsageError(f"offset {offset_bytes} into {name} is not a multiple of its align {align}",
                         "slices of a DAX device start on its alignment")
    size = _round_up(size_bytes or max(device_bytes - offset_bytes, 0), align)
    if size <= 0 or offset_bytes + size > device_bytes:
        raise CapacityError(f"{name} holds {device_bytes} bytes: a slice of {size} bytes at offset {offset_bytes} "
                            f"(rounded to align {align}) does not fit", "use a smaller --size or offset")
    return size


def map_shared(path: str, device_bytes: int, align: int, size_bytes: int | None = None, *, offset_bytes: int = 0,
               node: int | None = None, name: str | None = None, note: str = "") -> PlacedBuffer:
    """``mmap(MAP_SHARED)`` of ``path`` (a ``/dev/daxX.Y``, or a file standing in for one) from
    ``offset_bytes`` for ``size_bytes`` rounded up to ``align``; the slice must lie inside the
    ``device_bytes`` of the device and the offset be aligned (device DAX refuses anything else)."""
    name = name or os.path.basename(path)
    size = slice_size(name, device_bytes, align, size_bytes, offset_bytes)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise TopologyError(f"{path} does not exist", "is the device_dax driver loaded (udev node)?") from None
    except PermissionError:
        raise TopologyError(f"{path}: permission denied", "run as a user with access to the DAX device") from None
    try:
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=offset_bytes)
    except OSError as e:
        raise SactoolError(f"cannot mmap {path} ({size} bytes at offset {offset_bytes}, align {align}): {e.strerror}",
                           "the size and offset must be multiples of the device's align") from None
    finally:
        os.close(fd)
    notes = (f"{path}, align {align} bytes, offset {offset_bytes}",) + ((note,) if note else ())
    buf = PlacedBuffer(mm, size, node=node, policy="devdax", nodes=[node] if node is not None else [],
                       hugepages=f"devdax align {align}", page_size_bytes=align, source="devdax", notes=notes)
    buf.offset_bytes = offset_bytes
    buf.path = path
    return buf
