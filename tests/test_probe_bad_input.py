"""Bad input on recorded trees: garbage values, all-ones resource, -1 affinity, dangling region
targets, SLIT 255, permission denied — a partial result with warnings naming what was missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from fixtures.trees import unpack
from sactool.errors import TopologyError
from sactool.host.sysfs import SysfsReader
from sactool.topology import Topology, probe

REGION = "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0"
MEM = "sys/devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/mem0"
NODE = "sys/devices/system/node"


@pytest.fixture()
def ram(tmp_path) -> Path:
    return unpack("ram__30-system-ram", tmp_path / "ram")


def codes(t: Topology) -> list[str]:
    return [w.code for w in t.warnings]


def test_garbage_meminfo_and_distance(ram):
    (ram / NODE / "node0/meminfo").write_text("garbage\n")
    (ram / NODE / "node1/distance").write_text("20 ten 20\n")
    t = probe(SysfsReader(ram))
    assert t.node(0).mem_total_bytes is None and t.node(0).mem_free_bytes is None
    assert t.node(1).distances == ()
    msgs = " | ".join(w.message for w in t.warnings)
    assert f"{NODE}/node0/meminfo: unparsable 'garbage'" in msgs
    assert "node1/distance unparsable" in msgs
    assert t.node(2).kind == "cxl"  # the rest is still read


def test_garbage_cxl_values(ram):
    (ram / REGION / "size").write_text("zz\n")
    (ram / MEM / "serial").write_text("\n")
    t = probe(SysfsReader(ram))
    assert t.regions[0].size_bytes is None
    assert any(f"{REGION}/size: unparsable" in w.message for w in t.warnings if w.code == "unreadable-attribute")


def test_all_ones_resource_is_unallocated(ram):
    (ram / REGION / "resource").write_text("0xffffffffffffffff\n")
    t = probe(SysfsReader(ram))
    reg = t.regions[0]
    assert reg.resource is None and reg.allocated is False
    assert json.loads(json.dumps(t.to_data()))["cxl"]["regions"][0]["resource"] is None


def test_minus_one_numa_node_is_no_affinity(ram):
    (ram / MEM / "numa_node").write_text("-1\n")
    t = probe(SysfsReader(ram))
    assert t.memdevs[0].affinity_node is None
    assert t.nearest_cpu_node(2) == 0


def test_region_target_pointing_at_missing_memdev(ram):
    os.unlink(ram / "sys/bus/cxl/devices/decoder2.0")
    t = probe(SysfsReader(ram))
    reg = t.regions[0]
    assert reg.targets == ("decoder2.0",) and reg.memdevs == (None,)
    (w,) = [w for w in t.warnings if w.code == "region-target-missing"]
    assert "region0 target decoder2.0" in w.message and w.hint
    assert t.node(2).kind == "cxl"
    assert t.node(2).evidence[0] == "node2 ← dax0.0 (kmem) ← region0 (ram, 1-way, ?)"


def test_uncommitted_region_warns(ram):
    (ram / REGION / "commit").write_text("0\n")
    assert "region-uncommitted" in codes(probe(SysfsReader(ram)))


def test_dangling_device_link(ram):
    shutil.rmtree(ram / MEM)
    t = probe(SysfsReader(ram))
    assert t.memdevs == ()
    assert "dangling-device" in codes(t) and "region-target-missing" in codes(t)


def test_degraded_link_warns(ram):
    pci = ram / MEM / ".."
    (pci / "current_link_speed").write_text("16.0 GT/s PCIe\n")
    (pci / "current_link_width").write_text("8\n")
    t = probe(SysfsReader(ram))
    lk = t.memdevs[0].link
    assert (lk.speed_gt_s, lk.width, lk.max_speed_gt_s) == (16.0, 8, 32.0)
    assert lk.ceiling_bytes_per_s == round(16e9 * 8 * 128 / 130 / 8)
    assert "link-degraded" in codes(t)


def test_unknown_node_and_frozen(ram):
    t = probe(SysfsReader(ram))
    with pytest.raises(TopologyError) as e:
        t.node(7)
    assert "node0, node1, node2" in e.value.hint
    with pytest.raises(FrozenInstanceError):
        t.live = True  # type: ignore[misc]


def test_nearest_cpu_node_uses_slit_and_skips_255(ram):
    t = probe(SysfsReader(ram))
    # no device affinity (numa_node -1 everywhere), so SLIT decides; read in the CPU node's row
    t = replace(t, memdevs=tuple(replace(m, affinity_node=None, host_bridge_node=None) for m in t.memdevs))
    n0 = replace(t.node(0), distances=((0, 10), (1, 20), (2, 20)))
    n1 = replace(t.node(1), has_cpu=True, cpus=(2,), distances=((0, 20), (1, 10), (2, 15)))
    n2 = replace(t.node(2), distances=((0, 12), (1, 30), (2, 10)))  # node2's own row must not decide
    t2 = replace(t, nodes=(n0, n1, n2))
    assert t2.nearest_cpu_node(2) == 1
    assert t2.locality(2).source == "slit" and t2.locality(2).distance == 15
    n1u = replace(n1, distances=((0, 20), (1, 10), (2, 255)))  # 255: unreachable, never nearest
    assert replace(t2, nodes=(n0, n1u, n2)).nearest_cpu_node(2) == 0
    assert t2.nearest_cpu_node(1) == 1  # a CPU node is its own nearest


def test_empty_cpulist_node_is_cpu_less(ram):
    t = probe(SysfsReader(ram))
    assert t.node(1).cpus == () and not t.node(1).has_cpu and "CPU-less" in t.node(1).evidence


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX only")
def test_permission_denied_is_named(tmp_path):
    """Unreadable attributes (mode 000, read by an unprivileged user) become named warnings."""
    base = tmp_path / "world"
    base.mkdir()
    root = unpack("ram__30-system-ram", base / "ram")
    (root / MEM / "serial").chmod(0)
    (root / NODE / "node2/meminfo").chmod(0)
    code = ("import json,sys; from sactool.host.sysfs import SysfsReader; from sactool.topology import probe;"
            "t=probe(SysfsReader(sys.argv[1])); print(json.dumps([w.message for w in t.warnings]))")
    argv = [sys.executable, "-c", code, str(root)]
    if os.geteuid() == 0:  # root reads mode-000 files: drop to nobody for this one process
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a file unreadable")
        for p in [tmp_path, *tmp_path.parents]:
            if p.stat().st_mode & 0o005 != 0o005:
                p.chmod(p.stat().st_mode | 0o005)  # let nobody traverse (tmp dirs are 0700)
        argv = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(repo))
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    msgs = json.loads(res.stdout)
    assert f"{MEM}/serial: permission denied" in msgs
    assert msgs.count(f"{NODE}/node2/meminfo: permission denied") == 1  # named once, not twice


def test_node_meminfo_short_of_proc_meminfo_warns(ram):
    """Deferred struct-page init: nodes report less than /proc/meminfo (seen on the dev VMs)."""
    t = probe(SysfsReader(ram))
    node_total_kib = sum(n.mem_total_bytes for n in t.nodes) // 1024
    (ram / "proc").mkdir(exist_ok=True)
    (ram / "proc/meminfo").write_text(f"MemTotal:       {node_total_kib} kB\nMemFree:  1000 kB\n")
    assert "node-meminfo-short" not in codes(probe(SysfsReader(ram)))
    (ram / "proc/meminfo").write_text(f"MemTotal:       {node_total_kib * 3} kB\nMemFree:  1000 kB\n")
    w = [w for w in probe(SysfsReader(ram)).warnings if w.code == "node-meminfo-short"]
    assert len(w) == 1 and "/proc/meminfo MemTotal" in w[0].message and w[0].hint
