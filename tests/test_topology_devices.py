"""hmem / Soft Reserved memory, partially onlined DAX, the CXL port tree and PCIe path, and GPUs.

No recording of an hmem-only machine, of a partially onlined DAX device or of a GPU exists (the
QEMU captures have no /sys/bus/pci at all). Each tree here is therefore derived from the real
two-socket recording (sac2s) and changes only what the test names; the GPU entries are constructed,
mirroring the recorded layout of the CXL host bridges (host bridge → root port → function), with
the identifiers a real H100 reports.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from fixtures.trees import unpack
from sactool.host.iomem import parse_iomem, read_iomem
from sactool.host.sysfs import SysfsReader
from sactool.records import to_data
from sactool.topology import probe

MEMORY = "sys/devices/system/memory"
DAX_PARENT = {"dax0.0": "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0",
              "dax1.0": "sys/devices/platform/ACPI0017:00/root0/decoder0.1/region1/dax_region1"}
RP1 = "sys/devices/pci0000:de/0000:de:00.0"          # socket 1's CXL root port (recorded)


def codes(t):
    return [w.code for w in t.warnings]


# ---- /proc/iomem ----------------------------------------------------------------------------

def test_iomem_parser_nesting_and_hidden_addresses(tmp_path):
    text = ("190000000-28fffffff : CXL Window 0\n  190000000-1afffffff : region0\n"
            "    190000000-1afffffff : dax0.0\n      190000000-1afffffff : System RAM (kmem)\n")
    r = parse_iomem(text)
    assert [(x.depth, x.name) for x in r] == [(0, "CXL Window 0"), (1, "region0"), (2, "dax0.0"),
                                              (3, "System RAM (kmem)")]
    assert r[0].end == 0x28fffffff and r[0].contains(0x28fffffff) and not r[0].contains(0x290000000)
    with pytest.raises(ValueError):
        parse_iomem("garbage\n")
    # what an unprivileged reader sees: every address 0
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/iomem").write_text("00000000-00000000 : System RAM\n00000000-00000000 : CXL Window 0\n")
    ranges, why = read_iomem(SysfsReader(tmp_path))
    assert ranges is None and "CAP_SYS_ADMIN" in why


# ---- hmem / Soft Reserved --------------------------------------------------------------------

def _hmem_tree(tmp_path, iomem: str, keep_cxl_bus: bool = False):
    """sac2s 10-region (kmem onlined both CXL nodes as normal memory) turned into an hmem machine:
    both DAX devices moved under devices/platform/hmem.N (where dax_hmem puts them), the CXL bus
    gone (not loaded), /proc/iomem replaced by ``iomem`` (the CXL lines rewritten)."""
    root = unpack("sac2s__10-region", tmp_path / "h")
    for i, dax in enumerate(("dax0.0", "dax1.0")):
        dest = root / f"sys/devices/platform/hmem.{i}"
        dest.mkdir(parents=True)
        shutil.move(str(root / DAX_PARENT[dax] / dax), dest / dax)
        link = root / "sys/bus/dax/devices" / dax
        os.unlink(link)
        os.symlink(f"../../../devices/platform/hmem.{i}/{dax}", link)
    if not keep_cxl_bus:
        shutil.rmtree(root / "sys/bus/cxl")
    text = (root / "proc/iomem").read_text()
    head = text[:text.index("190000000-28fffffff : CXL Window 0")]
    tail = text[text.index("c000000000-"):]
    (root / "proc/iomem").write_text(head + iomem + tail)
    return root


SOFT_ONLY = """190000000-1afffffff : Soft Reserved
  190000000-1afffffff : dax0.0
    190000000-1afffffff : System RAM (kmem)
290000000-2afffffff : Soft Reserved
  290000000-2afffffff : dax1.0
    290000000-2afffffff : System RAM (kmem)
