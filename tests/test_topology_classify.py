"""Classification rules on edited copies of recorded trees: each rule can fire and can fail."""

from __future__ import annotations

import os

from fixtures.trees import unpack
from sactool.host.sysfs import SysfsReader
from sactool.topology import probe

NODE = "sys/devices/system/node"


def test_node_in_region_without_dax_is_cxl_by_address(tmp_path):
    root = unpack("ram__30-system-ram", tmp_path / "r")
    os.unlink(root / "sys/bus/dax/devices/dax0.0")  # no DAX link: fall back to physical addresses
    t = probe(SysfsReader(root))
    n2 = t.node(2)
    assert n2.kind == "cxl"
    assert n2.evidence[0] == "memory 0x190000000-0x19fffffff lies in region0 (ram, 1-way, mem0)"


def test_node_in_window_only_is_cxl(tmp_path):
    root = unpack("ram__30-system-ram", tmp_path / "r")
    os.unlink(root / "sys/bus/dax/devices/dax0.0")
    os.unlink(root / "sys/bus/cxl/devices/region0")  # firmware-mapped: a window but no region
    t = probe(SysfsReader(root))
    assert t.node(2).kind == "cxl"
    assert t.node(2).evidence[0] == "memory 0x190000000-0x19fffffff lies in CXL window decoder0.0"


def test_fast_cpu_less_node_is_hbm(tmp_path):
    root = unpack("hmat-only__00-boot", tmp_path / "r")
    for acc in ("access0", "access1"):
        (root / NODE / f"node1/{acc}/initiators/read_bandwidth").write_text("409600\n")
    t = probe(SysfsReader(root))
    assert t.node(1).kind == "hbm"
    assert "HMAT read bandwidth 409600 MiB/s above every CPU node's (20480 MiB/s)" in t.node(1).evidence


def test_cpu_less_hotplugged_node_without_links_is_unknown(tmp_path):
    root = unpack("hmat-only__00-boot", tmp_path / "r")
    (root / NODE / "has_normal_memory").write_text("0\n")
    t = probe(SysfsReader(root))
    assert t.node(1).kind == "unknown"
    assert t.node(0).kind == "dram"
    assert "no CXL region, window or DAX device maps it" in t.node(1).evidence


def test_no_cxl_names_the_stand_in(tmp_path):
    t = probe(SysfsReader(unpack("hmat-only__00-boot", tmp_path / "r")))
    v = t.verdict
    assert v.stand_in and v.pool_nodes == (0,) and v.cpu_node == 0
    assert v.reason.startswith("no CXL memory is onlined as a NUMA node here, so node0 (DRAM")
    assert "stands in" in v.reason


def test_region_description_names_ways_and_devices():
    from sactool.topology import CxlRegion

    r = CxlRegion("region0", "decoder0.0", "ram", 1 << 30, 0x190000000, True, 2, 256,
                  ("decoder5.0", "decoder6.0"), ("mem1", "mem2"), True)
    assert r.describe() == "region0 (ram, 2-way, mem1+mem2)"
    assert replace_memdevs(r, ("mem1", None)).describe() == "region0 (ram, 2-way, mem1+?)"


def replace_memdevs(r, mems):
    from dataclasses import replace

    return replace(r, memdevs=mems)


def test_cxl_memory_in_a_cpu_node_is_flagged(tmp_path):
    root = unpack("ram__30-system-ram", tmp_path / "r")
    dax = root / "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0"
    (dax / "target_node").write_text("0\n")  # as if firmware gave the window no proximity domain
    t = probe(SysfsReader(root))
    n0 = t.node(0)
    assert n0.kind == "dram"
    assert n0.evidence[:2] == ("CPUs 0-1", "also holds CXL memory: node0 ← dax0.0 (kmem) ← region0 (ram, 1-way, mem0)")
    assert "cxl-in-cpu-node" in [w.code for w in t.warnings]
    assert t.node(2).kind == "cxl"  # node2's blocks still lie in region0
