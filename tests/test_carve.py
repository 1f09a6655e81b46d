"""Devdax slices carved around known poison (issue 30): the slice rule over a device's poison-free
extents (:func:`sactool.pool.rankplan.carve`), the plan serve shows on the live recording of an
injected poison record (``sac2s-live__20-poison``), the set handed to every rank through the
serve <-> plug-in contract (``$SACTOOL_POOL_POISON``), and the placer mapping each rank at its carved
offset. The live check (scripts/live-cxl: CHECK poison-replan, poison-clear) does the same on the
real kernel."""

from __future__ import annotations

import json
import mmap
import random
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.trees import unpack
from sactool.errors import CapacityError, TopologyError
from sactool.host.sysfs import SysfsReader
from sactool.pool import rankplan
from sactool.pool.contract import POISON_ENV, poison_from_env, poison_value
from sactool.pool.rankplan import carve, check_disjoint, plan, slice_bytes
from sactool.pool.targets import Target

REPO = Path(__file__).resolve().parent.parent
SAC = REPO / "profiles" / "examples" / "sac-8rank-devdax.yaml"
MiB = 1 << 20
A = 2 * MiB
DEV = 512 * MiB
POISONED = 256 * MiB + 0x1000     # the live recording's record: mem1 DPA 0x10001000 = dax0.0 + 0x10001000


def _dev(cap=DEV, poison=(), align=A, name="dax0.0") -> Target:
    return Target(name, "devdax", cap, "test", align, 0, "", 2, tuple(poison))


def _slices(cap, sharers, poison, align=A):
    t = _dev(cap, poison, align)
    p = plan(sharers, [t], "explicit", explicit=[t.name] * sharers)
    check_disjoint(p, [t])
    return [(s.offset_bytes, s.size_bytes) for s in p.slots], p


# ---- the slice rule ---------------------------------------------------------------------------

def test_without_poison_the_carve_is_the_plain_partition():
    rng = random.Random(7)
    for _ in range(300):
        align = rng.choice([4096, A, 1 << 30])
        cap = rng.randrange(align, 64 * align) + rng.randrange(align)
        n = rng.randrange(1, 9)
        c = carve(cap, n, align)
        s = slice_bytes(cap, n, align)
        assert c.size_bytes == s and c.skipped == () and not c.changed
        assert c.offsets == (tuple(i * s for i in range(n)) if s else ())


@pytest.mark.parametrize("offset,length,want", [
    # the recorded record: 4 KiB into the second slice -> its 2 MiB block skipped, the second slice after it
    (POISONED, 64, [(0, 254 * MiB), (258 * MiB, 254 * MiB)]),
    # the first byte of the device: both slices move up one block
    (0, 64, [(2 * MiB, 254 * MiB), (256 * MiB, 254 * MiB)]),
    # the last byte of the first slice: the first slice shrinks, the second stays
    (256 * MiB - 1, 1, [(0, 254 * MiB), (256 * MiB, 254 * MiB)]),
    # the first byte of the second slice
    (256 * MiB, 64, [(0, 254 * MiB), (258 * MiB, 254 * MiB)]),
    # across a block boundary: both blocks it touches are skipped
    (256 * MiB - 32, 64, [(0, 254 * MiB), (258 * MiB, 254 * MiB)]),
    # the device's last block
    (DEV - 64, 64, [(0, 254 * MiB), (254 * MiB, 254 * MiB)]),
    # in the middle of the first slice: the larger clean extent holds both
    (100 * MiB, 64, [(102 * MiB, 204 * MiB), (306 * MiB, 204 * MiB)]),
])
def test_poison_at_slice_boundaries(offset, length, want):
    got, p = _slices(DEV, 2, [(offset, length)])
    assert got == want
    (name, c), = p.carved
    assert name == "dax0.0" and c.changed and c.plain_bytes == 256 * MiB
    for o, s in got:                 # no slice holds a poisoned byte, every slice aligned
        assert not (o < offset + length and offset < o + s) and o % A == 0 and s % A == 0