"""


def test_hmem_in_no_cxl_window_is_not_dram(tmp_path):
    t = probe(SysfsReader(_hmem_tree(tmp_path, SOFT_ONLY)))
    assert not t.cxl_bus and t.node(2).has_normal_memory  # what made the old rule say "boot-time DRAM"
    assert [d.source for d in t.dax_devices] == ["hmem", "hmem"]
    n2 = t.node(2)
    assert n2.kind == "unknown"
    assert n2.evidence[0] == ("node2 ← dax0.0 (kmem) ← hmem (Soft Reserved 0x190000000-0x1afffffff), "
                              "in no CXL window")
    assert "specific-purpose memory in no CXL window: CXL or HBM, nothing here says which" in n2.evidence
    assert codes(t).count("soft-reserved-unattributed") == 2
    assert t.iomem.soft_reserved == ((0x190000000, 0x1afffffff), (0x290000000, 0x2afffffff))
    assert t.verdict.stand_in  # not used as the pool on a guess


def test_hmem_inside_a_cxl_window_is_cxl(tmp_path):
    iomem = SOFT_ONLY.replace("190000000-1afffffff : Soft Reserved\n  190000000-1afffffff : dax0.0\n    ",
                              "190000000-28fffffff : CXL Window 0\n  190000000-1afffffff : Soft Reserved\n"
                              "    190000000-1afffffff : dax0.0\n      ")
    t = probe(SysfsReader(_hmem_tree(tmp_path, iomem)))
    n2 = t.node(2)
    assert n2.kind == "cxl"
    assert n2.evidence[0] == ("node2 ← dax0.0 (kmem) ← hmem (Soft Reserved 0x190000000-0x1afffffff) in "
                              "/proc/iomem 'CXL Window 0' (0x190000000-0x28fffffff): firmware-mapped CXL memory, "
                              "no CXL region assembled it")
    assert t.node(3).kind == "unknown"  # its window line was left out
    assert t.verdict.pool_nodes == (2,) and not t.verdict.stand_in


def test_hmem_with_hidden_iomem_says_why(tmp_path):
    root = _hmem_tree(tmp_path, SOFT_ONLY)
    text = (root / "proc/iomem").read_text()
    zeroed = "\n".join(("  " * ((len(ln) - len(ln.lstrip())) // 2)) + "00000000-00000000 : " + ln.split(" : ", 1)[1]
                       for ln in text.splitlines() if " : " in ln)
    (root / "proc/iomem").write_text(zeroed + "\n")
    t = probe(SysfsReader(root))
    assert not t.iomem.readable and "CAP_SYS_ADMIN" in t.iomem.reason
    assert t.node(2).kind == "unknown"
    assert "(/proc/iomem: addresses read as 0" in t.node(2).evidence[0]


def test_recorded_cxl_windows_in_iomem(tmp_path):
    t = probe(SysfsReader(unpack("sac2s__30-system-ram", tmp_path / "r")))
    assert t.iomem.readable
    assert t.iomem.cxl_windows == ((0x190000000, 0x28fffffff, "CXL Window 0"), (0x290000000, 0x38fffffff, "CXL Window 1"))


# ---- partially onlined DAX -----------------------------------------------------------------

def test_partially_onlined_dax_warns(tmp_path):
    root = unpack("sac2s__30-system-ram", tmp_path / "r")
    t = probe(SysfsReader(root))
    assert [(d.memory_blocks, d.memory_blocks_online, d.block_size_bytes) for d in t.dax_devices] == [
        (4, 4, 128 << 20), (4, 4, 128 << 20)]
    assert "dax-partially-online" not in codes(t)
    # dax1.0 is 0x290000000 + 512 MiB: blocks 82-85; take the last one offline
    (root / MEMORY / "memory85/state").write_text("offline\n")
    t = probe(SysfsReader(root))
    (w,) = [w for w in t.warnings if w.code == "dax-partially-online"]
    assert w.message == ("dax1.0: 3 of 4 memory blocks (128.00 MiB each) are online; 128.00 MiB of it is not "
                         "in node3")
    assert "daxctl online-memory dax1.0" in w.hint


def test_pmem_dax_counts_only_whole_blocks(tmp_path):
    """The recorded pmem namespace gives a 250 MiB DAX device at 0x190600000: one whole 128 MiB block."""
    t = probe(SysfsReader(unpack("pmem__30-system-ram", tmp_path / "p")))
    (d,) = t.dax_devices
    assert (d.size_bytes, d.memory_blocks, d.memory_blocks_online) == (250 << 20, 1, 1)


# ---- CXL ports and the PCIe path ---------------------------------------------------------------

def test_port_tree_per_memdev(tmp_path):
    t = probe(SysfsReader(unpack("sac2s__30-system-ram", tmp_path / "r")))
    assert [(p.name, p.kind, p.parent, p.uport, p.parent_dport) for p in t.ports] == [
        ("root0", "root", None, "ACPI0017:00", None),
        ("port1", "host-bridge", "root0", "pci0000:de", "pci0000:de"),
        ("port2", "host-bridge", "root0", "pci0000:0c", "pci0000:0c"),
        ("endpoint3", "endpoint", "port1", "mem0", "0000:de:00.0"),
        ("endpoint4", "endpoint", "port2", "mem1", "0000:0c:00.0"),
    ]
    assert {m.name: m.ports for m in t.memdevs} == {"mem0": ("root0", "port1", "endpoint3"),
                                                    "mem1": ("root0", "port2", "endpoint4")}
    m0 = t.memdev("mem0")
    # the device (32 GT/s x16) and its root port (same link; capable of 64 GT/s x32)
    assert [(lk.pci_device, lk.speed_gt_s, lk.width, lk.max_width) for lk in m0.path_links] == [
        ("0000:df:00.0", 32.0, 16, 16), ("0000:de:00.0", 32.0, 16, 32)]
    assert m0.narrowest_link.pci_device == "0000:df:00.0"
    assert "link-path-narrower" not in codes(t)


def test_narrowest_link_is_upstream(tmp_path):
    root = unpack("sac2s__30-system-ram", tmp_path / "r")
    (root / RP1 / "current_link_width").write_text("8\n")
    t = probe(SysfsReader(root))
    m0 = t.memdev("mem0")
    assert m0.link.width == 16 and m0.narrowest_link.pci_device == "0000:de:00.0"
    assert m0.narrowest_link.ceiling_bytes_per_s == round(32e9 * 8 * 128 / 130 / 8)
    (w,) = [w for w in t.warnings if w.code == "link-path-narrower"]
    assert "mem0" in w.message and "0000:de:00.0" in w.message


# ---- GPUs ---------------------------------------------------------------------------------------

# A constructed GPU: vendor 0x10de, device 0x2330, class 0x030200 are what a real H100 80GB HBM3
# reports (its config space reads "10de 2330 … 0302", landontclipp.github.io/sysadmin/gpu).
GPU = {"class": "0x030200", "vendor": "0x10de", "device": "0x2330", "numa_node": "1", "local_cpulist": "1",
       "current_link_speed": "32.0 GT/s PCIe", "current_link_width": "16",
       "max_link_speed": "32.0 GT/s PCIe", "max_link_width": "16"}


def _gpu_tree(tmp_path, **over):
    """sac2s 30-system-ram plus a GPU on socket 1: a host bridge pci0000:17 with a root port copied
    from the recorded socket-1 CXL root port (0000:de:00.0), and the GPU function behind it; and a
    BMC VGA (ASPEED) on pci0000:00, which is not a GPU."""
    root = unpack("sac2s__30-system-ram", tmp_path / "g")
    rp = root / "sys/devices/pci0000:17/0000:17:00.0"
    rp.mkdir(parents=True)
    for f in ("class", "vendor", "device", "numa_node", "current_link_speed", "current_link_width",
              "max_link_speed", "max_link_width"):
        if (root / RP1 / f).exists():
            shutil.copy(root / RP1 / f, rp / f)
    for k, v in over.pop("rp", {}).items():
        (rp / k).write_text(v + "\n")
    gpu = rp / "0000:18:00.0"
    gpu.mkdir()
    for k, v in {**GPU, **over}.items():
        (gpu / k).write_text(v + "\n")
    (root / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    os.symlink("../../../../bus/pci/drivers/nvidia", gpu / "driver")
    vga = root / "sys/devices/pci0000:00/0000:00:01.0"
    vga.mkdir(parents=True)
    for k, v in {"class": "0x030000", "vendor": "0x1a03", "device": "0x2000", "numa_node": "-1"}.items():
        (vga / k).write_text(v + "\n")
    devs = root / "sys/bus/pci/devices"
    devs.mkdir(parents=True)
    for bdf, rel in (("0000:17:00.0", "pci0000:17/0000:17:00.0"), ("0000:18:00.0", "pci0000:17/0000:17:00.0/0000:18:00.0"),
                     ("0000:00:01.0", "pci0000:00/0000:00:01.0")):
        os.symlink(f"../../../devices/{rel}", devs / bdf)
    return root


def test_gpu_found_by_class_with_its_socket(tmp_path):
    t = probe(SysfsReader(_gpu_tree(tmp_path)))
    (g,) = t.gpus
    assert (g.pci_device, g.vendor, g.vendor_name, g.device, g.pci_class, g.class_name, g.driver) == (
        "0000:18:00.0", "0x10de", "NVIDIA", "0x2330", "0x030200", "3D controller", "nvidia")
    assert (g.numa_node, g.local_cpus, g.host_bridge, g.cpu_node) == (1, (1,), "pci0000:17", 1)
    assert g.cpu_node_evidence == "0000:18:00.0/numa_node 1"
    assert (g.link.speed_gt_s, g.link.width) == (32.0, 16)
    assert [lk.pci_device for lk in g.path_links] == ["0000:18:00.0", "0000:17:00.0"]
    assert "3 PCI devices" in t.gpu_scan and "0000:00:01.0 (vendor 0x1a03, class 0x030000)" in t.gpu_scan
    data = json.loads(json.dumps(to_data(t)))
    assert data["gpus"][0]["cpu_node"] == 1 and data["gpus"][0]["pci_class"] == "0x030200"


def test_gpu_socket_from_host_bridge_then_local_cpus(tmp_path):
    t = probe(SysfsReader(_gpu_tree(tmp_path / "a", numa_node="-1")))
    (g,) = t.gpus
    assert g.numa_node is None and g.cpu_node == 1
    assert g.cpu_node_evidence == "0000:18:00.0/numa_node -1; host bridge pci0000:17 on node1"
    t = probe(SysfsReader(_gpu_tree(tmp_path / "b", numa_node="-1", rp={"numa_node": "-1"})))
    (g,) = t.gpus
    assert g.cpu_node == 1 and g.cpu_node_evidence == "0000:18:00.0/local_cpulist 1 = node1's CPUs"
    t = probe(SysfsReader(_gpu_tree(tmp_path / "c", numa_node="-1", local_cpulist="0-1", rp={"numa_node": "-1"})))
    (g,) = t.gpus
    assert g.cpu_node is None and "socket unknown" in g.cpu_node_evidence


class _OneGpuDriver:
    """Stands in for numba-cuda's driver on a machine without a GPU: one device whose PCI address
    is the recorded tree's GPU (0000:18:00.0). What is tested is gpu-gather's reading of sysfs."""

    implementation = "NVIDIA"
    gpus = [0]

    class _Dev:
        name, compute_capability = b"NVIDIA H100 80GB HBM3", (9, 0)
        PCI_DOMAIN_ID, PCI_BUS_ID, PCI_DEVICE_ID = 0, 0x18, 0
        MULTIPROCESSOR_COUNT, L2_CACHE_SIZE = 132, 50 << 20

    def select_device(self, index):
        assert index == 0

    def get_current_device(self):
        return self._Dev()


def test_gpu_gather_record_gets_the_gpus_socket_by_probes_rule(tmp_path, monkeypatch):
    """A GPU whose numa_node is -1 (a BIOS without _PXM for it) sits on socket 1 by its host bridge:
    probe says so, and the gpu-gather record says the same (it read numa_node only; issue 19)."""
    from numba.core import config

    from sactool.bench.gpuplace import select_gpu

    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    reader = SysfsReader(_gpu_tree(tmp_path, numa_node="-1"))
    topo = probe(reader)
    (g,) = topo.gpus
    info = select_gpu(_OneGpuDriver(), 0, reader, topo.nodes)
    assert info.numa_node is None and g.numa_node is None
    assert (info.cpu_node, info.cpu_node_evidence) == (g.cpu_node, g.cpu_node_evidence) == (
        1, "0000:18:00.0/numa_node -1; host bridge pci0000:17 on node1")
    assert info.to_data()["cpu_node"] == 1


def test_gpu_tree_snapshot_replays(tmp_path):
    from sactool.topology.snapshot import write_snapshot

    reader = SysfsReader(_gpu_tree(tmp_path))
    first = to_data(probe(reader))
    snap = write_snapshot(reader, tmp_path / "snap.tar.gz")
    second = to_data(probe(SysfsReader(unpack(snap, tmp_path / "replay"))))
    for d in (first, second):
        d.pop("created_at"), d.pop("sysfs_root")
    assert first["gpus"] and first == second


def test_snapshot_refuses_an_existing_file_without_force(tmp_path):
    from sactool.errors import ExistsError
    from sactool.topology.snapshot import write_snapshot

    reader = SysfsReader(_gpu_tree(tmp_path))
    probe(reader)
    out = tmp_path / "snap.tar.gz"
    out.write_bytes(b"kept")
    with pytest.raises(ExistsError, match="already exists") as e:
        write_snapshot(reader, out)
    assert "--force" in e.value.hint and out.read_bytes() == b"kept"
    assert write_snapshot(reader, out, force=True) == out and out.read_bytes() != b"kept"


def test_no_pci_bus_in_recording(tmp_path):
    t = probe(SysfsReader(unpack("sac2s__30-system-ram", tmp_path / "r")))
    assert t.gpus == () and t.gpu_scan == "sys/bus/pci/devices is not in the recording: GPUs unknown"


def test_unreadable_block_state_is_unknown_not_offline(tmp_path):
    root = unpack("sac2s__30-system-ram", tmp_path / "r")
    os.unlink(root / MEMORY / "memory84/state")
    t = probe(SysfsReader(root))
    assert [(d.name, d.memory_blocks, d.memory_blocks_online) for d in t.dax_devices] == [
        ("dax0.0", 4, 4), ("dax1.0", 4, None)]
    assert "dax-partially-online" not in codes(t)
