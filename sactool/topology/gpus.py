"""GPUs from ``/sys/bus/pci/devices`` by PCI class code — no vendor library (no NVML, no ROCm).

Class codes (PCI Code and ID Assignment Specification, base class 03h "display controller"):
0x0300 VGA-compatible, 0x0302 3D controller, 0x0380 other display controller. NVIDIA's datacenter
GPUs report 0x0302: an H100 80GB HBM3's config space reads ``10de 2330 … 0302`` (vendor 0x10de,
device 0x2330, class 0302). Only vendors that make compute GPUs are kept (GPU_VENDORS): the other
display devices of a server are the BMC's VGA (ASPEED 0x1a03, Matrox 0x102b) or an emulator's, and
they are listed as skipped, not as GPUs. AMD Instinct parts that report base class 12h
("processing accelerator") are not covered.

Which socket a GPU hangs off: its ``numa_node`` when that node has CPUs; else its host bridge's
node (the root port's ``numa_node``); else the node whose CPUs are exactly its ``local_cpulist``.
"""

from __future__ import annotations

from sactool.host.sysfs import SysfsReader, format_cpulist
from sactool.topology.link import read_link
from sactool.topology.model import GpuDevice, NumaNode
from sactool.topology.pci import host_bridge, narrowest, node_or_none, path_links

PCI_DEVICES = "sys/bus/pci/devices"
GPU_CLASSES = {0x0300: "VGA", 0x0302: "3D controller", 0x0380: "display controller"}
GPU_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel"}  # PCI-SIG vendor ids


def read_gpus(r: SysfsReader, nodes: list[NumaNode]) -> tuple[list[GpuDevice], str]:
    """(GPUs, what was scanned — or why nothing could be)."""
    if not r.is_dir(PCI_DEVICES):
        return [], f"{PCI_DEVICES} is " + ("missing" if r.live else "not in the recording") + ": GPUs unknown"
    names = r.listdir(PCI_DEVICES)
    gpus, skipped = [], []
    for name in names:
        cls = r.hex(f"{PCI_DEVICES}/{name}/class")
        if cls is None or (cls >> 8) not in GPU_CLASSES:
            continue
        vendor = r.hex(f"{PCI_DEVICES}/{name}/vendor")
        if vendor not in GPU_VENDORS:
            skipped.append(f"{name} (vendor {'?' if vendor is None else f'{vendor:#06x}'}, class {cls:#08x})")
            continue
        path = r.resolve(f"{PCI_DEVICES}/{name}")
        if path is None:
            continue
        hb, hb_node = host_bridge(r, path)
        numa = node_or_none(r.int(f"{path}/numa_node"))
        local = r.cpulist(f"{path}/local_cpulist") or ()
        cpu, why = _socket(name, numa, hb, hb_node, local, nodes)
        links = path_links(r, path)  # the GPU's own link first, then up to its root port
        dev = r.hex(f"{path}/device")
        gpus.append(GpuDevice(
            pci_device=name, vendor=f"{vendor:#06x}", vendor_name=GPU_VENDORS[vendor],
            device=None if dev is None else f"{dev:#06x}", pci_class=f"{cls:#08x}",
            class_name=GPU_CLASSES[cls >> 8], driver=r.basename_of_link(f"{path}/driver"),
            numa_node=numa, local_cpus=tuple(local), host_bridge=hb, cpu_node=cpu, cpu_node_evidence=why,
            link=read_link(r, path), narrowest_link=narrowest(links), path_links=links,
        ))
    scan = f"{len(names)} PCI devices in {PCI_DEVICES}, display class 0x0300/0x0302/0x0380"
    if skipped:
        scan += "; not GPUs (vendor makes no compute GPU): " + ", ".join(skipped)
    return gpus, scan


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
