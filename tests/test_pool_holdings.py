"""Several host pools in one process (issue 29): a second coordinator, SGLang's caller hook firing
twice, vLLM's private-pool path called twice. Each pool takes bytes no live pool of the process
holds — on a DAX device the next free aligned stretch of the rank's slice, in NUMA mode its bytes
counted against the rank's pinned share —, a pool that finds no room left is treated as any pool
that does not fit, and a stretch is free again only once its mapping is gone.

Real mappings throughout: a tmpfs file stands in for ``/dev/daxX.Y`` (the same ``mmap(MAP_SHARED)``
at the same offsets), and what each pool holds is read back through a second mapping of the file —
the second pool's zero-fill would wipe the first pool's bytes if the two aliased."""

from __future__ import annotations

import json
import logging
import mmap
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fixtures.trees import unpack
from sactool.pool.placer import HostPoolPlacer, PlacementStop, free_stretches, holdings
from sactool.pool.plan import PoolSpec
from sactool.profile import load_profile, validate

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
A = 2 * MiB                      # the stand-in devices' align


def _profile(ranks=2, devices=1, **pool):
    p = load_profile(REPO / "profiles/examples/cxl-one-node.yaml")
    if devices:
        pool = {"mode": "devdax", "nodes": (), "dax_devices": tuple(f"dax{d}.0" for d in range(devices)),
                "stand_in": False, **pool}
    else:
        pool = {"nodes": (0,), "stand_in": True, **pool}
    pool = {"gpu_local_nodes": (), "prefault_threads": 1, **pool}
    return validate(replace(p, sglang=replace(p.sglang, tp_size=ranks, attn_dp_size=ranks),
                            pool=replace(p.pool, **pool)))


def _standin(monkeypatch, tmp_path, n=1, size=64 * MiB) -> dict[str, str]:
    from sactool.pool.contract import STANDIN_ENV

    devs = {}
    for d in range(n):
        f = tmp_path / f"dax{d}.0"
        with open(f, "wb") as fh:
            fh.truncate(size)
        devs[f"dax{d}.0"] = str(f)
    monkeypatch.setenv(STANDIN_ENV, json.dumps({k: {"path": v, "align_bytes": A} for k, v in devs.items()}))
    return devs


def _read(path: str, offset: int, n: int = 8) -> bytes:
    """``n`` bytes at ``offset`` of ``path`` through a mapping of its own (as on a real /dev/daxX.Y,
    where read/pread return EINVAL)."""
    base = offset // A * A
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), A, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=base)
    try:
        return m[offset - base:offset - base + n]
    finally:
        m.close()


@pytest.fixture
def placers():
    """Placers made by a test, every one closed afterwards (their pools unmapped)."""
    made: list[HostPoolPlacer] = []

    def make(profile, **kw) -> HostPoolPlacer:
        made.append(HostPoolPlacer(PoolSpec.of(profile), engine="SGLang", **kw))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_free_stretches_start_on_the_align_beside_what_is_taken():
    assert free_stretches(0, 32 * MiB, A, []) == [(0, 32 * MiB)]
    assert free_stretches(0, 32 * MiB, A, [(0, 12 * MiB)]) == [(12 * MiB, 32 * MiB)]
    # a taken end off the align is rounded up; ranges outside the slice do not count
    assert free_stretches(8 * MiB, 32 * MiB, A, [(0, 8 * MiB), (10 * MiB, 11 * MiB), (32 * MiB, 40 * MiB)]) == \
        [(8 * MiB, 10 * MiB), (12 * MiB, 32 * MiB)]
    assert free_stretches(0, 4 * MiB, A, [(0, 4 * MiB)]) == []


def test_a_second_pool_of_the_process_maps_the_next_stretch_of_the_slice(monkeypatch, tmp_path, placers, caplog):
    """Two placers in one process (two coordinators, each with its own), the same rank, the same
    device: the second pool maps right after the first, on the align, and the first pool's bytes
    survive the second's zero-fill (read back through a mapping of the file)."""
    caplog.set_level(logging.WARNING, logger="sactool")
    dev = _standin(monkeypatch, tmp_path)["dax0.0"]
    prof = _profile(strict=True)                      # 2 ranks on one 64 MiB device: 32 MiB slices
    first = placers(prof, strict=True).place(1, 5 * MiB)
    first.mmap[0:8] = b"first-00"
    first.mmap[5 * MiB - 8:5 * MiB] = b"first-99"
    second = placers(prof, strict=True).place(1, 5 * MiB)
    second.mmap[0:8] = b"second00"
    assert (first.offset_bytes, second.offset_bytes) == (32 * MiB, 38 * MiB)   # 5 MiB takes 6 MiB of align
    assert _read(dev, 32 * MiB) == b"first-00" and _read(dev, 37 * MiB - 8) == b"first-99"
    assert _read(dev, 38 * MiB) == b"second00"
    assert {(h.start, h.end) for h in holdings() if h.target == "dax0.0"} >= {(32 * MiB, 38 * MiB),
                                                                              (38 * MiB, 44 * MiB)}
    # rank 0's slice is another one: its first pool still maps at its start
    assert placers(prof, strict=True).place(0, 5 * MiB).offset_bytes == 0


