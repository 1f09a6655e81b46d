"""Pool health (issue 30): the Get Health Info reply, AER counters, the error-handling mode, the poison
list and its translation DPA → HPA → DAX offset → rank and pool offset, and what serve does with it.

Recorded trees (sac2s, a real 6.12 kernel in QEMU) carry what the live machine captured under
``sactool/capture/`` (the mailbox reply, the cxl_poison trace); the live check (scripts/live-cxl:
CHECK poison-*) injects and clears poison on the real kernel."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.trees import unpack
from sactool.host.sysfs import SysfsReader
from sactool.topology import probe
from sactool.topology import health as H

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
SAC = REPO / "profiles" / "examples" / "sac-8rank-devdax.yaml"

# one cxl_poison event exactly as the live 6.12 kernel printed it (scripts/live-cxl: QEMU Type-3 device,
# debugfs inject_poison at DPA 0x10001000 of mem1; the trace the snapshot captured)
TRACE = ("           <...>-192     [001] .....   460.795772: cxl_poison: memdev=mem1 host=0000:0d:00.0 serial=12289 "
         "trace_type=List region=region0 region_uuid=00000000-0000-0000-0000-000000000000 "
         "hpa=0x{hpa:x} dpa=0x{dpa:x} dpa_length=0x40 source=Injected flags= overflow_time=0\n")


def payload(health=0, media=0, life=3, temp=35, dirty=2, vol=5, pers=0) -> bytes:
    return struct.pack("<BBBBhIII", health, media, 0, life, temp, dirty, vol, pers)


def test_health_info_reply_decoded():
    m = H.parse_health_info(payload(), "test")
    assert (m.media_status, m.health_status, m.life_used_percent, m.temperature_c) == ("normal", (), 3, 35)
    assert (m.dirty_shutdowns, m.corrected_volatile_errors, m.corrected_persistent_errors) == (2, 5, 0)
    assert not m.degraded
    bad = H.parse_health_info(payload(health=0b101, media=3, life=0xFF, temp=0x7FFF), "test")
    assert bad.degraded and bad.media_status == "all_data_lost"
    assert bad.health_status == ("maintenance_needed", "hw_replacement_needed")
    assert bad.life_used_percent is None and bad.temperature_c is None
    with pytest.raises(ValueError):
        H.parse_health_info(b"\0" * 5, "test")


def test_aer_counters_parsed_as_the_kernel_prints_them():
    text = "RxErr 0\nBadTLP 2\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 2\n"
    total, counts = H.parse_aer(text)
    assert total == 2 and counts["BadTLP"] == 2 and len(counts) == 8
    assert H.parse_aer(None) == (None, {})


def _hest(entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    return b"HEST" + struct.pack("<I", 40 + len(body)) + b"\0" * 28 + struct.pack("<I", len(entries)) + body


def _aer_root_port(flags: int) -> bytes:
    # acpi_hest_header (type, source id) + acpi_hest_aer_common (reserved, flags, enabled, …) + root error command
    return struct.pack("<HHHBB", 6, 1, 0, flags, 1) + b"\0" * 40


def test_firmware_first_read_from_the_hest():
    ghes = struct.pack("<HH", 9, 2) + b"\0" * 60
    assert H.hest_firmware_first(_hest([ghes, _aer_root_port(1)])) is True
    assert H.hest_firmware_first(_hest([ghes, _aer_root_port(0)])) is False
    assert H.hest_firmware_first(None) is None
    assert H.hest_firmware_first(_hest([struct.pack("<HH", 99, 0) + b"\0" * 8])) is None   # unknown type: cannot walk


def test_poison_trace_parsed():
    (rec,) = H.parse_poison_trace(TRACE.format(hpa=0x1A0001000, dpa=0x10001000)
                                  + TRACE.format(hpa=1, dpa=2).replace("trace_type=List", "trace_type=Inject"))
    assert rec == {"memdev": "mem1", "region": "region0", "hpa": 0x1A0001000, "dpa": 0x10001000,
                   "length_bytes": 64, "source": "Injected"}


def _poisoned_tree(tmp_path, dpa: int, hpa: int | None = None, media: bytes | None = None) -> Path:
    root = unpack("sac2s__20-devdax", tmp_path / "t")
    cap = root / "sactool" / "capture"
    (cap / "mem1").mkdir(parents=True)
    (cap / "cxl_poison.trace").write_text(TRACE.format(hpa=hpa if hpa is not None else (1 << 64) - 1, dpa=dpa))
    (cap / "mem1" / "get-health-info").write_text((media or payload()).hex() + "\n")
    return root


def _profile(strict=True, ranks=4):
    from sactool.profile import load_profile, validate

    p = load_profile(SAC)
    return validate(replace(p, sglang=replace(p.sglang, tp_size=ranks, attn_dp_size=ranks),
                            pool=replace(p.pool, gpu_local_nodes=(0, 1) * (ranks // 2), strict=strict)))


def test_poison_translated_to_region_dax_and_rank(tmp_path):
    """sac2s: mem1 (serial 0x3001) → region0 (1-way, HPA 0x190000000) → dax0.0. A poisoned DPA of
    256 MiB + 4 KiB lands in dax0.0's second 256 MiB slice: rank 2 of a 4-rank round-robin plan, 4 KiB
    into its pool. The HPA is computed from the decoders (the trace gave none) and equals the kernel's
    where it gives one."""
    from sactool.cli.probe import with_ranks

    dpa = 256 * MiB + 0x1000
    reader = SysfsReader(_poisoned_tree(tmp_path, dpa))
    topo = probe(reader)
    (h,) = [h for h in topo.health if h.memdev == "mem1"]
    (p,) = h.poison
    assert (p.region, p.hpa, p.dax_device, p.dax_offset_bytes, p.node) == ("region0", 0x190000000 + dpa, "dax0.0", dpa, None)
    assert p.hpa_source.startswith("computed") and p.rank is None
    assert h.media is not None and h.media.source.startswith("recorded reply")
    ranked = with_ranks(topo, reader, _profile())
    (p2,) = [x for h in ranked.health for x in (h.poison or ())]
    assert (p2.rank, p2.pool_target, p2.pool_offset_bytes) == (2, "dax0.0", 0x1000)
    assert "rank 2's pool +0x1000" in p2.where()
    codes = [w.code for w in topo.warnings]
    assert "poison" in codes and "media-degraded" not in codes
    # the kernel's HPA, where the trace has one, is taken (and a disagreement with the computed one said)
    topo_k = probe(SysfsReader(_poisoned_tree(tmp_path / "k", dpa, hpa=0x190000000 + dpa)))
    (pk,) = [x for h in topo_k.health for x in (h.poison or ())]
    assert pk.hpa == 0x190000000 + dpa and pk.hpa_source == "the kernel's (cxl_poison hpa)"


def test_interleave_math_two_way():
    """A 2-way region at 256 B granularity: device position 1's DPA 0x100 is the region's 4th granule."""
    from sactool.topology.records import CxlDecoder, CxlRegion

    dec = CxlDecoder("decoder5.0", "endpoint", "endpoint5", None, 1 << 30, 2, 256, mode="ram", region="region0",
                     memdev="mem9", dpa_resource=0, dpa_size_bytes=1 << 29)
    reg = CxlRegion("region0", "decoder0.0", "ram", 1 << 30, 0x100000000, True, 2, 256,
                    ("decoder4.0", "decoder5.0"), ("mem8", "mem9"), True)

    class T:
        decoders = (dec,)

        def region(self, name):
            return reg
    assert H.dpa_to_hpa(T(), "mem9", 0x100)[:2] == ("region0", 0x100000000 + 3 * 256)
    assert H.dpa_to_hpa(T(), "mem9", 0x10)[:2] == ("region0", 0x100000000 + 256 + 0x10)


def test_snapshot_keeps_what_the_mailbox_and_trace_said(tmp_path):
    from sactool.topology.snapshot import write_snapshot
    from sactool.records import to_data
    import tarfile

    reader = SysfsReader(_poisoned_tree(tmp_path, 0x2000))
    a = to_data(probe(reader))
    snap = write_snapshot(reader, tmp_path / "s.tar.gz")
    d = tmp_path / "replay"
    d.mkdir()
    with tarfile.open(snap) as t:
        t.extractall(d, filter="data")
    b = to_data(probe(SysfsReader(d)))
    assert a["health"] == b["health"] and b["health"][1]["poison"][0]["dpa"] == "0x2000"


@pytest.mark.parametrize("strict", [True, False])
def test_serve_carves_the_slices_around_poison_strict_or_not(tmp_path, strict):
    """The poisoned 2 MiB block of rank 2's slice is skipped (tests/test_carve.py has the rule); a plan
    made before the record was read is refused, strict (ibid.)."""
    from sactool.pool.capacity import check_pool as pool_check
    from sactool.pool.plan import PoolSpec

    def check_pool(p, r):
        return pool_check(PoolSpec.of(p), r)
    from sactool.serve.health import check_health

    reader = SysfsReader(_poisoned_tree(tmp_path, 256 * MiB + 0x1000))
    prof = _profile(strict=strict)
    pool = check_pool(prof, reader)
    assert pool.plan.slot(2).offset_bytes == 258 * MiB and [n for n, _ in pool.plan.carved] == ["dax0.0"]
    lines = check_health(prof, reader, pool.plan)
    assert any(x.startswith("poison skipped: the slices of dax0.0 are carved around it") for x in lines)
    assert not any(x.startswith("warning:") for x in lines)


def test_serve_refuses_degraded_media(tmp_path):
    from sactool.errors import TopologyError
    from sactool.pool.capacity import check_pool as pool_check
    from sactool.pool.plan import PoolSpec

    def check_pool(p, r):
        return pool_check(PoolSpec.of(p), r)
    from sactool.serve.health import check_health

    root = _poisoned_tree(tmp_path, 0, media=payload(health=1, media=6))
    (root / "sactool" / "capture" / "cxl_poison.trace").write_text("")
    reader = SysfsReader(root)
    prof = _profile()
    with pytest.raises(TopologyError, match="mem1 behind dax0.0 reports media write_persistency_loss_imminent"):
        check_health(prof, reader, check_pool(prof, reader).plan)
    lines = check_health(_profile(strict=False), reader, check_pool(prof, reader).plan)
    assert any("warning: mem1 behind dax0.0" in x for x in lines)
    assert json.dumps([h.to_data() for h in probe(reader).health])   # the record block serialises


def test_topology_record_3_upgrades_with_an_empty_health_block():
    from sactool.fleet.probe import UPGRADES
    from sactool.topology.records import upgrade_topology_3_to_4

    assert upgrade_topology_3_to_4({"schema_version": 3, "x": 1}) == {"schema_version": 4, "x": 1, "health": []}
    rec = UPGRADES[2]({"hosts": [{"topology": {"schema_version": 3}}]})
    assert rec["hosts"][0]["topology"] == {"schema_version": 4, "health": []}


def test_the_live_recording_of_injected_poison(tmp_path):
    """sac2s-live__20-poison: what probe --poison --snapshot captured on the real kernel (scripts/live-cxl):
    the poison injected at mem1's DPA 0x10001000 comes back at region0 HPA 0x1a0001000 (the kernel's
    figure, equal to the one computed from the decoders), dax0.0 + 256 MiB + 4 KiB, rank 2's pool + 4 KiB
    in the 4-rank plan; media health is stated as not implemented by this device; AER read, OS-first."""
    from sactool.cli.probe import with_ranks

    reader = SysfsReader(unpack("sac2s-live__20-poison", tmp_path / "t"))
    topo = with_ranks(probe(reader), reader, _profile())
    h = {x.memdev: x for x in topo.health}
    (p,) = h["mem1"].poison
    assert (p.dpa, p.length_bytes, p.source, p.region, p.hpa) == (0x10001000, 64, "Injected", "region0", 0x1A0001000)
    assert H.dpa_to_hpa(topo, "mem1", p.dpa)[1] == p.hpa
    assert (p.dax_device, p.dax_offset_bytes, p.rank, p.pool_offset_bytes) == ("dax0.0", 256 * MiB + 0x1000, 2, 0x1000)
    assert h["mem0"].poison == ()
    assert h["mem1"].media is None and "does not implement" in h["mem1"].media_reason
    assert h["mem1"].aer is not None and h["mem1"].aer.fatal == 0 and h["mem1"].error_mode == "os-first"
