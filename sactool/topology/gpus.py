"""GPUs from ``/sys/bus/pci/devices`` by PCI class code — no vendor library (no NVML, no ROCm).

Class codes (PCI Code and ID Assignment Specification, base class 03h "display controller"):
0x0300 VGA-compatible, 0x0302 3D controller, 0x0380 other display controller. NVIDIA's datacenter
GPUs report 0x0302: an H100 80GB HBM3's config space reads ``10de 2330 … 0302`` (vendor 0x10de,
device 0x2330, class 0302). Only vendors that make compute GPUs are kept (GPU_VENDORS): the other
display devices of a server are the BMC's VGA (ASPEED 0x1a03, Matrox 0x102b) or an emulator's, and
they are listed as skipped, not as GPUs.

Base class 12h subclass 00h is "Processing accelerators" (pci.ids class section; subclass 01h is an
SDXI data mover, never a GPU). AMD Instinct MI200/MI300 enumerate there: an MI300X reads
``1002 74a1 … 1200`` (pci.ids: 1002:74a1 "Aqua Vanjaram [Instinct MI300X]"). Class 0x1200 counts
as a GPU only for the vendors in ACCELERATOR_GPU_VENDORS (AMD 0x1002): others put NPUs (Intel
0x8086 Core Ultra NPU) or non-GPU accelerators (Habana Gaudi 0x1da3) there, and those are listed as
skipped. A GPU that is not NVIDIA's is not a CUDA device (:mod:`sactool.topology.cuda`).

Which socket a GPU hangs off: its ``numa_node`` when that node has CPUs; else its host bridge's
node (the root port's ``numa_node``); else the node whose CPUs are exactly its ``local_cpulist``.
"""

from __future__ import annotations

from sactool.host.sysfs import SysfsReader, format_cpulist
from sactool.topology.link import read_link
from sactool.topology.hardware import GpuDevice
from sactool.topology.records import NumaNode
from sactool.topology.pci import host_bridge, narrowest, node_or_none, path_links

PCI_DEVICES = "sys/bus/pci/devices"
GPU_CLASSES = {0x0300: "VGA", 0x0302: "3D controller", 0x0380: "display controller",
               0x1200: "processing accelerator"}
GPU_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel"}  # PCI-SIG vendor ids
ACCELERATOR_CLASS = 0x1200
ACCELERATOR_GPU_VENDORS = {0x1002}     # AMD Instinct (MI100/MI200/MI300) report class 0x1200


def read_gpus(r: SysfsReader, nodes: list[NumaNode]) -> tuple[list[GpuDevice], str]:
    """(GPUs, what was scanned — or why nothing could be)."""
    if not r.is_dir(PCI_DEVICES):
        return [], f"{PCI_DEVICES} is " + ("missing" if r.live else "not in the recording") + ": GPUs unknown"
    names = r.listdir(PCI_DEVICES)
    gpus: list[GpuDevice] = []
    skipped: list[str] = []
    for name in names:
        cls = r.hex(f"{PCI_DEVICES}/{name}/class")
        if cls is None or (cls >> 8) not in GPU_CLASSES:
            continue
        vendor = r.hex(f"{PCI_DEVICES}/{name}/vendor")
        accel = (cls >> 8) == ACCELERATOR_CLASS
        if vendor is None or vendor not in (ACCELERATOR_GPU_VENDORS if accel else GPU_VENDORS):
            skipped.append(f"{name} (vendor {'?' if vendor is None else f'{vendor:#06x}'}, class {cls:#08x}"
                           + (", a processing accelerator but no GPU vendor's" if accel else "") + ")")
            continue
        path = r.resolve(f"{PCI_DEVICES}/{name}")
        if path is None:
            continue
        numa, hb, local, cpu, why = _device_socket(r, name, path, nodes)
        links = path_links(r, path)  # the GPU's own link first, then up to its root port
        dev = r.hex(f"{path}/device")
        uuid, excluded = _nvidia_info(r, name) if vendor == 0x10DE else (None, None)
        gpus.append(GpuDevice(
            pci_device=name, vendor=f"{vendor:#06x}", vendor_name=GPU_VENDORS[vendor],
            device=None if dev is None else f"{dev:#06x}", pci_class=f"{cls:#08x}",
            class_name=GPU_CLASSES[cls >> 8], driver=r.basename_of_link(f"{path}/driver"),
            numa_node=numa, local_cpus=tuple(local), host_bridge=hb, cpu_node=cpu, cpu_node_evidence=why,
            link=read_link(r, path), narrowest_link=narrowest(links), path_links=links, uuid=uuid, excluded=excluded,
        ))
    looked = ("looked for display classes 0x0300/0x0302/0x0380 from NVIDIA, AMD or Intel, and AMD's "
              "processing-accelerator class 0x1200")
    scan = (f"{len(gpus)} of the {len(names)} PCI devices in {PCI_DEVICES} are GPUs ({looked})" if gpus else
            f"none of the {len(names)} PCI devices in {PCI_DEVICES} is a GPU ({looked})")
    if skipped:
        scan += "; not GPUs (vendor makes no compute GPU of that class): " + ", ".join(skipped)
    return gpus, scan


