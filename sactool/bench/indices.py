"""Top-k index streams for gathers: uniform, clustered, or a recorded trace.

A stream is ``steps × topk`` record indices (uint64), one decode step after another: one *pass*. The
gather shifts every pass by a fresh random number of records (:mod:`sactool.bench.gathergen`), so
the stream only has to be long enough to make a pass cost far more than the call that runs it
(:func:`pass_steps`); the working set is the whole buffer whatever the stream's length, and no
stream has to be stored at the size of the cache.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sactool.errors import RecordError, UsageError

PATTERNS = ("uniform", "clustered", "trace")
CLUSTER_RECORDS = 16
"""Records per run in the clustered pattern: top-k entries come in runs of neighbouring tokens
(a modelling choice stated in the record, not a measured figure)."""


PASS_BYTES = 32 << 20
"""Bytes one pass over the stream gathers, at least: ~3–10 ms at 3–10 GB/s, so the per-pass call and
shift (a few µs) stay under 0.1 % of a sample."""
MIN_STEPS = 4
MAX_INDEX_BYTES = 8 << 20
"""The stored stream's cap (1 Mi indices): a pass needs no more, and the stream shares the cache."""


def pass_steps(record_bytes: int, topk: int) -> int:
    """Steps per pass: enough for :data:`PASS_BYTES`, at least :data:`MIN_STEPS`, at most
    :data:`MAX_INDEX_BYTES` of indices."""
    steps = max(MIN_STEPS, -(-PASS_BYTES // max(1, record_bytes * topk)))
    return int(min(steps, max(MIN_STEPS, MAX_INDEX_BYTES // (8 * topk))))


def uniform(records: int, topk: int, steps: int, seed: int) -> np.ndarray:
    """Each step: ``topk`` distinct records drawn uniformly, in draw order (not sorted: top-k
    output order carries no address order)."""
    rng = np.random.default_rng(seed)
    out = np.empty(steps * topk, dtype=np.uint64)
    for s in range(steps):
        if topk * 4 > records:  # dense: a permutation prefix is cheap and exact
            out[s * topk:(s + 1) * topk] = rng.permutation(records)[:topk]
            continue
        got = np.empty(0, dtype=np.uint64)
        while got.size < topk:  # draw with replacement, keep first occurrences, top up
            draw = np.concatenate([got, rng.integers(0, records, size=topk + topk // 8 + 8, dtype=np.uint64)])
            _, first = np.unique(draw, return_index=True)
            got = draw[np.sort(first)]
        out[s * topk:(s + 1) * topk] = got[:topk]
    return out


def clustered(records: int, topk: int, steps: int, seed: int, run: int = CLUSTER_RECORDS) -> np.ndarray:
    """Each step: runs of ``run`` consecutive records at uniform random starts (may overlap)."""
    rng = np.random.default_rng(seed)
    run = max(1, min(run, records))
    nruns = -(-topk // run)
    starts = rng.integers(0, records - run + 1, size=(steps, nruns), dtype=np.uint64)
    idx = (starts[:, :, None] + np.arange(run, dtype=np.uint64)[None, None, :]).reshape(steps, -1)[:, :topk]
    return np.ascontiguousarray(idx.reshape(-1))


def load_trace(path: str | Path, records: int, topk: int | None = None) -> np.ndarray:
    """Indices from a trace, one decode step after another: ``.npy`` integer array (2-D: one step
    per row; 1-D: consecutive runs of ``topk``), or text with whitespace/comma-separated integers,
    **one decode step per line** (blank lines skipped). Every step selects the same number of records
    — ``topk`` when given (a trace of other steps is refused with the count to pass) — and the trace
    holds at least one step; every index must be < ``records``. Returns the steps concatenated."""
    p = Path(path)
    try:
        from sactool.inputfile import open_input, read_input

        if p.suffix == ".npy":
            with open_input(p, what="trace") as f:   # a regular file no larger than a trace can be
                arr = np.load(f, allow_pickle=False)
            rows = None
        else:
            text = read_input(p, what="trace", limit=256 << 20).decode("utf-8")   # text: ~8 bytes an index
            rows = [[int(t) for t in line.replace(",", " ").split()] for line in text.splitlines() if line.strip()]
            arr = np.array([i for r in rows for i in r], dtype=np.int64)
    except FileNotFoundError:
        raise RecordError(f"trace {p} does not exist", "check the --trace path") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"trace {p} cannot be read: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                          "a trace is a .npy integer array or text of integers, one step per line") from None
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise RecordError(f"trace {p} holds no steps (no integer indices)",
                          "write one decode step per line: the record ids it selects")
    if rows is not None:
        lens = sorted({len(r) for r in rows})
    elif arr.ndim == 2:
        lens = [arr.shape[1]]
    elif arr.ndim == 1 and topk and arr.size % topk == 0:
        lens = [topk]
    else:
        lens = [arr.size] if arr.ndim == 1 else [-1]
    n_steps = len(rows) if rows is not None else arr.size // max(1, lens[0])
    if len(lens) > 1:
        raise RecordError(f"trace {p}: its {n_steps} steps (one per line) select {lens[0]} to {lens[-1]} records; "
                          "every step must select the same number", "one decode step per line, top-k ids each")
    if lens[0] <= 0 or arr.ndim > 2:
        raise RecordError(f"trace {p} is a {arr.ndim}-D array", "save steps as a 2-D array, one step per row")
    if topk is not None and lens[0] != topk:
        raise RecordError(f"trace {p}: each of its {n_steps} step(s) selects {lens[0]} records, and --topk is {topk}: "
                          "no whole top-k step could be gathered", f"pass --topk {lens[0]}, or a trace of top-{topk} steps")
    arr = arr.reshape(-1)
    if arr.min() < 0 or arr.max() >= records:
        raise RecordError(f"trace {p} has index {int(arr.max()) if arr.max() >= records else int(arr.min())} "
                          f"outside the buffer's {records} records", "use a larger --size or a matching trace")
    return arr.astype(np.uint64)


def make(pattern: str, records: int, topk: int, steps: int, seed: int = 1, trace: str | None = None) -> np.ndarray:
    if pattern not in PATTERNS:
        raise UsageError(f"unknown index pattern {pattern!r}", f"use one of: {', '.join(PATTERNS)}")
    if pattern == "trace":
        if not trace:
            raise UsageError("index pattern 'trace' needs a trace file", "pass --trace FILE")
        return load_trace(trace, records, topk)
    if topk > records:
        raise UsageError(f"top-k {topk} is larger than the {records} records in the buffer",
                         "use a smaller --topk or a larger --size")
    return (uniform if pattern == "uniform" else clustered)(records, topk, steps, seed)
