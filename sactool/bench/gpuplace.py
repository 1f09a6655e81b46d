"""The host side of ``bench gpu-gather``: find the GPU, place the pool buffer, map it for the GPU,
and the link ceiling of the path between them.

* **GPU.** :func:`gpu_runtime` imports ``numba.cuda`` and refuses (exit 3, one line) when no
  CUDA GPU can be used. Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) it returns the
  simulator, and everything downstream says the figures are simulated.
* **Placement.** As ``sactool bench`` does it: ``allocate()`` (mbind, pre-fault, move_pages
  verification) for a NUMA node, ``map_devdax()`` for a DAX device. ``placement="best-effort"``
  copes with kernels that lack the NUMA syscalls (gVisor): when binding or verifying fails, the
  buffer is pre-faulted by threads on the node's CPUs (first touch), verified where move_pages
  works, and the record says exactly which of these happened.
* **Registration.** The buffer is page-locked and mapped into the GPU's address space with
  ``cuMemHostRegister(…, CU_MEMHOSTREGISTER_DEVICEMAP)`` through numba's ``cuda.mapped`` (its
  ``mempin(…, mapped=True)``) — what SGLang's ``alloc_with_host_register`` does with
  ``cudaHostRegister`` for the HiSparse host pool (docs/sources.md, SGLang §3.4).
* **Ceiling.** The GPU's PCIe link (``/sys/bus/pci/devices/<bdf>/current_link_*``) and, for a
  CXL node or device, the links of the memdevs behind it (what ``sactool probe`` reports), each
  a theoretical per-direction figure from :mod:`sactool.topology.link`; the path's ceiling is the
  smallest. Never a measurement.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass

from sactool.errors import SactoolError, TopologyError, UsageError
from sactool.host.sysfs import SysfsReader
from sactool.topology.records import CxlMemdev

PLACEMENTS = ("strict", "best-effort")


def simulated() -> bool:
    """True when numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM``, read by numba at import)."""
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)


def gpu_runtime():
    """``numba.cuda`` when a CUDA GPU (or the simulator) can be used; TopologyError (one line) otherwise."""
    try:
        from numba import cuda
    except ImportError as e:
        raise TopologyError(f"no CUDA support: numba.cuda cannot be imported ({e})",
                            "bench gpu-gather needs an NVIDIA GPU, its driver and numba-cuda: pip install "
                            "'sactool[gpu]'") from None
    if simulated():
        return cuda
    try:
        ok = cuda.is_available()
    except Exception as e:  # the driver can fail in many ways; say which
        ok, why = False, f"{type(e).__name__}: {e}"
    else:
        why = "no CUDA driver or no GPU found"
    if not ok:
        raise TopologyError(f"no CUDA GPU available ({why}): bench gpu-gather needs an NVIDIA GPU with its driver",
                            "run it on the GPU machine (with numba-cuda: pip install 'sactool[gpu]'), or try it here "
                            "in numba's CUDA simulator: NUMBA_ENABLE_CUDASIM=1 sactool bench gpu-gather --preset fast")
    return cuda


@dataclass(frozen=True)
class GpuInfo:
    """The GPU measured. ``pci_bus_id``: ``dddd:bb:dd.0`` (from the CUDA device attributes);
    ``l2_bytes``: CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE; ``numa_node``: the PCI device's
    ``numa_node`` in sysfs (None when unreadable or -1); ``cpu_node``: its socket by probe's rule
    (:func:`sactool.topology.gpus.pci_socket`: numa_node, else host bridge, else local_cpulist),
    with ``cpu_node_evidence``; ``implementation``: "NVIDIA" (numba-cuda)
    or "Built-in" (numba's own target)."""

    index: int
    name: str
    compute_capability: tuple[int, int] | None
    sm_count: int | None
    l2_bytes: int | None
    pci_bus_id: str | None
    numa_node: int | None
    simulator: bool
    implementation: str
    driver_version: int | None
    cpu_node: int | None = None
    cpu_node_evidence: str | None = None

    def to_data(self) -> dict:
        return {"index": self.index, "name": self.name,
                "compute_capability": list(self.compute_capability) if self.compute_capability else None,
                "sm_count": self.sm_count, "l2_bytes": self.l2_bytes, "pci_bus_id": self.pci_bus_id,
                "numa_node": self.numa_node,
                "cpu_node": self.cpu_node, "cpu_node_evidence": self.cpu_node_evidence,
                "simulator": self.simulator, "numba_cuda": self.implementation,
                "driver_version": self.driver_version}


def select_gpu(cuda, index: int, reader: SysfsReader, nodes=()) -> GpuInfo:
    """Make GPU ``index`` current and describe it (``nodes``: the probed NUMA nodes, for its socket)."""
    impl = str(getattr(cuda, "implementation", "Built-in"))
    if simulated():
        if index != 0:
            raise UsageError(f"--gpu {index}: the CUDA simulator has one GPU", "use --gpu 0")
        return GpuInfo(0, "numba CUDA simulator (not a GPU)", None, None, None, None, None, True, impl, None)
    n = len(cuda.gpus)
    if index < 0 or index >= n:
        raise UsageError(f"--gpu {index} does not exist ({n} GPU{'s' if n != 1 else ''} visible)",
                         f"use --gpu 0…{n - 1}, or check CUDA_VISIBLE_DEVICES")
    cuda.select_device(index)
    dev = cuda.get_current_device()

    def attr(name):
        try:
            return int(getattr(dev, name))
        except Exception:
            return None

    dom, bus, slot = attr("PCI_DOMAIN_ID"), attr("PCI_BUS_ID"), attr("PCI_DEVICE_ID")
    bdf = f"{dom:04x}:{bus:02x}:{slot:02x}.0" if None not in (dom, bus, slot) else None
    node = reader.int(f"sys/bus/pci/devices/{bdf}/numa_node") if bdf else None
    from sactool.topology.gpus import pci_socket

    cpu, why = pci_socket(reader, bdf, nodes) if bdf else (None, "no PCI address from the CUDA driver")
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    try:
        major, minor = cuda.cudadrv.driver.driver.get_version()
        drv = int(major) * 1000 + int(minor) * 10  # CUDA's own encoding (12040 = 12.4)
    except Exception:
        drv = None
    return GpuInfo(index, name, tuple(dev.compute_capability), attr("MULTIPROCESSOR_COUNT"),
                   attr("L2_CACHE_SIZE"), bdf, node if node is not None and node >= 0 else None, False, impl, drv,
                   cpu, why)


# ---- link ceiling ----------------------------------------------------------------------------
def path_ceiling(gpu: GpuInfo, topo, memory_node: int | None, dax: str | None, reader: SysfsReader) -> dict:
    """Theoretical per-direction ceiling of host memory → GPU: min(GPU PCIe link, sum of the CXL
    memdev links behind the memory), with each part and why a part is missing."""
    from sactool.topology.link import read_link
    from sactool.records import to_data

    parts: dict = {"gpu_link": None, "memory_links": [], "ceiling_bytes_per_s": None, "limited_by": None,
                   "kind": "theoretical link ceiling (PCIe encoding × lanes × rate), not a measurement",
                   "notes": []}
    link = read_link(reader, f"sys/bus/pci/devices/{gpu.pci_bus_id}") if gpu.pci_bus_id else None
    if link is not None:
        parts["gpu_link"] = to_data(link)
    else:
        parts["notes"].append("GPU PCIe link not readable" + (" (simulator)" if gpu.simulator else
                                                             f" at /sys/bus/pci/devices/{gpu.pci_bus_id}"))
    memdevs: tuple[CxlMemdev, ...] = ()
    if topo is not None:
        if dax:
            dev = next((d for d in topo.dax_devices if d.name == dax.rsplit("/", 1)[-1]), None)
            reg = topo.region(dev.region) if dev is not None and dev.region else None
            memdevs = tuple(m for m in topo.memdevs if reg is not None and m.name in reg.memdevs)
        elif memory_node is not None and memory_node in topo.node_ids:
            memdevs = topo.memdevs_of_node(memory_node)
    mem_ceiling = None
    for m in memdevs:
        parts["memory_links"].append({"memdev": m.name, "link": to_data(m.link) if m.link else None})
    got = [m.link.ceiling_bytes_per_s for m in memdevs if m.link and m.link.ceiling_bytes_per_s]
    if memdevs and len(got) == len(memdevs):
        mem_ceiling = sum(got)  # an interleaved region reads from all its memdevs at once
    elif memdevs:
        parts["notes"].append("a CXL memdev's link is not readable: the memory side of the path is unknown")
    elif topo is not None:
        parts["notes"].append("no CXL memdev behind this memory (DRAM or unknown): the GPU link is the path")
    gl = link.ceiling_bytes_per_s if link else None
    cands = [(v, k) for v, k in ((gl, "gpu_link"), (mem_ceiling, "memory_links")) if v]
    if cands:  # the path is no faster than any part of it that is known
        v, k = min(cands)
        parts["ceiling_bytes_per_s"], parts["limited_by"] = int(v), k
        if gl is None:
            parts["notes"].append("GPU link unknown: the ceiling is the memory side's alone")
    return parts


# ---- placement --------------------------------------------------------------------------------
def _syscall_missing(e: BaseException) -> str | None:
    """Why a placement step failed for want of the kernel's NUMA support (else None)."""
    text = getattr(e, "message", None) or str(e)
    if isinstance(e, OSError) and e.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
        return f"{os.strerror(e.errno)} ({text})"
    if isinstance(e, TopologyError) and ("cannot bind memory" in text or "no NUMA node" in text
                                         or "mbind" in text):
        return text
    return None


def place(size: int, *, node: int | None, dax: str | None, cpus, topo, reader: SysfsReader,
          placement: str = "strict", hugepages: str = "thp"):
    """(buffer, placement block). ``strict``: bench's own placement or its error. ``best-effort``:
    when the NUMA syscalls or files are missing, a first-touch buffer, verified if possible."""
    from sactool.memory import allocate, map_devdax
    from sactool.memory.placed import PAGE_SIZE, PlacedBuffer, prefault

    if placement not in PLACEMENTS:
        raise UsageError(f"unknown placement {placement!r}", f"use one of: {', '.join(PLACEMENTS)}")
    if dax:
        buf = map_devdax(dax, size, reader=reader)
        try:
            prefault(buf.mmap, buf.size_bytes, PAGE_SIZE, len(cpus), cpus)
            buf.verify(4096)
        except BaseException:
            buf.close()
            raise
        return buf, {"method": "devdax", "verified": buf.report is not None, "notes": []}
    why: str | None
    if node is None or topo is None:
        if placement == "strict":
            raise TopologyError("no NUMA memory node to place the buffer on (the topology is unreadable)",
                                "pass --node N, or --placement best-effort to measure first-touch memory")
        why = "no NUMA node known (topology unreadable)" if topo is None else "no memory node given"
    else:
        try:
            buf = allocate(size, node=node, hugepages=hugepages, prefault_threads=len(cpus), prefault_cpus=cpus,
                           topo=topo, reader=reader)
            return buf, {"method": "mbind", "verified": True, "notes": []}
        except (TopologyError, OSError) as e:
            why = _syscall_missing(e)
            if placement == "strict" or why is None:
                if why is not None and isinstance(e, TopologyError):
                    raise TopologyError(e.message, (e.hint or "") + "; or pass --placement best-effort to measure "
                                        "first-touch memory and say so in the record") from None
                raise
    notes = [f"bench placement (mbind + move_pages) not possible: {why}"]
    mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        if hugepages == "thp":
            try:
                mm.madvise(14)  # MADV_HUGEPAGE
            except (OSError, AttributeError) as e:
                notes.append(f"madvise(MADV_HUGEPAGE) failed: {e}")
        t0 = time.perf_counter()
        try:
            prefault(mm, size, PAGE_SIZE, len(cpus), cpus)
        except OSError as e:  # sched_setaffinity can be missing too
            notes.append(f"pre-fault threads not pinned ({e.strerror}); pages faulted by one unpinned thread")
            prefault(mm, size, PAGE_SIZE, 1, [])
        buf = PlacedBuffer(mm, size, node=node, policy="first-touch", nodes=[node] if node is not None else [],
                           hugepages=hugepages, prefault_seconds=time.perf_counter() - t0, notes=tuple(notes))
    except BaseException:
        mm.close()
        raise
    verified = False
    try:
        if node is None:
            raise OSError(errno.EINVAL, "no node to check the pages against")
        report = buf.verify(4096)
        verified = True
        notes.append(f"move_pages: {report.verified_fraction:.1%} of sampled pages on node{node}")
    except (OSError, SactoolError) as e:
        notes.append(f"move_pages unavailable ({e}): placement not verified")
    buf.notes = tuple(notes)
    return buf, {"method": "first-touch", "verified": verified, "notes": notes}


@contextmanager
def registered(cuda, host_u8, *, fallback: bool = False):
    """The host array mapped into the GPU: ``cuMemHostRegister(DEVICEMAP)`` via ``cuda.mapped``;
    yields ``(device array, host array, registration block)``. The simulator runs kernels on the
    host, so there the host array itself is passed and the block says so.

    ``fallback`` (best-effort placement): when registering the placed buffer fails (a sandbox's
    GPU proxy may refuse foreign memory), the driver allocates the pinned, mapped buffer itself
    (``cuMemHostAlloc(DEVICEMAP)``, numba ``cuda.mapped_array``); that buffer's placement is the
    driver's, and the block says so. The caller writes the buffer's contents after this."""
    if simulated():
        yield host_u8, host_u8, {"method": "simulator: host array passed to the simulated kernel (nothing registered)",
                                 "seconds": 0.0, "placed_buffer": True}
        return
    t0 = time.perf_counter()
    try:
        cm = cuda.mapped(host_u8)
        dev = cm.__enter__()
    except Exception as e:
        first = f"cuMemHostRegister DEVICEMAP of {host_u8.nbytes} bytes failed: {type(e).__name__}: {e}"
        if not fallback:
            raise TopologyError(f"cannot register the buffer with the GPU ({first})",
                                "check the locked-memory limit (ulimit -l) and, for a DAX device, that the driver "
                                "accepts it; or pass --placement best-effort to let the driver allocate it") from None
        try:
            import numpy as np

            mapped = cuda.mapped_array(host_u8.nbytes, dtype=host_u8.dtype)
            dev = cuda.as_cuda_array(mapped)
            host = np.asarray(mapped)  # a plain ndarray on the same pinned pages
        except Exception as e2:
            raise TopologyError(f"cannot map host memory for the GPU ({first}; cuMemHostAlloc fallback: "
                                f"{type(e2).__name__}: {e2})", "check the GPU driver and numba-cuda") from None
        yield dev, host, {"method": "cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP) via numba cuda.mapped_array: "
                          "the placed buffer could not be registered, the driver's own allocation was measured "
                          "(its NUMA placement is the driver's, not verified)", "registration_error": first,
                          "seconds": round(time.perf_counter() - t0, 4), "placed_buffer": False}
        return
    secs = time.perf_counter() - t0
    try:
        yield dev, host_u8, {"method": "cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP) via numba cuda.mapped",
                             "seconds": round(secs, 4), "placed_buffer": True}
    finally:
        cm.__exit__(None, None, None)
