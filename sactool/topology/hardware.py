"""PCI-side dataclasses of the topology: PCIe links, GPUs, and what ``/proc/iomem`` says.

Kept apart from :mod:`sactool.topology.model` (NUMA nodes, CXL objects, the Topology itself);
every name is re-exported there and from :mod:`sactool.topology`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PcieLink:
    """Link of one PCIe function — a memdev's, a GPU's, or a port's on their path
    (``current_link_speed``/``_width``, ``max_link_*``).

    ``ceiling_bytes_per_s`` is a theoretical per-direction ceiling computed from the link
    parameters and the PCIe encoding (see :mod:`sactool.topology.link`) — not a measurement.
    """

    pci_device: str
    speed_gt_s: float | None
    width: int | None
    max_speed_gt_s: float | None
    max_width: int | None
    encoding: str | None
    efficiency: float | None
    ceiling_bytes_per_s: int | None


@dataclass(frozen=True)
class GpuDevice:
    """A GPU found on the PCI bus by class code (``/sys/bus/pci/devices/<bdf>/class``), no vendor library.

    ``cpu_node``: the CPU node (socket) it hangs off — its ``numa_node`` when that node has CPUs,
    else its host bridge's, else the node whose CPUs are its ``local_cpulist``; ``cpu_node_evidence``
    says which. ``link`` is its own; ``narrowest_link`` the lowest ceiling on its path to the root port.
    ``uuid``/``excluded``: what the NVIDIA driver prints for it (open-gpu-kernel-modules
    ``nv-procfs.c``, ``nv_procfs_read_gpu_info``: "GPU UUID: \t %s", "GPU Excluded:\t Yes|No");
    None without the driver's file.
    """

    pci_device: str                  # 0000:62:00.0
    vendor: str | None               # <bdf>/vendor, as printed (0x10de)
    vendor_name: str | None          # from GPU_VENDORS (PCI-SIG vendor ids)
    device: str | None               # <bdf>/device (0x2330)
    pci_class: str | None            # <bdf>/class (0x030200)
    class_name: str | None           # "VGA", "3D controller", "display controller"
    driver: str | None               # basename of <bdf>/driver (nvidia, amdgpu, vfio-pci…)
    numa_node: int | None            # <bdf>/numa_node (-1 → None)
    local_cpus: tuple[int, ...]      # <bdf>/local_cpulist
    host_bridge: str | None
    cpu_node: int | None
    cpu_node_evidence: str
    link: PcieLink | None
    narrowest_link: PcieLink | None
    path_links: tuple[PcieLink, ...] = ()
    uuid: str | None = None          # NVIDIA: "GPU UUID:" of /proc/driver/nvidia/gpus/<bdf>/information
    excluded: bool | None = None     # NVIDIA: "GPU Excluded:" there (NVreg_ExcludedGpus: no CUDA device)


@dataclass(frozen=True)
class IomemInfo:
    """What ``/proc/iomem`` says about memory ranges sactool classifies (read through SysfsReader).

    ``readable`` False with ``reason`` when absent, unreadable, or showing only zeros (the kernel
    hides addresses from readers without CAP_SYS_ADMIN). Ranges are [start, end] inclusive, as printed.
    """

    readable: bool
    reason: str | None
    cxl_windows: tuple[tuple[int, int, str], ...] = ()   # top-level "CXL Window N"
    soft_reserved: tuple[tuple[int, int], ...] = ()      # "Soft Reserved" (EFI specific-purpose memory)

    def to_data(self) -> dict[str, Any]:
        return {
            "readable": self.readable,
            "reason": self.reason,
            "cxl_windows": [{"name": n, "start": f"{a:#x}", "end": f"{b:#x}"} for a, b, n in self.cxl_windows],
            "soft_reserved": [{"start": f"{a:#x}", "end": f"{b:#x}"} for a, b in self.soft_reserved],
        }
