"""Which GPU CUDA calls device ``i``: CUDA's enumeration rules applied to the GPUs probe found.

Rules (CUDA C++ Programming Guide, "CUDA Environment Variables"):

* ``CUDA_DEVICE_ORDER``: ``FASTEST_FIRST`` (the default) "enumerate[s] the available devices in
  fastest to slowest order using a simple heuristic"; ``PCI_BUS_ID`` "orders devices by PCI bus ID
  in ascending order". Only the second can be told from sysfs, so only under it is the mapping known.
* ``CUDA_VISIBLE_DEVICES``: a comma-separated sequence of integer indices (into that order) or
  UUIDs (``GPU-…``, ``MIG-…``); only the devices named are visible, "enumerated in the order of
  the sequence", and at the first invalid index it and every later entry are hidden
  (``0,2,-1,1`` shows devices 0 and 2). An empty value shows none. A UUID entry (``GPU-…``, or
  "enough digits from the beginning of the GPU UUID to uniquely identify that GPU") is matched
  against the UUID the NVIDIA driver prints for each GPU (``/proc/driver/nvidia/gpus/<bdf>/
  information``, read by probe); without that file, or for a MIG instance, the mapping is unknown
  from that entry on.
* Only NVIDIA GPUs (PCI vendor 0x10de) are CUDA devices; an AMD Instinct or Intel GPU is not,
  whatever its class. The CUDA driver enumerates only GPUs bound to it: an NVIDIA GPU whose
  ``driver`` link names another driver (``vfio-pci`` for a VM), or that the driver excludes
  ("GPU Excluded: Yes", ``NVreg_ExcludedGpus``), is no CUDA device of this host; one whose driver
  is unknown (a recording without the link) is counted.

``sactool serve`` sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for SGLang when it is unset (SGLang 0.5.23
warns without it: ``platforms/cuda.py`` ``reindex_device_id``), so the plan it checks — the socket
of each rank's GPU (``pool.gpu_local_nodes``, ``--numa-node``, ``placement: locality``) — is the
one SGLang runs. ``tune`` reads the GPUs the same way (unset counts as PCI order: serve sets it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from sactool.topology.hardware import GpuDevice

ORDER_VAR = "CUDA_DEVICE_ORDER"
VISIBLE_VAR = "CUDA_VISIBLE_DEVICES"
PCI_ORDER = "PCI_BUS_ID"
CUDA_VENDOR = "0x10de"      # NVIDIA (PCI-SIG vendor id)


def pci_key(bdf: str) -> tuple[int, ...]:
    """``0000:18:00.0`` -> (domain, bus, device, function), for PCI bus order."""
    try:
        dom, bus, rest = bdf.split(":")
        dev, fn = rest.split(".")
        return (int(dom, 16), int(bus, 16), int(dev, 16), int(fn, 16))
    except ValueError:
        return (1 << 32,)     # not a PCI address: after every real one


def is_cuda(g: GpuDevice) -> bool:
    """An NVIDIA GPU (a CUDA device when the nvidia driver has it, :func:`cuda_devices`)."""
    return (g.vendor or "").lower() == CUDA_VENDOR


def _enumerated(g: GpuDevice) -> bool:
    return (g.driver is None or g.driver == "nvidia") and not g.excluded


@dataclass(frozen=True)
class CudaDevices:
    """The CUDA devices a process started with ``environ`` sees, as far as sysfs can tell.

    ``gpus[i]`` is CUDA device ``i``; ``known`` False when the ids cannot be matched to PCI
    functions (an order other than PCI bus order, a UUID entry) — ``gpus`` then holds only what
    could be matched, and ``why`` says what could not; ``not_cuda``: GPUs of other vendors.
    """

    gpus: tuple[GpuDevice, ...]
    order: str
    visible: str | None
    known: bool
    why: str
    not_cuda: tuple[GpuDevice, ...] = ()

    def sockets(self, first: int, count: int) -> tuple[int | None, ...] | None:
        """CPU node of CUDA devices ``first .. first+count-1``; None when not all of them are known."""
        if not self.known or first + count > len(self.gpus):
            return None
        return tuple(g.cpu_node for g in self.gpus[first:first + count])

    def describe(self, first: int = 0, count: int | None = None) -> str:
        shown = self.gpus[first:] if count is None else self.gpus[first:first + count]
        body = ", ".join(f"GPU {first + i} = {g.pci_device} (node{g.cpu_node})" for i, g in enumerate(shown))
        return (body or "no CUDA device") + f" [{self.why}]"


def cuda_devices(gpus: Sequence[GpuDevice], environ: Mapping[str, str], *,
                 order_if_unset: str | None = PCI_ORDER) -> CudaDevices:
    """CUDA device ids over ``gpus`` (probe's list) under ``environ``'s CUDA_DEVICE_ORDER and
    CUDA_VISIBLE_DEVICES. ``order_if_unset``: the order a process gets when the variable is unset
    (PCI_BUS_ID where ``sactool serve`` sets it; None: CUDA's own default, FASTEST_FIRST)."""
    cuda = sorted((g for g in gpus if is_cuda(g) and _enumerated(g)), key=lambda g: pci_key(g.pci_device))
    others = tuple(g for g in gpus if not is_cuda(g))
    order = environ.get(ORDER_VAR) or order_if_unset or "FASTEST_FIRST"
    visible = environ.get(VISIBLE_VAR)
    if order != PCI_ORDER:
        return CudaDevices((), order, visible, False,
                           f"{ORDER_VAR}={order}: CUDA numbers GPUs by its speed heuristic, which sysfs cannot "
                           "reproduce; the plan assumes PCI bus order", others)
    if visible is None:
        return CudaDevices(tuple(cuda), order, None, True,
                           f"{ORDER_VAR}={PCI_ORDER}, {VISIBLE_VAR} unset: every NVIDIA GPU in PCI address order",
                           others)
    if not visible.strip():
        return CudaDevices((), order, visible, True, f"{VISIBLE_VAR} is set and empty: CUDA shows no GPU", others)
    out: list[GpuDevice] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.upper().startswith("MIG-"):
            return CudaDevices(tuple(out), order, visible, False,
                               f"{VISIBLE_VAR}={visible}: entry {entry} is a MIG instance, whose GPU sactool does "
                               "not look up; use GPU indices", others)
        if entry.upper().startswith("GPU-"):
            hits = [k for k, g in enumerate(cuda) if g.uuid and g.uuid.lower().startswith(entry.lower())]
            if len(hits) != 1:
                why = ("matches more than one GPU's UUID" if hits else
                       "cannot be matched: the NVIDIA driver's /proc/driver/nvidia/gpus/<bdf>/information gives "
                       "no UUID for every GPU" if any(g.uuid is None for g in cuda) else "matches no GPU's UUID")
                return CudaDevices(tuple(out), order, visible, False,
                                   f"{VISIBLE_VAR}={visible}: entry {entry} {why}; use indices", others)
            i = hits[0]
        else:
            try:
                i = int(entry)
            except ValueError:
                i = -1
        if not 0 <= i < len(cuda):
            return CudaDevices(tuple(out), order, visible, True,
                               f"{VISIBLE_VAR}={visible}: entry {entry!r} is not one of the {len(cuda)} NVIDIA GPU "
                               "indices, so CUDA hides it and every later entry", others)
        if cuda[i] in out:
            return CudaDevices(tuple(out), order, visible, False,
                               f"{VISIBLE_VAR}={visible}: GPU {i} is named twice, and how CUDA numbers a repeated "
                               "entry is not documented", others)
        out.append(cuda[i])
    return CudaDevices(tuple(out), order, visible, True,
                       f"{ORDER_VAR}={PCI_ORDER}, {VISIBLE_VAR}={visible}: the named GPUs of the PCI address order, "
                       "in the order named", others)
