"""What ``cxl list -vvv``, ``daxctl list -RDM`` and ``lspci -vvv`` printed on each recorded machine
(tests/fixtures/tool-outputs.tar.gz: the real tools' outputs in the QEMU captures, unchanged) is in
``sactool probe --format json`` with the same value — decoders' DPA, lock and commit state, DAX
devices' memory blocks, ``movable``, mappings and dax region, ports' dports and committed-decoder
counts, every PCIe function's LnkCap/LnkSta on a device's path — save what the kernel does not put
in sysfs (mailbox answers) and two aliases the capture did not mirror.

The probe records compared are the goldens (tests/golden/probe/, which test_probe_golden.py checks
are exactly what ``probe`` prints on these trees). Counting tool: ``python tests/fixtures/toolfacts.py``.
"""

from __future__ import annotations

import copy
import json

import pytest

from fixtures import toolfacts
from fixtures.trees import GOLDEN, QEMU

OUTPUTS = toolfacts.outputs()

# The capture mirrored /sys/bus/cxl and the ancestors of its devices, not the ACPI device that is
# 6.1's root dport; its ``physical_node`` link (libcxl's alias) is therefore not in the recording.
NOT_RECORDED = {"ram-k6.1__10-region": {("cxl", "bus", "root0", "dports[ACPI0016:00].alias"),
                                        ("cxl", "decoder", "decoder0.0", "targets[0].alias")}}


def _record(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def test_every_recording_has_its_tool_outputs():
    assert sorted(OUTPUTS) == sorted(QEMU)


@pytest.mark.parametrize("name", QEMU)
def test_probe_has_every_sysfs_fact_the_tools_print(name):
    res = toolfacts.compare(_record(name), OUTPUTS[name])
    assert res["differs"] == [], res["differs"]
    assert {f for f, _ in res["missing"]} == NOT_RECORDED.get(name, set()), res["missing"]
    assert res["off-path"] == []
    # what the record cannot hold comes from mailbox commands (or a tool default on an old kernel)
    assert {r for _, r in res["not-in-sysfs"]} <= {*toolfacts.NOT_IN_SYSFS.values(),
                                                   "no decoders_committed attribute before v6.7: cxl list prints "
                                                   "libcxl's default 0"}


def test_the_new_fields_carry_the_tools_values():
    f = toolfacts.facts(OUTPUTS["sac2s__30-system-ram"])
    rec = _record("sac2s__30-system-ram")
    dec = {d["name"]: d for d in rec["cxl"]["decoders"]}
    assert f[("cxl", "decoder", "decoder3.0", "dpa_size")] == dec["decoder3.0"]["dpa_size_bytes"] == 512 << 20
    assert dec["decoder3.0"]["dpa_resource"] == "0x0" and dec["decoder3.0"]["committed"] is True
    assert dec["decoder3.1"]["dpa_resource"] is None and dec["decoder3.1"]["committed"] is False
    assert {d["locked"] for d in dec.values()} == {False}
    dax = {d["name"]: d for d in rec["dax_devices"]}
    assert (f[("daxctl", "chardev", "dax1.0", "online_memblocks")], f[("daxctl", "chardev", "dax1.0", "movable")]) \
        == (dax["dax1.0"]["memory_blocks_online"], dax["dax1.0"]["movable"]) == (4, True)
    # the boot-time auto-online of 10-region put the blocks in ZONE_NORMAL: daxctl says movable false
    assert [d["movable"] for d in _record("sac2s__10-region")["dax_devices"]] == [False, False]
    assert [d["movable"] for d in _record("sac2s__20-devdax")["dax_devices"]] == [None, None]   # devdax: no blocks
    links = {lk["pci_device"]: lk for m in rec["cxl"]["memdevs"] for lk in m["path_links"]}
    assert set(links) == {"0000:0c:00.0", "0000:0d:00.0", "0000:de:00.0", "0000:df:00.0"}     # every lspci LnkCap
    assert (links["0000:0c:00.0"]["max_speed_gt_s"], links["0000:0c:00.0"]["max_width"]) == (
        f[("lspci", "pci", "0000:0c:00.0", "LnkCap.speed")], f[("lspci", "pci", "0000:0c:00.0", "LnkCap.width")])


def test_a_record_without_the_fields_is_caught():
    """The comparison can fail: a record that lacks a field, or holds another value, is reported."""
    rec = _record("sac2s__30-system-ram")
    bad = copy.deepcopy(rec)
    for d in bad["dax_devices"]:
        d.pop("movable")
    bad["cxl"]["decoders"][2]["dpa_size_bytes"] = 1
    res = toolfacts.compare(bad, OUTPUTS["sac2s__30-system-ram"])
    assert {f for f, _ in res["missing"]} == {("daxctl", "chardev", "dax0.0", "movable"),
                                              ("daxctl", "chardev", "dax1.0", "movable"),
                                              ("cxl", "chardev", "dax0.0", "movable"),
                                              ("cxl", "chardev", "dax1.0", "movable")}
    assert [(f, got) for f, _, got in res["differs"]] == [(("cxl", "decoder", "decoder3.0", "dpa_size"), 1)]