def test_several_ranges_and_the_largest_equal_slices():
    """One record in each of four 128 MiB slices: every sharer still gets one slice, all of one size,
    the largest for which four fit the clean extents (one more block each and they would not)."""
    poison = [(i * 128 * MiB + 64 * MiB, 64) for i in range(4)]
    got, p = _slices(DEV, 4, poison)
    sizes = {s for _, s in got}
    assert len(sizes) == 1 and len(got) == 4
    size = sizes.pop()
    (_, c), = p.carved
    assert len(c.skipped) == 4 and size < 128 * MiB
    k = size // A + 1                # one block more per slice: fewer than 4 fit
    ext, at = [], 0
    for a, b in c.skipped:
        ext.append((at // A, a // A))
        at = b
    ext.append((at // A, DEV // A))
    assert sum((b - a) // k for a, b in ext) < 4


def test_random_poison_never_lands_in_a_slice():
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randrange(1, 6)
        poison = [(rng.randrange(DEV), rng.choice([64, 4096, 3 * MiB])) for _ in range(rng.randrange(1, 8))]
        c = carve(DEV, n, A, poison)
        if not c.offsets:
            continue
        t = _dev(poison=poison)
        p = plan(n, [t], "explicit", explicit=["dax0.0"] * n)
        check_disjoint(p, [t])       # aligned, inside, disjoint, clear of every poisoned byte


def test_too_much_poison_refuses_with_the_carve_named():
    # an 8 MiB device of four 2 MiB blocks, one poisoned: three clean blocks for four sharers
    c = carve(8 * MiB, 4, A, [(2 * MiB + 5, 64)])
    assert c.offsets == () and c.size_bytes == 0
    t = _dev(8 * MiB, [(2 * MiB + 5, 64)])
    with pytest.raises(CapacityError, match=r"cannot give 4 ranks an aligned slice each, carved around known "
                                            r"poison \(dax0.0: skipped \[0x200000, 0x400000\)"):
        plan(4, [t], "explicit", explicit=["dax0.0"] * 4)
    # what is left holds slices, but not the pool the engine asks for
    with pytest.raises(CapacityError, match="carved around known poison") as e:
        plan(2, [_dev(poison=[(POISONED, 64)])], "explicit", explicit=["dax0.0"] * 2, pool_bytes_per_rank=255 * MiB)
    assert "clearing the poison restores" in e.value.hint
    plan(2, [_dev(poison=[(POISONED, 64)])], "explicit", explicit=["dax0.0"] * 2, pool_bytes_per_rank=254 * MiB)


def test_poison_outside_every_slice_changes_nothing():
    # 3 sharers of 512 MiB: 85 blocks of 2 MiB each, block 255 unused; poison there moves nothing
    got, p = _slices(DEV, 3, [(DEV - A + 7, 64)])
    assert got == [(i * 170 * MiB, 170 * MiB) for i in range(3)]
    (_, c), = p.carved
    assert not c.changed and "no slice reaches it" in c.describe("dax0.0")
    # beyond a pinned capacity: not a poisoned block of the pool at all
    assert carve(256 * MiB, 2, A, [(300 * MiB, 64)]).skipped == ()


def test_a_node_target_is_never_carved():
    t = Target("node2", "numa", DEV, "test", None, 0, "", 2, ((0, 64),))
    p = plan(2, [t], "explicit", explicit=["node2"] * 2)
    assert p.carved == () and [s.offset_bytes for s in p.slots] == [None, None]


def test_tune_sizes_from_the_carved_slices():
    placement = rankplan.Placement("round_robin", ("dax0.0", "dax0.0"))
    assert rankplan.pool_bytes_per_rank(placement, [_dev()]) == 256 * MiB
    assert rankplan.pool_bytes_per_rank(placement, [_dev(poison=[(POISONED, 64)])]) == 254 * MiB


# ---- the recorded poison: serve's plan --------------------------------------------------------

def _profile(strict=True, ranks=4):
    from sactool.profile import load_profile, validate

    p = load_profile(SAC)
    return validate(replace(p, sglang=replace(p.sglang, tp_size=ranks, attn_dp_size=ranks),
                            pool=replace(p.pool, gpu_local_nodes=(0, 1) * (ranks // 2), strict=strict)))


def _check(prof, reader):
    from sactool.pool.capacity import check_pool
    from sactool.pool.plan import PoolSpec

    return check_pool(PoolSpec.of(prof), reader)


@pytest.fixture
def poisoned(tmp_path) -> Path:
    return unpack("sac2s-live__20-poison", tmp_path / "poison")


@pytest.mark.parametrize("strict", [True, False])
def test_the_recorded_poison_is_carved_around(poisoned, strict):
    """sac2s-live__20-poison (the live kernel's record at dax0.0 + 0x10001000): 4 ranks round-robin on
    the two 512 MiB devices; dax0.0's slices become 254 MiB at 0 and 0x10200000 (the poisoned 2 MiB
    block skipped), dax1.0 keeps its 256 MiB slices; serve's health check passes, strict or not."""
    from sactool.serve.health import check_health

    reader = SysfsReader(poisoned)
    prof = _profile(strict=strict)
    pool = _check(prof, reader)
    rows = {s.rank: (s.target, s.offset_bytes, s.size_bytes) for s in pool.plan.slots}
    assert rows == {0: ("dax0.0", 0, 254 * MiB), 1: ("dax1.0", 0, 256 * MiB),
                    2: ("dax0.0", 0x10200000, 254 * MiB), 3: ("dax1.0", 256 * MiB, 256 * MiB)}
    assert not rows[2][1] <= POISONED < rows[2][1] + rows[2][2]
    (name, c), = pool.plan.carved
    assert name == "dax0.0" and c.skipped == ((0x10000000, 0x10200000),) and c.poison == ((POISONED, 64),)
    check_disjoint(pool.plan, pool.facts)
    lines = check_health(prof, reader, pool.plan)
    assert any(x.startswith("poison skipped: the slices of dax0.0 are carved around it: mem1 DPA 0x10001000")
               for x in lines), lines
    assert not any(x.startswith("warning:") for x in lines)


def test_poison_read_after_the_plan_still_refuses_strict(poisoned):
    """The safety net: a plan made without the record (it appeared after the pool check read the lists)
    holds it in rank 2's slice; serve's health check refuses that, strict, and warns otherwise."""
    from sactool.pool.plan import PoolSpec, rank_plan
    from sactool.serve.health import check_health

    reader = SysfsReader(poisoned)
    pool = _check(_profile(), reader)
    stale = rank_plan(PoolSpec.of(_profile()), [replace(t, poison=None) for t in pool.facts])
    with pytest.raises(TopologyError, match="poison in rank 2's slice of dax0.0 at pool offset 0x1000") as e:
        check_health(_profile(), reader, stale)
    assert e.value.exit_code == 3 and "run serve again" in e.value.hint
    lines = check_health(_profile(strict=False), reader, stale)
    assert any(x.startswith("warning: poison in rank 2's slice") for x in lines)


def test_cleared_poison_restores_the_plain_plan(poisoned):
    (poisoned / "sactool" / "capture" / "cxl_poison.trace").write_text("")   # the list read again: empty
    pool = _check(_profile(), SysfsReader(poisoned))
    assert pool.plan.carved == ()
    assert [(s.target, s.offset_bytes, s.size_bytes) for s in pool.plan.slots] == [
        ("dax0.0", 0, 256 * MiB), ("dax1.0", 0, 256 * MiB), ("dax0.0", 256 * MiB, 256 * MiB), ("dax1.0", 256 * MiB, 256 * MiB)]
    assert [t.poison for t in pool.facts] == [(), ()]


def test_probe_names_the_rank_of_the_plain_plan(poisoned):
    """probe --profile places the record in the slices made without it (what an engine launched before it
    maps): rank 2's pool + 0x1000, as the live check asserts."""
    from sactool.cli.probe import with_ranks
    from sactool.topology import probe

    reader = SysfsReader(poisoned)
    topo = with_ranks(probe(reader), reader, _profile())
    (p,) = [x for h in topo.health for x in (h.poison or ())]
    assert (p.rank, p.pool_target, p.pool_offset_bytes) == (2, "dax0.0", 0x1000)


def test_serve_dry_run_shows_the_carved_plan_and_hands_it_to_the_ranks(poisoned, tmp_path, capsys):
    from sactool.cli import main
    from sactool.profile import save_profile

    path = save_profile(_profile(), tmp_path / "sac4.yaml")
    rc = main(["serve", "--profile", str(path), "--dry-run", "--format", "json", "--sysfs-root", str(poisoned)])
    out = json.loads(capsys.readouterr().out)
    # only what this recording and this interpreter lack: a GPU (the QEMU machine has none, 3), SGLang (8)
    assert rc == 3 and [p["exit_code"] for p in out["problems"]] == [3, 8], out["problems"]
    assert "no NVIDIA GPU is seen" in out["problems"][0]["message"]
    assert {r["rank"]: r["offset_bytes"] for r in out["plan"]} == {0: 0, 1: 0, 2: 0x10200000, 3: 256 * MiB}
    carved = [c for c in out["checks"] if c.startswith("slices carved: ")]
    assert carved == ["slices carved: dax0.0: skipped [0x10000000, 0x10200000) (the 2.00 MiB align blocks "
                      "holding poison at +0x10001000, 64 B); 2 slices of 254.00 MiB (256.00 MiB without poison) "
                      "at offsets 0x0, 0x10200000"]
    assert out["plan_carved"][0]["skipped"] == [[0x10000000, 0x10200000]]
    assert json.loads(out["env_delta"][POISON_ENV]) == {"dax0.0": [[POISONED, 64]], "dax1.0": []}


def test_the_vllm_pools_are_carved_too(poisoned, tmp_path):
    """vLLM, 2 DP replicas sharing dax0.0 (one pool each, read by their TP ranks): the same carve."""
    import dataclasses

    from sactool.profile import load_profile
    from sactool.serve.vllm_capacity import check_pool

    p = load_profile(REPO / "profiles" / "examples" / "vllm-dp2-devdax.yaml")
    p = dataclasses.replace(p, vllm=dataclasses.replace(p.vllm, host_pool_gib=0.1),
                            pool=dataclasses.replace(p.pool, rank_targets=("dax0.0", "dax0.0")))
    cap = check_pool(p, SysfsReader(poisoned), live_shm=False)
    assert [(o.owner, o.offset_bytes, o.slice_bytes) for o in cap.owners] == [(0, 0, 254 * MiB), (1, 0x10200000, 254 * MiB)]
    assert any(x.startswith("slices carved: dax0.0: skipped [0x10000000, 0x10200000)") for x in cap.lines)
    assert cap.facts[0].poison == ((POISONED, 64),)


# ---- the contract and the placer --------------------------------------------------------------

def test_the_contract_round_trips_and_refuses_garbage():
    v = poison_value({"dax0.0": ((POISONED, 64),), "dax1.0": (), "dax2.0": None})
    assert poison_from_env({POISON_ENV: v}) == {"dax0.0": ((POISONED, 64),), "dax1.0": ()}
    assert poison_value({"dax0.0": None}) is None and poison_from_env({}) is None
    for bad in ("[1,2]", "{\"dax0.0\": [[1]]}", "{\"dax0.0\": [[-1, 2]]}", "not json"):
        with pytest.raises(ValueError, match=POISON_ENV):
            poison_from_env({POISON_ENV: bad})


def _standin(monkeypatch, tmp_path, size=64 * MiB):
    from sactool.pool.contract import STANDIN_ENV

    devs = {}
    for d in range(2):
        f = tmp_path / f"dax{d}.0"
        with open(f, "wb") as fh:
            fh.truncate(size)
        devs[f"dax{d}.0"] = {"path": str(f), "align_bytes": A}
    monkeypatch.setenv(STANDIN_ENV, json.dumps(devs))
    return devs


def _devdax_spec(ranks=4):
    from sactool.pool.plan import PoolSpec

    prof = _profile(strict=True, ranks=ranks)
    return PoolSpec.of(replace(prof, pool=replace(prof.pool, prefault_threads=1, capacity_bytes=None)))


def test_each_rank_maps_its_carved_slice(monkeypatch, tmp_path, caplog):
    """Four ranks, each in a placer of its own (as in four processes), given serve's poison set: each maps
    the carved offset of its device (stand-in files), and bytes written through it read back through a
    second mmap; rank 2's slice of dax0.0 no longer holds the poisoned offset."""
    import logging

    from sactool.pool.placer import HostPoolPlacer

    caplog.set_level(logging.WARNING, logger="sactool")
    devs = _standin(monkeypatch, tmp_path)
    bad = 32 * MiB + 0x1000                       # rank 2's plain slice of the 64 MiB stand-in, + 4 KiB
    monkeypatch.setenv(POISON_ENV, poison_value({"dax0.0": ((bad, 64),), "dax1.0": ()}))
    got = {}
    for r in range(4):
        placer = HostPoolPlacer(_devdax_spec(), strict=True)
        try:
            buf = placer.place(r, 4 * MiB)
            assert buf is not None, caplog.text
            plan = placer.plan_for(r)
            got[r] = (plan.target, buf.offset_bytes, plan.slot.size_bytes)
            buf.mmap[0:8] = bytes([0x50 + r]) * 8
            with open(devs[plan.target]["path"], "rb") as f:
                second = mmap.mmap(f.fileno(), A, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=buf.offset_bytes)
            try:
                assert second[0:8] == bytes([0x50 + r]) * 8
            finally:
                second.close()
        finally:
            placer.close()
    assert got == {0: ("dax0.0", 0, 30 * MiB), 1: ("dax1.0", 0, 32 * MiB),
                   2: ("dax0.0", 34 * MiB, 30 * MiB), 3: ("dax1.0", 32 * MiB, 32 * MiB)}
    assert not 34 * MiB <= bad < 64 * MiB
    assert "slices carved around known poison ($SACTOOL_POOL_POISON): dax0.0: skipped [0x2000000, 0x2200000)" in caplog.text
    # the same ranks with the poison cleared (serve hands an empty set): the plain slices again
    monkeypatch.setenv(POISON_ENV, poison_value({"dax0.0": (), "dax1.0": ()}))
    placer = HostPoolPlacer(_devdax_spec(), strict=True)
    assert [placer.plan_for(r).offset_bytes for r in range(4)] == [0, 0, 32 * MiB, 32 * MiB]


def test_a_malformed_poison_set_stops_a_strict_rank(monkeypatch, tmp_path):
    from sactool.pool.placer import HostPoolPlacer, PlacementStop

    _standin(monkeypatch, tmp_path)
    monkeypatch.setenv(POISON_ENV, "{oops")
    with pytest.raises(PlacementStop, match=POISON_ENV):
        HostPoolPlacer(_devdax_spec(), strict=True).place(0, 4 * MiB)


def test_watch_compares_with_the_slices_the_engine_was_handed(poisoned):
    """watch plans each rank's slice from the set serve handed the engine ($SACTOOL_POOL_POISON in the
    engine's /proc/PID/environ), not from what it would read itself: here the engine was handed a record
    on dax1.0 only (the recording's own list names dax0.0), and watch's plan follows the engine."""
    from sactool.watch.plan import plan_rows

    proc = poisoned / "proc" / "4242"
    proc.mkdir(parents=True)
    given = poison_value({"dax0.0": (), "dax1.0": ((0x40, 64),)})
    (proc / "environ").write_bytes(f"PATH=/usr/bin\0{POISON_ENV}={given}\0".encode())
    rows, note = plan_rows(_profile(), SysfsReader(poisoned), [4242])
    assert [(r.target, r.offset_bytes, r.size_bytes) for r in rows] == [
        ("dax0.0", 0, 256 * MiB), ("dax1.0", A, 254 * MiB), ("dax0.0", 256 * MiB, 256 * MiB), ("dax1.0", 256 * MiB, 254 * MiB)]
    assert note.startswith(f"slices carved around known poison (${POISON_ENV} of pid 4242): dax1.0: skipped [0x0, 0x200000)")
