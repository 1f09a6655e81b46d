"""Hot-buffer LRU simulation against a slot-level pure-Python transcription of the SGLang kernel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sactool.errors import UsageError
from sactool.hisparse.hotbuffer import simulate, simulate_many


def kernel_reference(indices, H, ctx, *, reserve=True, pd=False, fork=False):
    """Misses [steps, layers], written the way hisparse.cuh does it: physical slots, an LRU
    array of slot numbers, hits compacted forward and evictables backward in ``lru_out``, the
    j-th miss taking ``lru_out[H-1-j]``, and the three-way write-back of K:683-689 — or, with
    ``fork``, the SAC fork kernel's two-way write-back done before the miss pass (F:270-287)."""
    steps, layers, k = indices.shape
    out = np.zeros((steps, layers), dtype=np.int64)
    for layer in range(layers):
        buffer_tokens = list(range(H))          # alloc_device_buffer: slot i holds token i
        lru_slots = list(range(H))              # _lru_init
        if pd and ctx > H:
            buffer_tokens = [-1] * H            # admit_request_direct, long prompt
        for s in range(steps):
            seq = ctx + s
            if seq <= H:
                continue
            newest = seq - 1
            topk = [int(t) for t in indices[s, layer]]
            pending = {t: i for i, t in enumerate(topk) if not (reserve and t == newest)}
            hit_idx = set()
            lru_out = [None] * H
            n_hit = n_ev = 0
            for pos in range(H):
                slot = lru_slots[pos]
                tok = buffer_tokens[slot]
                if tok >= 0 and tok in pending:
                    hit_idx.add(pending[tok])
                    lru_out[n_hit] = slot
                    n_hit += 1
                else:
                    lru_out[H - 1 - n_ev] = slot
                    n_ev += 1
            total_evictable = H - n_hit
            if fork:   # the fork writes the order back first: evictables (old order), then hits
                lru_slots = [lru_out[H - 1 - i] if i < total_evictable else lru_out[i - total_evictable]
                             for i in range(H)]
            n_miss = 0
            for i, t in enumerate(topk):
                if (reserve and t == newest) or i in hit_idx:
                    continue
                slot = lru_out[H - 1 - n_miss]
                buffer_tokens[slot] = t
                n_miss += 1
            out[s, layer] = n_miss
            if fork:
                continue
            new = [None] * H
            for i in range(H):
                if i < n_miss:
                    new[total_evictable - n_miss + i] = lru_out[H - 1 - i]
                elif i < total_evictable:
                    new[i - n_miss] = lru_out[H - 1 - i]
                else:
                    new[i] = lru_out[i - total_evictable]
            lru_slots = new
    return out


@st.composite
def traces(draw):
    k = draw(st.integers(1, 6))
    ctx = draw(st.integers(k, 24))
    steps = draw(st.integers(1, 12))
    layers = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    local = draw(st.booleans())
    idx = np.empty((steps, layers, k), dtype=np.int32)
    for s in range(steps):
        for layer in range(layers):
            seq = ctx + s
            if local:  # mostly recent tokens, so hits and reuse happen
                pool = np.arange(max(0, seq - 2 * k - 2), seq)
                if pool.size < k:
                    pool = np.arange(seq)
            else:
                pool = np.arange(seq)
            row = rng.choice(pool, size=k, replace=False)
            if rng.random() < 0.7 and seq - 1 not in row:
                row[0] = seq - 1
            idx[s, layer] = rng.permutation(row)
    H = draw(st.integers(k, k + 8))
    return idx, ctx, H


@settings(max_examples=300, deadline=None)
@given(traces(), st.booleans(), st.booleans(), st.booleans())
def test_matches_kernel_reference(trace, reserve, pd, fork):
    idx, ctx, H = trace
    mode = "pd" if pd else "colocated"
    got = simulate(idx, H, context_tokens=ctx, reserve_newest=reserve, mode=mode,
                   kernel="sac-fork" if fork else "sglang-0.5.23")
    want = kernel_reference(idx, H, ctx, reserve=reserve, pd=pd, fork=fork)
    assert np.array_equal(got.misses, want)
    steps, layers, k = idx.shape
    assert got.hit_rate == pytest.approx(1 - want.sum() / (steps * layers * k))


