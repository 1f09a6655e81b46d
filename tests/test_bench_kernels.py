"""Kernel correctness on small arrays: the chase visits every line exactly once per cycle, gathers
copy exactly the right bytes, sequential kernels compute what they claim."""

from __future__ import annotations

import numpy as np
import pytest

from sactool.bench import indices
from sactool.bench import kernels as K
from sactool.bench import suite
from sactool.bench.gathergen import gather_kernel, source
from sactool.errors import RecordError, UsageError

WPL = suite.WPL


def walk(words, start, n):
    out, i = [], int(start)
    for _ in range(n):
        out.append(i)
        i = int(words[i])
    return out, i


@pytest.mark.parametrize("page_local", [False, True])
def test_chase_visits_every_line_once(page_local):
    lines = 4 * 64 * 8  # 8 pages per half
    words = np.zeros(lines * WPL, dtype=np.uint64)
    half = lines // 2
    order = suite.build_chain(words, half, half, page_local=page_local, seed=5)
    visited, back = walk(words, order[0], half)
    assert back == int(order[0])  # one cycle
    assert sorted(visited) == [(half + k) * WPL for k in range(half)]  # each line of the half once
    assert int(K.chase(words, order[0], half)) == int(order[0])
    assert int(K.chase(words, order[0], 7)) == visited[7]
    if page_local:  # the 64 lines of a page come one after another
        pages = [v * 8 // 4096 for v in visited]
        runs = [pages[i:i + 64] for i in range(0, half, 64)]
        assert all(len(set(r)) == 1 for r in runs)
        assert len({r[0] for r in runs}) == len(runs)


def test_mlp_chains_match_single_chases():
    words = np.zeros(512 * WPL, dtype=np.uint64)
    order = suite.build_chain(words, 0, 512, page_local=False, seed=2)
    starts = np.array([order[0], order[100], order[300]], dtype=np.uint64)
    ends = [int(K.chase(words, s, 37)) for s in starts]
    got = K.mlp_chase(words, starts, 37)
    assert int(got) == ends[0] ^ ends[1] ^ ends[2]
    assert starts.tolist() == ends  # advanced in place: the next call continues along the chains


def test_latency_samples_continue_along_the_chain():
    """Each sample walks new lines (restarting would re-read a prefix that may sit in the LLC)."""
    words = np.zeros(3000 * WPL, dtype=np.uint64)  # 3000 does not divide CHASE_STEPS
    order = suite.build_chain(words, 0, 3000, page_local=False, seed=3)
    seen = []

    def spy(w, start, steps):
        seen.append(int(start))
        return K.chase(w, start, steps)

    m = suite.latency(words, order, 0, "random", chase_fn=spy)
    m.cfg.run(1)
    m.cfg.run(1)
    _, after = walk(words, order[0], suite.CHASE_STEPS)
    assert seen[0] == int(order[0]) and seen[1] == after != int(order[0])  # 2nd call starts where the 1st stopped


@pytest.mark.parametrize("record_bytes,prefetch", [(656, 8), (100, 3), (64, 64), (4096, 2), (16384, 1), (24, 0)])
def test_gather_copies_exactly_the_right_bytes(record_bytes, prefetch):
    """Every slot holds record (idx + shift) mod records, byte for byte, for shifts that wrap and not."""
    rng = np.random.default_rng(0)
    records = 300
    src = rng.integers(0, 256, size=record_bytes * records + 5, dtype=np.uint8)   # a tail past the records
    topk = 16  # one step; slots = 16
    idx = indices.uniform(records, topk, 1, seed=4)
    idx[3] = records - 1  # last record
    idx[4] = 0
    dst = np.zeros(16 * record_bytes, dtype=np.uint8)
    for shift in (0, 17, records - 1):
        gather_kernel(record_bytes, prefetch)(src, dst, idx, 0, topk, shift, records)
        for slot, r in enumerate(idx):
            r = (int(r) + shift) % records
            assert bytes(dst[slot * record_bytes:(slot + 1) * record_bytes]) == bytes(src[r * record_bytes:(r + 1) * record_bytes])


def test_gather_range_and_slot_wraparound():
    src = np.arange(64 * 8, dtype=np.uint64).view(np.uint8)  # 64 records of 64 B: word 0 of record r is 8r
    dst = np.zeros(4 * 64, dtype=np.uint8)  # 4 slots
    idx = np.array([5, 9, 2, 7, 11, 3], dtype=np.uint64)
    gather_kernel(64, 0)(src, dst, idx, 2, 6, 0, 64)  # records i=2..5 → slots 2,3,0,1
    got = dst.view(np.uint64).reshape(4, 8)[:, 0] // 8
    assert got.tolist() == [11, 3, 2, 7]


def test_the_gathers_ring_is_page_aligned_on_every_thread():
    """suite.gather hands each thread a page-aligned ring (not np.zeros's 16 B past a page): a
    4096 B memcpy from line-aligned records into a misaligned ring ran 15-35 % slower
    (docs/accuracy/bench.md, "The C program's own buffer")."""
    src = np.zeros(64 * 4096, dtype=np.uint8)
    idx = indices.uniform(64, 8, 4, seed=1)
    seen = []

    def kern(s, dst, ix, lo, hi, shift, records):
        seen.append(dst.ctypes.data)

    m = suite.gather(src, [0, 0], 2, 4096, 8, 2, idx, "uniform", kern=kern)
    m.cfg.run(1)
    assert len(set(seen)) == 2 and all(a % 4096 == 0 for a in seen)


def test_gather_arguments_are_checked_before_raw_addresses():
    from sactool.bench.gathergen import check_args

    src, dst = np.zeros(656 * 10, dtype=np.uint8), np.zeros(656 * 4, dtype=np.uint8)
    idx = np.array([0, 9], dtype=np.uint64)
    check_args(src, dst, idx, 0, 2, 656, 10)
    with pytest.raises(ValueError, match="outside the 9 records"):
        check_args(src, dst, idx, 0, 2, 656, 9)
    with pytest.raises(ValueError, match="do not fit"):
        check_args(src, dst, idx, 0, 2, 656, 11)
    with pytest.raises(ValueError, match="power of two"):
        check_args(src, np.zeros(656 * 3, dtype=np.uint8), idx, 0, 2, 656, 10)
    with pytest.raises(ValueError, match="outside the 2 indices"):
        check_args(src, dst, idx, 0, 3, 656, 10)


def test_generated_source_is_deterministic():
    assert source(656, 16) == source(656, 16) and "copy_bytes(out + (i & mask) * RB, base + r * RB, 656)" in source(656, 16)
    assert "prefetch_addr(" not in source(100, 0)       # D = 0: no prefetch at all
    assert "np.uint64(512), np.uint64(64)" in source(4096, 2)    # a large record: its first 512 B prefetched
    assert "np.uint64(100), np.uint64(64)" in source(100, 12) and "np.uint64(99)" in source(100, 12)   # whole, last line
    # a 656 B record (DeepSeek-V3.2's): its first 512 B, and the line of byte 511 where the record is not line aligned
    assert "np.uint64(512), np.uint64(64)" in source(656, 12) and "np.uint64(511)" in source(656, 12)
    assert "np.uint64(656), np.uint64(64)" not in source(656, 12)


def test_pass_shifts_cover_the_records():
    """The per-pass shifts of one thread are spread over every record (the working set is the buffer)."""
    shifts = [suite.pass_shift(1, 0, n, 1000) for n in range(4000)]
    assert min(shifts) >= 0 and max(shifts) < 1000 and len(set(shifts)) > 950
    assert shifts[:10] != [suite.pass_shift(1, 1, n, 1000) for n in range(10)]   # threads differ
    assert shifts[:10] == [suite.pass_shift(1, 0, n, 1000) for n in range(10)]   # reproducible


def test_sequential_kernels():
    a = np.arange(1000, dtype=np.uint64)
    assert int(K.seq_read(a, 10, 500)) == int(a[10:500].sum())
    K.seq_write(a, 0, 1000, 5)
    assert (a == (np.uint64(5) ^ np.arange(1000, dtype=np.uint64))).all()
    b = np.arange(100, dtype=np.uint64)
    K.seq_copy(b, 0, 50, 50)
    assert (b[50:] == (np.arange(50, dtype=np.uint64) ^ np.uint64(1))).all()
    c = np.ones(64, dtype=np.uint64)
    assert int(K.throttled_read(c, 0, 64, 0)) == 8 + 1  # one word per line, x stays 1


def test_index_patterns():
    u = indices.uniform(1000, 50, 20, seed=1).reshape(20, 50)
    assert all(len(set(r.tolist())) == 50 for r in u) and u.max() < 1000
    c = indices.clustered(1000, 48, 5, seed=1, run=16).reshape(5, 48)
    assert (np.diff(c[:, :16], axis=1) == 1).all() and c.max() < 1000
    with pytest.raises(UsageError):
        indices.make("uniform", 10, 11, 1)
    with pytest.raises(UsageError):
        indices.make("zipf", 10, 1, 1)


def test_trace_files(tmp_path):
    t = tmp_path / "t.txt"
    t.write_text("1 2 3\n4,5,6\n")
    assert indices.load_trace(t, 10).tolist() == [1, 2, 3, 4, 5, 6]
    n = tmp_path / "t.npy"
    np.save(n, np.array([[0, 9], [3, 4]]))
    assert indices.load_trace(n, 10).tolist() == [0, 9, 3, 4]
    with pytest.raises(RecordError):
        indices.load_trace(n, 5)  # index beyond the buffer: the trace does not match it (exit 4, README)
    with pytest.raises(RecordError):
        indices.load_trace(tmp_path / "missing.npy", 10)
    bad = tmp_path / "bad.txt"
    bad.write_text("1 two 3")
    with pytest.raises(RecordError):
        indices.load_trace(bad, 10)
    binary = tmp_path / "b.npy"
    binary.write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(RecordError):
        indices.load_trace(binary, 10)


def test_walkers_start_apart():
    from sactool.bench.runner import walker_slots

    order = np.arange(1000, dtype=np.uint64) * np.uint64(WPL)
    assert suite.slot_start(order, 0, 4) == 0 and suite.slot_start(order, 3, 4) == 750 * WPL
    slots, first, loaded_first = walker_slots()
    used = [0] + [first[n] + k for n in suite.MLP_CHAINS for k in range(n)] + \
        [loaded_first + i for i in range(len(suite.LOADED_DELAYS))]
    assert sorted(used) == list(range(slots))  # every walker has its own slot
    m = suite.mlp(np.zeros(1000 * WPL, dtype=np.uint64), order, 0, 4, first[4], slots)
    assert m.params["chains"] == 4