def test_a_pool_that_finds_no_room_left_is_refused_as_any_pool_that_does_not_fit(monkeypatch, tmp_path, placers,
                                                                                  caplog):
    """The slice (8 MiB: 8 ranks on one 64 MiB device) holds a 6 MiB pool: a second of 4 MiB does
    not fit what is left. Non-strict: the engine's allocator, the warning naming the sizes and the
    stretch held; strict: the rank stops. Never over the first pool."""
    caplog.set_level(logging.WARNING, logger="sactool")
    dev = _standin(monkeypatch, tmp_path)["dax0.0"]
    prof = _profile(ranks=8)
    first = placers(prof).place(3, 6 * MiB)
    first.mmap[0:8] = b"keep-me!"
    assert first.offset_bytes == 24 * MiB
    loose = placers(prof)
    assert loose.place(3, 4 * MiB) is None
    assert ("rank 3: placing 4.00 MiB on dax0.0 failed: SGLang asks for 4194304 bytes, rank 3's slice of dax0.0 "
            "holds 8388608; 6291456 of its 8388608 bytes held by 1 earlier pool(s) of this process at "
            "[0x1800000, 0x1e00000): the largest free stretch holds 2097152 (a pool never maps over another) "
            "(rank plan); SGLang's own allocator is used") in caplog.text
    assert loose.pool_budget(loose.plan_for(3)) == (2 * MiB, "the largest free stretch of its slice of dax0.0 at "
                                                   "offset 25165824 (rank plan, align 2097152): 6291456 of its 8388608 "
                                                   "bytes held by 1 earlier pool(s) of this process at "
                                                   "[0x1800000, 0x1e00000)")
    with pytest.raises(PlacementStop, match="largest free stretch holds 2097152"):
        placers(prof, strict=True).place(3, 4 * MiB)
    assert placers(prof).place(3, 2 * MiB).offset_bytes == 30 * MiB     # what is left still takes what fits
    assert _read(dev, 24 * MiB) == b"keep-me!"


def test_a_stretch_is_free_again_only_once_its_mapping_is_gone(monkeypatch, tmp_path, placers):
    """close() while an array still views the pool: it stays mapped (BufferError) and its stretch
    stays held — the next pool maps after it; once the view is dropped and the pool unmapped, the
    next pool maps at the slice's start again."""
    _standin(monkeypatch, tmp_path)
    prof = _profile()
    p = placers(prof)
    buf = p.place(0, 4 * MiB)
    view = np.frombuffer(buf.mmap, dtype=np.uint8)
    with pytest.raises(BufferError, match="still exported by live views"):
        p.close()
    assert not buf.closed and placers(prof).place(0, 4 * MiB).offset_bytes == 4 * MiB
    del view
    p.close()
    assert buf.closed
    assert placers(prof).place(0, 2 * MiB).offset_bytes == 0              # [0, 4 MiB) is free again


def test_numa_pools_of_one_process_share_the_rank_s_pinned_capacity(placers, caplog):
    """pool.capacity_bytes 64 MiB over 2 ranks on node 0: rank 0's two pools (two placers) together
    may take its 32 MiB; the budget answer after the first is what is left, and a second pool larger
    than that is refused (strict: stop) — while rank 1's share is untouched."""
    caplog.set_level(logging.WARNING, logger="sactool")
    prof = _profile(devices=0, capacity_bytes=64 * MiB)
    a = placers(prof)
    assert a.place(0, 20 * MiB) is not None
    b = placers(prof)
    budget, why = b.pool_budget(b.plan_for(0))
    assert budget == 12 * MiB and why.endswith("(pool.capacity_bytes over 2 rank(s)), less the 20.00 MiB earlier "
                                               "pools of this process hold")
    assert b.place(0, 16 * MiB) is None
    assert ("SGLang asks for 16.00 MiB more (20.00 MiB already held by earlier pools of this process), rank 0's "
            "share of node0's pinned capacity holds 32.00 MiB") in caplog.text
    with pytest.raises(PlacementStop, match="20.00 MiB already held"):
        placers(prof, strict=True).place(0, 16 * MiB)
    assert b.place(0, 12 * MiB).report.verified_fraction == 1.0
    assert b.pool_budget(b.plan_for(1))[0] == 32 * MiB
    assert a.pool_budget(a.plan_for(0))[0] == 0


def test_the_node_s_free_memory_is_read_again_for_each_answer(tmp_path):
    """The topology is probed once per process, but a node's free memory is a reading: the budget
    answer follows MemFree as it is now (here a recorded tree whose CXL node's meminfo is rewritten
    after the probe, as a pool placed since would change it), not as it was at the probe."""
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import topology
    from sactool.pool.readings import node_room

    root = unpack("ram__30-system-ram", tmp_path / "t")
    reader = SysfsReader(root)
    topo = topology(reader)
    cxl = next(n for n in topo.nodes if not n.has_cpu and n.mem_total_bytes)
    before = node_room(topo, reader, cxl.id)
    meminfo = root / f"sys/devices/system/node/node{cxl.id}/meminfo"
    text = meminfo.read_text()
    kb = int(re.search(r"MemFree:\s+(\d+) kB", text).group(1))
    meminfo.write_text(re.sub(r"(MemFree:\s+)\d+( kB)", rf"\g<1>{kb - 65536}\g<2>", text))
    after = node_room(topo, reader, cxl.id)
    assert topo.node(cxl.id).mem_free_bytes == kb * 1024            # the probed structure is unchanged
    assert before.bytes - after.bytes == 64 * MiB


def test_huge_page_room_is_read_now(tmp_path):
    from sactool.host.sysfs import SysfsReader
    from sactool.pool.readings import hugepage_room

    root = unpack("ram__30-system-ram", tmp_path / "t")
    d = root / "sys/devices/system/node/node0/hugepages/hugepages-2048kB"
    d.mkdir(parents=True, exist_ok=True)
    (d / "free_hugepages").write_text("10\n")
    reader = SysfsReader(root)
    assert hugepage_room(reader, 0, 2 * MiB).bytes == 20 * MiB
    (d / "free_hugepages").write_text("3\n")
    room = hugepage_room(reader, 0, 2 * MiB)
    assert room.bytes == 6 * MiB and room.source == "node0's free 2MB huge pages (3, read now)"