def _nvidia_info(r: SysfsReader, name: str) -> tuple[str | None, bool | None]:
    """(UUID, excluded) from the NVIDIA driver's ``/proc/driver/nvidia/gpus/<bdf>/information``
    ("GPU UUID: \t GPU-…", "GPU Excluded:\t Yes|No", nv-procfs.c); (None, None) without it."""
    text = r.text(f"proc/driver/nvidia/gpus/{name}/information")
    uuid = excluded = None
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "GPU UUID" and value.strip():
            uuid = value.strip()
        elif key.strip() == "GPU Excluded" and value.strip() in ("Yes", "No"):
            excluded = value.strip() == "Yes"
    return uuid, excluded


def pci_socket(r: SysfsReader, name: str, nodes) -> tuple[int | None, str]:
    """(CPU node, evidence) of PCI device ``name`` (``dddd:bb:dd.f``): its ``numa_node``, else its
    host bridge's node, else the node whose CPUs its ``local_cpulist`` names — the one rule probe
    and ``bench gpu-gather`` both use for a GPU's socket (a BIOS often leaves ``numa_node`` at -1)."""
    path = r.resolve(f"{PCI_DEVICES}/{name}")
    if path is None:
        return None, f"{PCI_DEVICES}/{name} is " + ("missing" if r.live else "not in the recording") + ": socket unknown"
    return _device_socket(r, name, path, list(nodes))[3:]


def _device_socket(r: SysfsReader, name: str, path: str, nodes: list[NumaNode]):
    """(numa_node, host bridge, local CPUs, CPU node, evidence) of the PCI device at canonical ``path``."""
    hb, hb_node = host_bridge(r, path)
    numa = node_or_none(r.int(f"{path}/numa_node"))
    local = r.cpulist(f"{path}/local_cpulist") or ()
    cpu, why = _socket(name, numa, hb, hb_node, local, nodes)
    return numa, hb, tuple(local), cpu, why


def _socket(name: str, numa: int | None, hb: str | None, hb_node: int | None, local: tuple[int, ...],
            nodes: list[NumaNode]) -> tuple[int | None, str]:
    cpu_nodes = {n.id: n for n in nodes if n.has_cpu}
    if numa is not None and numa in cpu_nodes:
        return numa, f"{name}/numa_node {numa}"
    if hb_node is not None and hb_node in cpu_nodes:
        return hb_node, f"{name}/numa_node {'-1' if numa is None else numa}; host bridge {hb} on node{hb_node}"
    if local:
        owner = [n.id for n in cpu_nodes.values() if set(n.cpus) == set(local)]
        if owner:
            return owner[0], f"{name}/local_cpulist {format_cpulist(local)} = node{owner[0]}'s CPUs"
    return None, (f"{name}/numa_node {'-1' if numa is None else numa}, no host bridge node, local_cpulist "
                  f"{format_cpulist(local) or 'empty'} is no single node's CPUs: socket unknown")
