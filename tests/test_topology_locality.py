"""Each pool node's own CPU node, on the two-socket recording (sac2s) and on edited copies of it.

The edited trees start from the real sac2s capture and change only the attributes named in each
test (device affinity, a SLIT row, an HMAT initiator link), to reach the evidence that the real
6.12 kernel did not give: it applies no SLIT to CFMWS nodes, so on the recording itself only the
device affinity tells the sockets apart.
"""

from __future__ import annotations

import json
import os

import pytest

from fixtures.trees import unpack
from sactool.host.sysfs import SysfsReader
from sactool.records import to_data
from sactool.topology import probe

NODE = "sys/devices/system/node"
# canonical PCI paths of the two memdevs in sac2s (mem1 under socket 0's bridge, mem0 under socket 1's)
MEM1 = "sys/devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0"
MEM0 = "sys/devices/pci0000:de/0000:de:00.0/0000:df:00.0"


def _tree(tmp_path, name="sac2s__30-system-ram"):
    return unpack(name, tmp_path / "r")


def _no_affinity(root):
    """numa_node -1 on both memdevs and both root ports: the device affinity says nothing."""
    for pci in (MEM1, MEM0):
        for d in (root / pci / ".." , root / pci):
            (d / "numa_node").write_text("-1\n")
        mem = next(p for p in os.listdir(root / pci) if p.startswith("mem"))
        (root / pci / mem / "numa_node").write_text("-1\n")


def _slit(root, rows):
    for nid, row in rows.items():
        (root / NODE / f"node{nid}/distance").write_text(" ".join(map(str, row)) + "\n")


@pytest.mark.parametrize("name", ["sac2s__10-region", "sac2s__30-system-ram"])
def test_each_cxl_node_gets_its_own_socket(name, tmp_path):
    t = probe(SysfsReader(_tree(tmp_path, name)))
    v = t.verdict
    assert v.pool_nodes == (2, 3)
    assert [(p.node, p.cpu_node, p.source, p.distance) for p in v.pool] == [
        (2, 0, "device-affinity", 20), (3, 1, "device-affinity", 20)]
    # the crossed names: region0 → mem1 on socket 0's bridge, region1 → mem0 on socket 1's
    assert v.pool[0].evidence == ("node2 ← region0 ← mem1 (serial 0x3001): device numa_node 0, "
                                  "host bridge pci0000:0c on node0")
    assert "region1 ← mem0 (serial 0x3002)" in v.pool[1].evidence and "pci0000:de on node1" in v.pool[1].evidence
    assert (v.cpu_node_of(2), v.cpu_node_of(3), v.cpu_node_of(0)) == (0, 1, None)
    assert (t.nearest_cpu_node(2), t.nearest_cpu_node(3)) == (0, 1)
    assert v.cpu_node == 0  # the single field keeps the first pool node's
    data = json.loads(json.dumps(to_data(t)))
    assert data["verdict"]["pool"][1] == {
        "node": 3, "cpu_node": 1, "distance": 20, "source": "device-affinity",
        "evidence": v.pool[1].evidence}
    assert "node2 near node0" in v.reason and "node3 near node1" in v.reason


def test_devdax_devices_have_their_socket(tmp_path):
    t = probe(SysfsReader(_tree(tmp_path, "sac2s__20-devdax")))
    locs = [t.dax_locality(d.name) for d in t.dax_devices]
    assert [(x.device, x.node, x.cpu_node, x.source, x.distance) for x in locs] == [
        ("dax0.0", 2, 0, "device-affinity", None), ("dax1.0", 3, 1, "device-affinity", None)]
    dax = json.loads(json.dumps(to_data(t)))["dax_devices"]
    assert [d["locality"]["cpu_node"] for d in dax] == [0, 1]   # node numbers as integers, as pool_nodes


def test_slit_read_in_the_cpu_nodes_row(tmp_path):
    """Firmware that fills the CPU rows (the SLIT given to QEMU: 0↔2 14, 1↔3 14, cross 24) and
    leaves the CXL nodes' own rows at 255: the CPU → memory entry decides."""
    root = _tree(tmp_path)
    _no_affinity(root)
    _slit(root, {0: [10, 21, 14, 24], 1: [21, 10, 24, 14], 2: [255, 255, 10, 255], 3: [255, 255, 255, 10]})
    t = probe(SysfsReader(root))
    assert t.memdevs[0].affinity_node is None and t.memdevs[0].host_bridge_node is None
    assert [(p.node, p.cpu_node, p.source, p.distance) for p in t.verdict.pool] == [
        (2, 0, "slit", 14), (3, 1, "slit", 14)]
    assert t.verdict.pool[1].evidence == "SLIT node1 → node3 = 14, the shortest CPU → memory distance"


def test_unreachable_is_never_nearest(tmp_path):
    root = _tree(tmp_path)
    _no_affinity(root)
    _slit(root, {0: [10, 21, 20, 255], 1: [21, 10, 20, 30]})
    t = probe(SysfsReader(root))
    loc = t.locality(3)
    assert (loc.cpu_node, loc.distance, loc.source) == (1, 30, "slit")
    assert "unreachable (255) from node0" in loc.evidence
    _slit(root, {0: [10, 21, 20, 255], 1: [21, 10, 20, 255]})
    loc = probe(SysfsReader(root)).locality(3)
    assert loc.source == "none" and "unreachable (255) from every CPU node" in loc.evidence
    assert loc.cpu_node == 0 and "not known to be near" in loc.evidence


def test_slit_tie_is_said_and_hmat_breaks_it(tmp_path):
    root = _tree(tmp_path)
    _no_affinity(root)  # the recording's own SLIT: 20 from both sockets
    t = probe(SysfsReader(root))
    loc = t.locality(3)
    assert (loc.cpu_node, loc.source) == (0, "slit")
    assert loc.evidence.startswith("SLIT tie: node0, node1 all at 20 → node3, nothing else tells them apart")
    # an HMAT initiator link to node1 (what a firmware HMAT with CPU initiators would give)
    os.symlink("../../../node1", root / NODE / "node3/access0/initiators/node1")
    loc = probe(SysfsReader(root)).locality(3)
    assert (loc.cpu_node, loc.source) == (1, "slit")
    assert "HMAT access0 initiators name node1" in loc.evidence


def test_hmat_initiators_without_slit(tmp_path):
    root = unpack("hmat-only__00-boot", tmp_path / "h")
    for n in (0, 1):
        os.unlink(root / NODE / f"node{n}/distance")
    t = probe(SysfsReader(root))
    loc = t.locality(1)
    assert (loc.cpu_node, loc.source, loc.distance) == (0, "hmat", None)
    assert loc.evidence == "HMAT access1 initiators of node1: node0"


def test_tune_prefaults_each_target_from_its_own_cpu_node(tmp_path):
    from sactool.pool.discover import pool_info

    t = probe(SysfsReader(_tree(tmp_path)))
    info = pool_info(t)
    assert [(x.name, x.cpu_node) for x in info.targets] == [("node2", 0), ("node3", 1)]
    assert info.cpu_node == 0 and info.cpus_near == 1  # one CPU per socket in the recording


def test_devdax_target_node_gets_its_devices_socket(tmp_path):
    """bench/memory ask for the CPU node of a devdax device's (offline) target node."""
    t = probe(SysfsReader(_tree(tmp_path, "sac2s__20-devdax")))
    assert 3 not in t.node_ids
    assert (t.nearest_cpu_node(2), t.nearest_cpu_node(3)) == (0, 1)
    from sactool.errors import TopologyError

    with pytest.raises(TopologyError):
        t.nearest_cpu_node(7)
