"""The measured configurations of each test, built on one placed buffer.

Buffer layout: the first half holds the page-local chase chain, the second half the fully random
chain (both are written before any timing, so every line is a real, written line); the readers of
the loaded-latency test read the first half while the chaser walks the second; gathers and
sequential reads span the whole buffer; write/copy run last (they overwrite the chains).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from sactool.bench import kernels as K
from sactool.bench.gathergen import gather_kernel, gather_spec
from sactool.bench.protocol import Config
from sactool.bench.stats import Stats
from sactool.bench.threads import run_pinned, split

LINE = K.LINE_BYTES
WPL = LINE // 8  # uint64 words per line
PAGE = 4096
CHASE_STEPS = 1 << 15
MLP_STEPS = 1 << 13
MLP_CHAINS = (1, 2, 4, 8, 12, 16, 24, 32)
LOADED_DELAYS = (0, 25, 50, 100, 200, 400, 800, 1600, 3200, None)  # None: idle (no readers)
DEFAULT_RECORDS = (64, 128, 256, 656, 1152, 4096)


PREFETCH_LEAD_BYTES = 32768
"""Bytes of records the gather's prefetch runs ahead of the record it copies: see :func:`default_prefetch`."""


def default_prefetch(record_bytes: int) -> int:
    """Software-prefetch distance in records: :data:`PREFETCH_LEAD_BYTES` (32 KiB) of records ahead of
    the copy, D = clamp(32768 / R, 2, 64): 64 B → 64, 656 B → 49, 1152 B → 28, 4096 B → 8, 16384 B → 2.
    Chosen from sweeps of D (and of P, :func:`sactool.bench.gathergen.prefetch_bytes`) for sactool's
    kernel and the C reference on one buffer (``scripts/gather-prefetch``, 2026-12-07, the 480 MiB-L3
    Xeon guest, one and two threads): 4096 B best at D = 8 (4-6 % over D = 2, 8 % over D = 12, both
    kernels), 16384 B at D = 1-2 (2-4 % over D = 8), 656 B and 1152 B flat within noise over D = 4-48 with
    a 512 B head, 64 B best at 32-128 (docs/sources.md, Numba kernels); the rule before (8 KiB ahead)
    left 4096 B at D = 2. The agreement with C is reported on other runs (scripts/bench-vs-c,
    docs/accuracy/bench.md); ``--prefetch`` overrides it."""
    return int(min(64, max(2, PREFETCH_LEAD_BYTES // max(1, int(record_bytes)))))


@dataclass
class Measure:
    """One configuration plus how its raw (seconds, work) samples become figures."""

    cfg: Config
    test: str
    params: dict
    spec: dict
    unit: str
    value: Callable[[float, float], float]
    derive: Callable[[Stats, "Measure"], dict]
    extra: list = field(default_factory=list)
    cpu: list = field(default_factory=list)  # per call: each thread's on-CPU seconds (thread_time)
    threads: int = 1


def _on_cpu(fn) -> float:
    """Run ``fn`` and return the calling thread's CPU seconds (``time.thread_time_ns``): time the
    thread was not running (another process had the CPU) is not counted."""
    t0 = time.thread_time_ns()
    fn()
    return (time.thread_time_ns() - t0) / 1e9


# ---- chains ----------------------------------------------------------------------------------
def chain_orders(lines: int, *, page_local: bool, seed: int) -> np.ndarray:
    """Visiting order of ``lines`` cache lines: fully random, or pages in random order with the
    lines of each page in random order (TLB-friendly, as lmbench/MLC's page-local walks)."""
    rng = np.random.default_rng(seed)
    if not page_local:
        return rng.permutation(lines).astype(np.uint64)
    lpp = PAGE // LINE
    pages = lines // lpp
    inner = rng.permuted(np.tile(np.arange(lpp, dtype=np.uint64), (pages, 1)), axis=1)
    order = (rng.permutation(pages).astype(np.uint64)[:, None] * np.uint64(lpp) + inner).reshape(-1)
    return order


def build_chain(words: np.ndarray, first_line: int, lines: int, *, page_local: bool, seed: int) -> np.ndarray:
    """Link a chain over ``lines`` lines starting at line ``first_line``; returns its order (word indices)."""
    order = chain_orders(lines, page_local=page_local, seed=seed) + np.uint64(first_line)
    K.link_chain(words, order, WPL)
    return order * np.uint64(WPL)


# ---- builders --------------------------------------------------------------------------------
def _lat_derive(s: Stats, m: Measure) -> dict:
    return {"latency_ns": s.median}


def slot_start(order_word_idx, slot: int, slots: int) -> int:
    """Start of walker ``slot`` of ``slots`` on a chain: walkers start evenly spread along the
    cycle, so one walker never follows another over lines it just brought into the cache."""
    n = len(order_word_idx)
    return int(order_word_idx[(slot * n) // max(1, slots) % n])


def latency(words, order_word_idx, cpu: int, variant: str, chase_fn=None, slot: int = 0, slots: int = 1,
            pos: dict | None = None) -> Measure:
    """``chase_fn(words, start, steps)`` replaces the numba chase; ``pos`` ({"at": word index}) may be
    shared by several measures, each then continuing where the previous one stopped
    (scripts/compare-anchors runs its C reference this way: same buffer, same chain, same lines)."""
    if pos is None:  # each call continues where the last one stopped: samples walk new lines,
        pos = {"at": slot_start(order_word_idx, slot, slots)}  # not a prefix that may sit in the LLC
    chase_fn = chase_fn or K.chase

    def walk(n: int) -> None:
        pos["at"] = int(chase_fn(words, pos["at"], n))

    on_cpu: list = []    # closures append here, not to the Measure: no cycle holds the buffer
    extra: list = []

    def run(reps: int) -> float:
        on_cpu.append(run_pinned([cpu], lambda i: _on_cpu(lambda: walk(reps * CHASE_STEPS))))
        return reps * CHASE_STEPS

    m = Measure(Config(f"latency/{variant}", run), "latency", {"variant": variant, "chain_lines": len(order_word_idx)},
                K.KERNEL_SPECS["chase"], "ns", lambda s, w: s * 1e9 / w, _lat_derive, cpu=on_cpu, extra=extra)
    return m


def mlp(words, order_word_idx, cpu: int, chains: int, first_slot: int = 0, slots: int | None = None) -> Measure:
    """Chains start at walker slots ``first_slot … first_slot+chains-1`` of ``slots`` (see :func:`slot_start`)."""
    slots = slots or chains
    starts = np.array([slot_start(order_word_idx, first_slot + k, slots) for k in range(chains)], dtype=np.uint64)

    on_cpu: list = []    # closures append here, not to the Measure: no cycle holds the buffer
    extra: list = []

    def run(reps: int) -> float:
        # mlp_chase advances ``starts`` in place: the next call continues along the chains
        on_cpu.append(run_pinned([cpu], lambda i: _on_cpu(lambda: K.mlp_chase(words, starts, reps * MLP_STEPS))))
        return reps * MLP_STEPS

    def derive(s: Stats, m: Measure) -> dict:
        return {"latency_ns": s.median, "outstanding_misses": chains,
                "bandwidth_bytes_per_s": chains * LINE / (s.median * 1e-9)}

    m = Measure(Config(f"mlp/{chains}", run), "mlp", {"chains": chains, "variant": "random"},
                K.KERNEL_SPECS["mlp"], "ns", lambda s, w: s * 1e9 / w, derive, cpu=on_cpu, extra=extra)
    return m


def sequential(words, cpus: list[int], threads: int, op: str) -> Measure:
    use = cpus[:threads]
    parts = split(words.size, threads, align=WPL * 64)
    nbytes = {"read": 8, "write": 8, "copy": 16}[op]

    def one(i: int, reps: int) -> float:
        t0 = time.thread_time_ns()
        lo, hi = parts[i]
        for r in range(reps):
            if op == "read":
                K.seq_read(words, lo, hi)
            elif op == "write":
                K.seq_write(words, lo, hi, r + 1)
            else:
                half = (hi - lo) // 2
                K.seq_copy(words, lo, lo + half, half)
        return (time.thread_time_ns() - t0) / 1e9

    on_cpu: list = []    # closures append here, not to the Measure: no cycle holds the buffer
    extra: list = []

    def run(reps: int) -> float:
        on_cpu.append(run_pinned(use, lambda i: one(i, reps)))
        total_words = sum(((hi - lo) // 2) if op == "copy" else (hi - lo) for lo, hi in parts)
        return reps * total_words * nbytes

    def derive(s: Stats, m: Measure) -> dict:
        return {"bandwidth_bytes_per_s": s.median}

    m = Measure(Config(f"{op}/{threads}t", run), op, {"threads": threads, "cpus": use},
                K.KERNEL_SPECS[op], "bytes_per_s", lambda s, w: w / s, derive, threads=threads, cpu=on_cpu, extra=extra)
    return m


SHIFT_MULT = 0x9E3779B97F4A7C15
"""splitmix64's increment (2^64 / golden ratio): consecutive pass numbers map to well-spread states."""


def pass_shift(seed: int, thread: int, n: int, records: int) -> int:
    """The record shift of pass ``n`` of thread ``thread``: splitmix64 of (seed, thread, n), mod ``records``
    (a counter-based generator: no state, the same shifts on every run with that seed)."""
    z = (seed * 0x100000001B3 + thread * 0x1000193 + (n + 1) * SHIFT_MULT) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) % records


def gather(src_bytes, cpus: list[int], threads: int, record_bytes: int, topk: int, prefetch: int,
           indices: np.ndarray, pattern: str, kern=None, *, records: int | None = None, seed: int = 1) -> Measure:
    """Top-k gathers of ``record_bytes`` records over the first ``records`` records of ``src_bytes``
    (None: all it holds), by ``threads`` pinned threads, each copying into its own ring of top-k slots.

    The stored ``indices`` are one pass; every pass of every thread is shifted by a fresh random number
    of records (:func:`pass_shift`, :mod:`sactool.bench.gathergen`), so the working set is the
    ``records`` records, however short the stream. ``kern(src, dst, idx, lo, hi, shift, records)``
    replaces the generated numba gather (the C references of scripts/ run this way, on the same
    buffer, indices and shifts)."""
    from sactool.bench.gathergen import check_args, prefetch_bytes
    from sactool.memory.placed import aligned_zeros

    records = records or src_bytes.size // record_bytes
    src = src_bytes[: records * record_bytes]
    kern = kern or gather_kernel(record_bytes, prefetch)
    use = cpus[:threads]
    parts = split(indices.size, threads)
    slots = 1 << max(0, (topk - 1).bit_length())
    dsts = [aligned_zeros(slots * record_bytes) for _ in use]   # page aligned, as a serving engine's staging buffer
    for lo, hi in parts:
        check_args(src, dsts[0], indices, lo, hi, record_bytes, records)
    t0 = time.perf_counter()
    kern(src, dsts[0], indices, 0, min(indices.size, 2), 0, records)  # compile or load from cache
    compile_s = time.perf_counter() - t0
    passes = [0] * len(use)

    def one(i: int, reps: int) -> float:
        t0 = time.thread_time_ns()
        lo, hi = parts[i]
        for _ in range(reps):
            sh = pass_shift(seed, i, passes[i], records)
            passes[i] += 1
            kern(src, dsts[i], indices, lo, hi, sh, records)
        return (time.thread_time_ns() - t0) / 1e9

    on_cpu: list = []    # closures append here, not to the Measure: no cycle holds the buffer
    extra: list = []

    def run(reps: int) -> float:
        on_cpu.append(run_pinned(use, lambda i: one(i, reps)))
        return reps * indices.size  # records

    def derive(s: Stats, m: Measure) -> dict:
        bw = s.median
        rps = bw / record_bytes
        return {"bandwidth_bytes_per_s": bw, "records_per_s": rps, "ns_per_record": 1e9 / rps,
                "ns_per_record_per_thread": 1e9 * threads / rps,
                "topk_step_us": topk * 1e6 / rps * threads}

    spec = gather_spec(record_bytes, prefetch)
    params = {"record_bytes": record_bytes, "topk": topk, "threads": threads, "cpus": use,
              "prefetch_distance": prefetch, "prefetch_bytes": prefetch_bytes(record_bytes) if prefetch else 0,
              "index_pattern": pattern, "indices": int(indices.size), "steps": int(indices.size // topk),
              "index_shift": "per pass", "records": records, "kernel_compile_seconds": round(compile_s, 4),
              "footprint_bytes": records * record_bytes}
    m = Measure(Config(f"gather/{record_bytes}B/{threads}t/d{prefetch}/{pattern}", run), "gather", params, spec,
                "bytes_per_s", lambda s, wk: wk * record_bytes / s, derive, threads=threads, cpu=on_cpu, extra=extra)
    return m


def loaded(words, chase_order, cpus: list[int], delay: int | None, slot: int = 0, slots: int = 1) -> Measure:
    """One chaser on ``cpus[0]`` over the second-half chain; readers on ``cpus[1:]`` over the first half."""
    pos = {"at": slot_start(chase_order, slot, slots)}  # continue along the chain from call to call
    readers = cpus[1:] if delay is not None else []
    half = words.size // 2
    parts = split(half, max(1, len(readers)), align=WPL)
    chunk_words = max(WPL * 64, min(1 << 19, (WPL << 16) // (1 + (delay or 0)) * 1))
    state = {"stop": False}

    def read_loop(i: int) -> float:
        lo, hi = parts[i]
        pos, nbytes = lo, 0
        t0 = time.perf_counter()
        while not state["stop"]:
            end = min(hi, pos + chunk_words)
            K.throttled_read(words, pos, end, delay)
            nbytes += (end - pos) // WPL * LINE
            pos = lo if end >= hi else end
        return nbytes / (time.perf_counter() - t0)

    on_cpu: list = []    # closures append here, not to the Measure: no cycle holds the buffer
    extra: list = []

    def run(reps: int) -> float:
        state["stop"] = False

        def body(i: int) -> float:
            if i == 0:
                try:
                    pos["at"] = int(K.chase(words, pos["at"], reps * CHASE_STEPS))
                finally:
                    state["stop"] = True
                return 0.0
            return read_loop(i - 1)

        out = run_pinned([cpus[0]] + readers, body)
        extra.append(sum(out[1:]))
        return reps * CHASE_STEPS

    def derive(s: Stats, mm: Measure) -> dict:
        ex = sorted(mm.extra[-s.n:]) if mm.extra else [0.0]
        return {"latency_ns": s.median, "reader_bandwidth_bytes_per_s": ex[len(ex) // 2],
                "reader_threads": len(readers)}

    label = "idle" if delay is None else str(delay)
    m = Measure(Config(f"loaded/{label}", run), "loaded",
                {"inject_delay_iterations": delay, "reader_cpus": readers, "chaser_cpu": cpus[0]},
                K.KERNEL_SPECS["loaded"], "ns", lambda s, w: s * 1e9 / w, derive, cpu=on_cpu, extra=extra)
    return m


def _convert_regions(src_bytes, layers: int, record_bytes: int, threads: int):
    """(remote, staging, tmp, kv, tokens, words per record): the buffer cut in four equal regions."""
    from sactool.errors import UsageError

    if record_bytes % 8:
        raise UsageError(f"convert needs records of whole 8-byte words, got {record_bytes} B", "e.g. --record-bytes 1152")
    w = record_bytes // 8
    words = src_bytes[: (src_bytes.size // 8) * 8].view(np.uint64)
    tokens = words.size // (4 * layers * w)
    if tokens < threads or tokens < 2:
        raise UsageError(f"the buffer holds {tokens} tokens of {layers} × {record_bytes} B in each of the four "
                         "convert regions", "use a larger --size")
    n = tokens * layers * w
    return (words[:n].reshape(tokens, layers * w), words[n:2 * n].reshape(tokens, layers * w),
            words[2 * n:3 * n].reshape(layers, tokens, w), words[3 * n:4 * n].reshape(layers, tokens, w), tokens, w)


def _numpy_passes(remote, staging, tmp, kv, idx, lo: int, hi: int):
    """The fork's three tensor expressions, in numpy, for tokens ``lo:hi``."""
    sidx = idx.astype(np.intp)
    layers, tokens, w = kv.shape
    st3 = staging.reshape(tokens, layers, w)

    def gather():
        staging[lo:hi] = remote[sidx[lo:hi]]

    def transpose():
        tmp[:, lo:hi] = st3[lo:hi].transpose(1, 0, 2).copy()

    def scatter():
        kv[:, sidx[lo:hi]] = tmp[:, lo:hi]
    return gather, transpose, scatter


def convert(src_bytes, cpus: list[int], threads: int, layers: int, record_bytes: int, seed: int,
            impl: str = "numba") -> Measure:
    """The RDMA baseline's page-first -> layer-first conversion of one request's prefix.

    The buffer is cut into four equal regions: ``remote`` (page-first ``[tokens, layers, w]``),
    ``staging`` (page-first), ``tmp`` (layer-first ``[layers, tokens, w]``) and ``kv`` (the
    layer-first host pool), ``w = record_bytes / 8`` words, as many tokens as fit. Host indices are
    a seeded random permutation (the fork takes them from the host pool's allocator, no order is
    guaranteed). One call = the three passes over the whole prefix, each split over ``threads``
    pinned threads by token range; the figure is prefix bytes per second (the rate the serving
    model's ``rdma.layout_conversion_bytes_per_s`` takes), and each pass's share is kept.

    ``impl="numba"``: explicit row-copy loops (:mod:`sactool.bench.kernels`); ``impl="numpy"``:
    the fork's three tensor expressions written in numpy (fancy-index gather into the staging
    slice, ``transpose(1, 0, 2).copy()``, fancy-index assignment), one thread (numpy has no
    intra-op thread pool; the fork's torch may use several).
    """
    from sactool.errors import UsageError

    if impl not in ("numba", "numpy"):
        raise UsageError(f"unknown convert implementation {impl!r}", "use numba or numpy")
    if impl == "numpy" and threads != 1:
        raise UsageError("the numpy convert runs on one thread", "use threads=1")
    remote, staging, tmp, kv, tokens, w = _convert_regions(src_bytes, layers, record_bytes, threads)
    idx = np.random.default_rng([seed, record_bytes]).permutation(tokens).astype(np.uint64)
    use = cpus[:threads]
    parts = split(tokens, threads)
    t0 = time.perf_counter()
    K.convert_gather(remote, staging, idx, 0, 1)    # compile or load from cache
    K.convert_transpose(staging, tmp, layers, w, 0, 1)
    K.convert_scatter(tmp, kv, idx, 0, 1)
    compile_s = time.perf_counter() - t0
    barrier = threading.Barrier(len(use))

    def one(i: int, reps: int) -> list[float]:
        lo, hi = parts[i]
        wall = [0.0, 0.0, 0.0]
        c0 = time.thread_time_ns()
        fns = (_numpy_passes(remote, staging, tmp, kv, idx, lo, hi) if impl == "numpy" else
               (lambda: K.convert_gather(remote, staging, idx, lo, hi),
                lambda: K.convert_transpose(staging, tmp, layers, w, lo, hi),
                lambda: K.convert_scatter(tmp, kv, idx, lo, hi)))
        for _ in range(reps):
            for k, fn in enumerate(fns):
                barrier.wait()     # passes run one after the other, as in the fork
                s = time.perf_counter()
                fn()
                wall[k] += time.perf_counter() - s
        return [(time.thread_time_ns() - c0) / 1e9] + wall

    on_cpu: list = []    # closures append here, not to the Measure: no cycle holds the buffer
    extra: list = []

    def run(reps: int) -> float:
        out = run_pinned(use, lambda i: one(i, reps))
        on_cpu.append([o[0] for o in out])
        extra.append([max(o[1 + k] for o in out) / reps for k in range(3)])
        return reps * tokens * layers * record_bytes

    def derive(s: Stats, mm: Measure) -> dict:
        ex = mm.extra[-s.n:] if mm.extra else [[0.0, 0.0, 0.0]]
        tot = [sum(e) for e in ex]
        mid = ex[sorted(range(len(ex)), key=lambda j: tot[j])[len(ex) // 2]]
        share = {name: (v / sum(mid) if sum(mid) else None) for name, v in zip(("gather", "transpose", "scatter"), mid)}
        return {"bandwidth_bytes_per_s": s.median, "seconds_per_gb": 1e9 / s.median, "pass_share": share}

    params = {"record_bytes": record_bytes, "layers": layers, "tokens": tokens, "threads": threads, "cpus": use,
              "implementation": impl,
              "prefix_bytes": tokens * layers * record_bytes, "index_order": "random permutation",
              "kernel_compile_seconds": round(compile_s, 4)}
    m = Measure(Config(f"convert/{impl}/{record_bytes}B/{layers}L/{threads}t", run), "convert", params,
                K.KERNEL_SPECS["convert"], "bytes_per_s", lambda s, wk: wk / s, derive, threads=threads, cpu=on_cpu, extra=extra)
    return m