def test_simulate_many_equals_single():
    rng = np.random.default_rng(1)
    ctx, k = 300, 16
    idx = np.stack([np.stack([rng.choice(ctx + s, k, replace=False) for _ in range(3)])
                    for s in range(40)]).astype(np.int32)
    many = simulate_many(idx, [16, 24, 64], context_tokens=ctx)
    for r in many:
        one = simulate(idx, r.buffer_size, context_tokens=ctx)
        assert np.array_equal(r.misses, one.misses)
    # a bigger LRU never misses more in total on this trace (LRU has no Belady anomaly)
    totals = [r.misses.sum() for r in many]
    assert totals == sorted(totals, reverse=True)


def test_fast_path_and_newest_slot():
    # context 8, buffer 10: steps 0..2 have seq_len <= 10 -> no misses at all
    ctx, H = 8, 10     # top-k of 3 per step below
    idx = np.array([[[ctx + s - 1, 0, 1]] for s in range(5)], dtype=np.int32)
    r = simulate(idx, H, context_tokens=ctx)
    assert r.misses[:3, 0].tolist() == [0, 0, 0]
    # seq 11: tokens 0, 1 resident (slot i holds token i), newest 10 in the reserved slot
    assert r.misses[3, 0] == 0
    # without the reserved slot the newest token must be fetched
    r2 = simulate(idx, H, context_tokens=ctx, reserve_newest=False)
    assert r2.misses[3, 0] == 1 and r2.misses[4, 0] == 1


def test_fork_kernel_evicts_a_just_loaded_token_first():
    """SAC fork: the LRU order is written back before the misses fill their slots, so a token loaded
    at one step and skipped at the next is the first evicted; 0.5.23 keeps it ahead of stale ones."""
    ctx, H = 100, 3                      # colocated start: slots hold tokens 0, 1, 2 (LRU 0, 1, 2)
    idx = np.array([[[0, 50]], [[0, 60]], [[0, 50]]], dtype=np.int32)
    new = simulate(idx, H, context_tokens=ctx, reserve_newest=False)
    fork = simulate(idx, H, context_tokens=ctx, reserve_newest=False, kernel="sac-fork")
    # step 0: 50 replaces token 1; step 1: 60 replaces token 2 (0.5.23) or the just-loaded 50 (fork)
    assert new.misses[:, 0].tolist() == [1, 1, 0] and new.kernel == "sglang-0.5.23"
    assert fork.misses[:, 0].tolist() == [1, 1, 1] and fork.to_data()["kernel"] == "sac-fork"
    with pytest.raises(UsageError, match="unknown HiSparse kernel"):
        simulate(idx, H, context_tokens=ctx, kernel="v0")


def test_previous_newest_token_is_a_miss():
    # once long, the reserved slot is reused: the token decoded one step earlier lives only on host
    ctx, H = 100, 4
    idx = np.array([[[ctx + s - 1, ctx + s - 2, 0, 1]] for s in range(6)], dtype=np.int32)
    r = simulate(idx, H, context_tokens=ctx)
    assert r.misses[0, 0] == 1           # 98 is not resident; 0, 1 are (colocated fill)
    assert r.misses[1:, 0].tolist() == [1] * 5
    pd = simulate(idx, H, context_tokens=ctx, mode="pd")
    assert pd.misses[0, 0] == 3          # PD long prompt: buffer starts empty
    assert pd.first_step_misses == 3


@pytest.mark.parametrize("bad", [
    lambda i: i.__setitem__((1, 0, 0), 10_000),     # beyond the sequence
    lambda i: i.__setitem__((2, 0, 1), i[2, 0, 0]),  # a duplicate
    lambda i: i.__setitem__((0, 0, 0), -1),
])
def test_bad_rows_rejected(bad):
    idx = np.array([[[50 + s - 1, 3, 4]] for s in range(4)], dtype=np.int32)
    bad(idx)
    with pytest.raises(UsageError):
        simulate(idx, 4, context_tokens=50)


@pytest.mark.parametrize("size", [2, 40000])
def test_buffer_size_bounds(size):
    idx = np.array([[[49, 3, 4]]], dtype=np.int32)
    with pytest.raises(UsageError, match="device_buffer_size"):
        simulate(idx, size, context_tokens=50)


def test_bad_mode():
    with pytest.raises(UsageError, match="mode"):
        simulate(np.array([[[49, 3, 4]]], dtype=np.int32), 4, context_tokens=50, mode="x")


def test_record_form_is_a_summary():
    import json

    from sactool.records import dumps

    idx = np.array([[[100 + s - 1, 100 + s - 2, 0, 1]] for s in range(6)], dtype=np.int32)
    r = simulate(idx, 4, context_tokens=100)
    d = json.loads(dumps(r, "json"))
    assert d["buffer_size"] == 4 and d["steps"] == 6 and d["steady_misses_per_layer"] == [1.0]
    assert "misses" not in d
