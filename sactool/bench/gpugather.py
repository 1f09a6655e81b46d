"""``run_gpu_gather()``: the SAC data path itself — a GPU loading top-k KV records from host memory.

Per configuration (record size × top-k × index pattern × requests in flight × threads per
block) the HiSparse-shaped kernel of :mod:`sactool.bench.gpukernel` copies, for each of
``blocks`` requests, one top-k set of records from the placed, device-mapped host buffer into a
device hot buffer. Then, for the same requests and bytes of the pool, the full-prefix path: one
bulk host → device copy (DMA) of each request's whole prefix, what an RDMA-style pool moves.

Layout of the host buffer. Each request's prefix is ``context_tokens`` records (plus the decode
steps the trace pattern may add) in a region of its own; at step ``s`` request ``b`` reads
region ``(s·B + b) mod regions`` so consecutive steps read other memory and the pass over all
steps touches ≥ 4× the GPU's L2 cache (GPU L2 caches system-memory reads too). Top-k entries
are record indices within the prefix, from the generators sactool already has: ``uniform`` and
``clustered`` (:mod:`sactool.bench.indices`) and ``trace`` — a trace file (``--trace``: a
workload ``.npz`` or a bench index file), or, without one, the calibrated DSA workload model
(:func:`sactool.workload.generate_topk`, one layer stream per request).

Timing. CUDA events on the launch's stream: the protocol of :mod:`sactool.bench.protocol`
(warm-up, calibration, rotated rounds) runs on GPU time, one launch per sample, the launch
walking ``reps`` steps. Under numba's CUDA simulator the same code runs with wall time; the
record then says ``simulator: true`` and its figures mean nothing about any GPU.

Figures per configuration (``derived``): ``topk_step_us`` — µs for one top-k step of every
request in flight (what each request waits per layer), ``bandwidth_bytes_per_s`` (all requests
together), ``lines_in_flight`` — the structural most 64-byte lines the launch can have
outstanding (resident warps × lines one warp's load round covers: the CUDA loop stores each word
before loading the next), ``implied_round_trip_ns`` — Little's law with that concurrency, and
``ceiling_ratio`` — bandwidth over the path's link ceiling (where known).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from sactool import records
from sactool.bench import record as R
from sactool.bench.protocol import PRESETS, Config, Protocol, run_protocol
from sactool.errors import SactoolError, TopologyError, UsageError
from sactool.host.sysfs import SysfsReader
from sactool.units import format_bytes, format_size_arg

DEFAULT_BLOCKS = (1, 2, 4, 8, 16, 32, 64)
"""Requests in flight (one CTA each) swept by default: 1 … 64 (issue 14)."""

DEFAULT_THREADS = (256, 512, 960, 1024)
"""Threads per block (``swap_in_block_size``): 960 the SGLang 0.5.23 default, 512 the HiSparse
guide's, 1024 SAC's hard-coded width, 256 a narrower one (docs/sources.md, SGLang §2.2, §4;
docs/sources.md, SAC §5) — the widths ``sactool tune`` chooses among."""

DEFAULT_RECORDS = (656, 1152)
"""KV row bytes of DeepSeek-V3.2/GLM-5.x MLA: FP8 with scales (656) and BF16 (1152) (docs/sources.md, SGLang §1.3)."""

DEFAULT_TOPK = (2048,)
"""``index_topk`` of DeepSeek-V3.2 and GLM-5.x (docs/sources.md, SGLang §1.6)."""

DEFAULT_CONTEXT = 32768
"""Prefix length per request, tokens (records). A sweep parameter, not a fact about a model."""

PATTERNS = ("uniform", "clustered", "trace")
LINE = 64
L2_FALLBACK_BYTES = 64 << 20
"""Used for the footprint rule only when the device does not report its L2 size (the simulator)."""

MAX_INDEX_BYTES = 256 << 20


@dataclass(frozen=True)
class GpuGatherOptions:
    """What ``sactool bench gpu-gather`` measures. ``node``/``dax``: the pool memory (None: the
    pool node of ``sactool probe``); ``gpu``: CUDA device index; ``cpus``: pre-fault CPUs (None:
    nearest CPU node); ``size_bytes``: host buffer (None: one prefix region per request in flight
    at the largest record size, at least 1 GiB); ``placement``: "strict" or "best-effort" (see
    :mod:`sactool.bench.gpuplace`); ``steps``: top-k steps per stream (None: the L2 footprint rule)."""

    node: int | None = None
    dax: str | None = None
    gpu: int = 0
    cpus: tuple[int, ...] | None = None
    size_bytes: int | None = None
    blocks: tuple[int, ...] = DEFAULT_BLOCKS
    threads: tuple[int, ...] = DEFAULT_THREADS
    record_bytes: tuple[int, ...] = DEFAULT_RECORDS
    topk: tuple[int, ...] = DEFAULT_TOPK
    patterns: tuple[str, ...] = PATTERNS
    trace: str | None = None
    context_tokens: int = DEFAULT_CONTEXT
    full_prefix: bool = True
    preset: str = "default"
    seed: int = 1
    placement: str = "strict"
    hugepages: str = "thp"
    steps: int | None = None
    command: str = "gpu-gather"
    protocol: Protocol | None = None


def validate(o: GpuGatherOptions) -> None:
    """Bad values fail here, before the GPU, the buffer or any index is touched."""
    from sactool.bench.gpuplace import PLACEMENTS

    def positive(vals, what, eg):
        if not vals:
            raise UsageError(f"{what} is empty", f"e.g. {eg}")
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UsageError(f"{what} {v!r} must be a positive integer", f"e.g. {eg}")

    positive(o.blocks, "--blocks", "--blocks 1,8,64")
    positive(o.threads, "--threads", "--threads 512,960")
    positive(o.record_bytes, "--record-bytes", "--record-bytes 656,1152")
    positive(o.topk, "--topk", "--topk 2048")
    for t in o.threads:
        if t % 32 or t > 1024:
            raise UsageError(f"--threads {t}: threads per block must be a multiple of 32, at most 1024",
                             "HiSparse gives each record one warp of 32 threads; e.g. 512 or 960")
    for b in o.blocks:
        if b > 65535:
            raise UsageError(f"--blocks {b} is more than a grid dimension takes", "use at most 65535")
    if isinstance(o.context_tokens, bool) or not isinstance(o.context_tokens, int) or o.context_tokens <= 0:
        raise UsageError(f"--context {o.context_tokens!r} must be a positive number of tokens", "e.g. --context 32768")
    big = max(o.topk)
    if big > o.context_tokens:
        raise UsageError(f"top-k {big} is larger than the {o.context_tokens}-token prefix",
                         "use a smaller --topk or a longer --context")
    bad = [p for p in o.patterns if p not in PATTERNS]
    if bad or not o.patterns:
        raise UsageError(f"unknown index pattern {bad[0] if bad else ''!r}", f"use some of: {', '.join(PATTERNS)}")
    if o.placement not in PLACEMENTS:
        raise UsageError(f"unknown placement {o.placement!r}", f"use one of: {', '.join(PLACEMENTS)}")
    if o.preset not in PRESETS:
        raise UsageError(f"unknown preset {o.preset!r}", f"use one of: {', '.join(PRESETS)}")
    if o.steps is not None and o.steps <= 0:
        raise UsageError(f"steps {o.steps} must be positive", "e.g. 16")
    if o.gpu < 0:
        raise UsageError(f"--gpu {o.gpu} must be >= 0", "e.g. --gpu 0")


# ---- index streams ----------------------------------------------------------------------------
def steps_for(topk: int, record_bytes: int, l2_bytes: int, requests: int) -> int:
    """Top-k steps per stream: one pass with a single request in flight reads ≥ 4× the GPU's L2
    (≥ 16 steps), within :data:`MAX_INDEX_BYTES` of uint32 indices for ``requests`` requests."""
    want = max(16, -(-4 * l2_bytes // (topk * record_bytes)))
    cap = max(16, MAX_INDEX_BYTES // (4 * topk * max(1, requests)))
    return int(min(want, cap))


def index_stream(pattern: str, *, requests: int, topk: int, steps: int, context: int, seed: int,
                 trace: str | None):
    """uint32 ``[steps, requests, topk]`` record indices within each request's prefix, and where they
    came from. Each (step, request) row holds ``topk`` distinct indices (uniform) or runs (clustered)."""
    import numpy as np

    from sactool.bench import indices

    if pattern in ("uniform", "clustered"):
        flat = indices.make(pattern, context, topk, steps * requests, seed=seed)
        src = (f"sactool.bench.indices.{pattern}(records={context}, topk={topk}, seed={seed})"
               + (f", runs of {indices.CLUSTER_RECORDS}" if pattern == "clustered" else ""))
        return flat.reshape(steps, requests, topk).astype(np.uint32), src
    if trace is None:
        from sactool.workload import generate_topk

        arr = generate_topk(context, steps, requests, topk, seed=seed)  # [steps, layers, topk]: a layer per request
        return np.ascontiguousarray(arr.astype(np.uint32)), (
            f"workload model (sactool.workload.generate_topk, context {context}, seed {seed}; one layer "
            "stream per request)")
    if str(trace).endswith(".npz"):
        from sactool.workload import load_trace

        tr = load_trace(trace)
        if tr.top_k != topk:
            raise UsageError(f"trace {trace} has top-k {tr.top_k}, not {topk}", f"pass --topk {tr.top_k}")
        if tr.context_tokens + tr.steps > context + steps:
            raise UsageError(f"trace {trace} selects tokens up to {tr.context_tokens + tr.steps - 1}, beyond the "
                             f"{context}-token prefix", f"pass --context {tr.context_tokens}")
        ly = np.arange(requests) % tr.layers      # request b replays layer b mod layers
        st = np.arange(steps) % tr.steps
        return np.ascontiguousarray(tr.indices[st][:, ly, :].astype(np.uint32)), f"trace {trace} (layers → requests)"
    flat = indices.load_trace(trace, context, topk)
    rows = flat.size // topk
    if rows == 0:
        raise UsageError(f"trace {trace} holds fewer than {topk} indices", "one top-k step per line")
    flat = flat[: rows * topk].reshape(rows, topk)
    pick = (np.arange(steps)[:, None] + np.arange(requests)[None, :]) % rows   # request b starts at row b
    return np.ascontiguousarray(flat[pick].astype(np.uint32)), f"trace {trace} (row s+b for request b)"


def region_bases(steps: int, requests: int, region_records: int, total_records: int):
    """uint64 ``[steps, requests]``: first record of request b's prefix at step s (region (s·B+b) mod n)."""
    import numpy as np

    n = total_records // region_records
    if n < 1:
        raise UsageError("the buffer holds less than one prefix", "use a larger --size or a shorter --context")
    k = (np.arange(steps, dtype=np.uint64)[:, None] * np.uint64(requests)
         + np.arange(requests, dtype=np.uint64)[None, :]) % np.uint64(n)
    return np.ascontiguousarray(k * np.uint64(region_records))


def fill_pattern(words) -> None:
    """Write every word (distinct values: index × an odd constant), chunk by chunk, so gathers read
    real, written lines (never the zero page) and a wrong record shows in the check."""
    import numpy as np

    step = 1 << 22
    for lo in range(0, words.size, step):
        hi = min(words.size, lo + step)
        words[lo:hi] = np.arange(lo, hi, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def expected_records(host_u8, record_bytes: int, idx_row, base: int):
    """The bytes a request should receive: records ``base + idx_row`` of the host buffer, in order."""
    import numpy as np

    recs = host_u8[: (host_u8.size // record_bytes) * record_bytes].reshape(-1, record_bytes)
    return recs[np.uint64(base) + idx_row.astype(np.uint64)]


# ---- GPU clock ---------------------------------------------------------------------------------
class GpuClock:
    """Accumulated GPU time (ns) of the timed launches, read by the protocol as its clock: each
    ``timed(fn)`` brackets ``fn`` with CUDA events on ``stream`` and adds their elapsed time.
    In the simulator, wall time (``perf_counter_ns``)."""

    def __init__(self, cuda, stream, simulated: bool):
        self.ns = 0
        self.stream = stream
        self.sim = simulated
        if not simulated:
            self.e0, self.e1 = cuda.event(timing=True), cuda.event(timing=True)

    def __call__(self) -> int:
        return self.ns

    def timed(self, fn):
        if self.sim:
            t0 = time.perf_counter_ns()
            out = fn()
            self.ns += time.perf_counter_ns() - t0
            return out
        self.e0.record(self.stream)
        out = fn()
        self.e1.record(self.stream)
        self.e1.synchronize()
        self.ns += int(round(self.e0.elapsed_time(self.e1) * 1e6))
        return out


# ---- configurations -----------------------------------------------------------------------------
@dataclass
class _Measure:
    cfg: Config
    test: str
    params: dict
    spec: dict
    nbytes_per_step: int
    check: dict | None = None


def gather_config(cuda, clock: GpuClock, dev_u8, host_u8, *, record_bytes: int, topk: int, blocks: int,
                  threads: int, pattern: str, idx, bases, check: bool = True) -> _Measure:
    """One swap-in configuration: ``blocks`` requests of ``idx[:, :blocks]`` at ``bases[:, :blocks]``."""
    import numpy as np

    from sactool.bench.gpukernel import kernel_spec, load_bytes_for, swap_in, word_dtype

    lb = load_bytes_for(record_bytes)
    dt = word_dtype(lb)
    words = record_bytes // lb
    n = (host_u8.size // lb) * lb
    src = dev_u8[:n].view(dt)
    steps = idx.shape[0]
    idx_h = np.ascontiguousarray(idx[:, :blocks])
    base_h = np.ascontiguousarray(bases[:, :blocks])
    idx_d, base_d = cuda.to_device(idx_h, stream=clock.stream), cuda.to_device(base_h, stream=clock.stream)
    dst = cuda.device_array((blocks, topk * words), dtype=dt, stream=clock.stream)
    def launch(*args):  # configured at each call: the simulator's kernel[...] mutates the kernel itself
        swap_in[blocks, threads, clock.stream](*args)

    t0 = time.perf_counter()
    try:
        launch(src, idx_d, base_d, dst, 0, 1, words)   # compile (or load from cache) and check step 0
        clock.stream.synchronize()
    except Exception as e:  # NVVM/NVRTC missing, driver too old for the PTX, launch failure: say which
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TopologyError(f"numba-cuda could not compile or launch the swap-in kernel: {type(e).__name__}: {first}",
                            "numba-cuda needs the CUDA compiler libraries: pip install 'numba-cuda[cu12]' (or "
                            "[cu13], matching the driver)") from None
    compile_s = time.perf_counter() - t0
    chk = None
    if check:
        got = dst.copy_to_host(stream=clock.stream)
        clock.stream.synchronize()
        rows = sorted({0, blocks - 1})
        ok = all(np.array_equal(got[b].view(np.uint8).reshape(topk, record_bytes),
                                expected_records(host_u8, record_bytes, idx_h[0, b], int(base_h[0, b])))
                 for b in rows)
        if not ok:
            raise SactoolError(f"gpu swap-in kernel copied wrong bytes ({record_bytes} B records, {blocks} blocks, "
                               f"{threads} threads)", "report this: the GPU path is broken on this machine")
        chk = {"step": 0, "requests": rows, "equal": True}
    pos = {"s": 1 % steps}

    def run(reps: int) -> float:
        s = pos["s"]
        clock.timed(lambda: launch(src, idx_d, base_d, dst, s, reps, words))
        pos["s"] = (s + reps) % steps
        return float(reps)  # steps

    params = {"record_bytes": record_bytes, "topk": topk, "blocks": blocks, "threads_per_block": threads,
              "warps_per_block": threads // 32, "index_pattern": pattern, "steps": int(steps),
              "load_bytes": lb, "kernel_compile_seconds": round(compile_s, 4)}
    key = f"gpu_gather/{record_bytes}B/k{topk}/{pattern}/b{blocks}/t{threads}"
    return _Measure(Config(key, run), "gpu_gather", params, kernel_spec(record_bytes, threads),
                    blocks * topk * record_bytes, chk)


def prefix_config(cuda, clock: GpuClock, host_u8, *, record_bytes: int, blocks: int, context: int, bases,
                  check: bool = True) -> _Measure:
    """The full-prefix path: per request one bulk copy (``cuMemcpyHtoDAsync``, the DMA engine) of
    its ``context`` records from the registered buffer into device memory."""
    import numpy as np

    nb = context * record_bytes
    dst = cuda.device_array(nb, dtype=np.uint8, stream=clock.stream)
    steps = bases.shape[0]

    def copy_step(s: int) -> None:
        for b in range(blocks):
            off = int(bases[s, b]) * record_bytes
            dst.copy_to_device(host_u8[off: off + nb], stream=clock.stream)

    t0 = time.perf_counter()
    copy_step(0)
    clock.stream.synchronize()
    first = time.perf_counter() - t0
    chk = None
    if check:
        got = dst.copy_to_host(stream=clock.stream)
        clock.stream.synchronize()
        off = int(bases[0, blocks - 1]) * record_bytes
        if not np.array_equal(got, host_u8[off: off + nb]):
            raise SactoolError("the bulk host → device copy returned wrong bytes", "report this")
        chk = {"step": 0, "requests": [blocks - 1], "equal": True}
    pos = {"s": 1 % steps}

    def run(reps: int) -> float:
        s = pos["s"]

        def body():
            for i in range(reps):
                copy_step((s + i) % steps)
        clock.timed(body)
        pos["s"] = (s + reps) % steps
        return float(reps)

    params = {"record_bytes": record_bytes, "blocks": blocks, "context_tokens": context,
              "bytes_per_request": nb, "copies_per_step": blocks, "first_call_wall_seconds": round(first, 4)}
    spec = {"name": "full_prefix_copy", "shape": "one cuMemcpyHtoDAsync per request of its whole prefix "
            "(context × record bytes), requests one after another on one stream (what an RDMA-style pool "
            "must move instead of the top-k records)", "engine": "DMA copy engine",
            "source_memory": "registered host memory", "destination": "device memory"}
    return _Measure(Config(f"gpu_prefix/{record_bytes}B/b{blocks}", run), "gpu_prefix_copy", params, spec,
                    blocks * nb, chk)


def lines_per_round(load_bytes: int) -> int:
    """64-byte lines one warp's round of loads covers (32 lanes × ``load_bytes``, line-aligned start)."""
    return max(1, math.ceil(32 * load_bytes / LINE))


def result_of(m: _Measure, ceiling: float | None, simulated: bool) -> dict | None:
    from sactool.bench.stats import stats_dict, summarize

    if not m.cfg.samples:
        return None
    values = [m.nbytes_per_step * w / s for s, w in m.cfg.samples]   # bytes per GPU second
    st = summarize(values)
    bw = st.median
    step_s = m.nbytes_per_step / bw
    d = {"bandwidth_bytes_per_s": bw, "step_us": step_s * 1e6,
         "ceiling_ratio": (bw / ceiling) if ceiling else None}
    if m.test == "gpu_gather":
        p = m.params
        warps = min(p["warps_per_block"], p["topk"])
        lif = p["blocks"] * warps * lines_per_round(p["load_bytes"])
        d.update({"topk_step_us": step_s * 1e6, "records_per_s": bw / p["record_bytes"],
                  "lines_in_flight": lif, "lines_in_flight_kind": "structural most: resident warps × 64-byte "
                  "lines one warp's load round covers (each word is stored before the next is loaded)",
                  "implied_round_trip_ns": lif * LINE / bw * 1e9})
    else:
        d.update({"prefix_step_us": step_s * 1e6,
                  "per_request_us": step_s * 1e6 / m.params["blocks"]})
    return {"test": m.test, "key": m.cfg.key, "params": m.params, "kernel": m.spec, "unit": "bytes_per_s",
            "stats": stats_dict(st), "samples": values,
            "raw": [{"gpu_seconds" if not simulated else "wall_seconds": s, "steps": w} for s, w in m.cfg.samples],
            "reps_per_sample": m.cfg.reps, "first_call_seconds": m.cfg.first_call_seconds,
            "timing": "simulator wall time (not a GPU figure)" if simulated else "CUDA events on the launch stream",
            "check": m.check, "derived": d}


def link_prefix_to_gather(results: list[dict]) -> None:
    """Each gather result gets the full-prefix time of the same record size and requests in flight."""
    pre = {(r["params"]["record_bytes"], r["params"]["blocks"]): r for r in results if r["test"] == "gpu_prefix_copy"}
    for r in results:
        if r["test"] != "gpu_gather":
            continue
        p = pre.get((r["params"]["record_bytes"], r["params"]["blocks"]))
        if p is not None:
            full = p["derived"]["prefix_step_us"]
            r["derived"]["full_prefix_us"] = full
            r["derived"]["full_prefix_over_topk"] = full / r["derived"]["topk_step_us"]


# ---- the run ------------------------------------------------------------------------------------


def default_size(o: GpuGatherOptions, steps_max: int) -> int:
    region = (o.context_tokens + steps_max) * max(o.record_bytes)
    need = max(o.blocks) * region
    return -(-max(need, 1 << 30) // (2 << 20)) * (2 << 20)


def run_gpu_gather(o: GpuGatherOptions, *, reader: SysfsReader | None = None, progress=None) -> R.BenchRecord:
    """Measure the GPU swap-in path on one pool target with one GPU and return the bench record."""
    validate(o)
    from sactool.bench import gpuplace

    cuda = gpuplace.gpu_runtime()          # exit 3 here when there is no GPU: nothing else happens
    sim = gpuplace.simulated()
    reader = reader or SysfsReader()
    if not reader.live:
        raise TopologyError(f"the topology comes from a recording ({reader.root}), not this system",
                            "sactool bench gpu-gather measures the running machine: drop --sysfs-root")
    warnings: list[dict] = []
    topo, mem, cpu_node, cpus = _resolve(o, reader, warnings)
    gpu = gpuplace.select_gpu(cuda, o.gpu, reader, topo.nodes if topo is not None else ())
    plan = _plan(o, gpu, sim, topo, mem, reader, warnings, progress)
    proto = o.protocol or PRESETS[o.preset]
    if progress:
        progress(f"placing {format_bytes(plan.size)} on " + (o.dax or (f"node{mem}" if mem is not None else "host memory")), 0, 1)
    buf, placement = gpuplace.place(plan.size, node=mem, dax=o.dax, cpus=cpus, topo=topo, reader=reader,
                                    placement=o.placement, hugepages=o.hugepages)
    results: list[dict] = []
    complete, reg, bdesc = True, None, {}
    ceiling = gpuplace.path_ceiling(gpu, topo, mem, o.dax, reader)
    try:
        bdesc = _buffer_block(buf, placement, warnings)
        placed_u8 = buf.array("uint8")
        clock = GpuClock(cuda, cuda.stream(), sim)
        with gpuplace.registered(cuda, placed_u8, fallback=o.placement == "best-effort") as (dev_u8, host_u8, reg):
            fill_pattern(host_u8.view("uint64"))
            if not reg["placed_buffer"]:
                warnings.append(records.warning("driver_buffer", "the placed buffer could not be registered with the GPU: the "
                                      "driver's own pinned allocation was measured, on whatever node it got",
                                      reg.get("registration_error")))
            ms = _configs(o, plan, cuda, clock, dev_u8, host_u8)
            if progress:
                progress("measuring", 0, len(ms) * proto.rounds)
            complete = run_protocol([m.cfg for m in ms], proto, clock=clock, progress=progress)
            results = _results(ms, o, plan, ceiling["ceiling_bytes_per_s"], sim, mem, cpu_node)
            del dev_u8
    except KeyboardInterrupt:
        complete = False
    finally:
        host_u8 = placed_u8 = dev_u8 = ms = None  # noqa: F841  (drop the views, and configs over them, first)
        from sactool.memory.placed import close_after

        close_after(buf)
    for r in results:
        st = r["stats"]
        if st["n"] >= 3 and st["mean"] and st["stdev"] / st["mean"] > 0.10 and not sim:
            warnings.append(records.warning("high_variance", f"{r['key']}: relative stdev {st['stdev'] / st['mean']:.0%}",
                                  "rerun with --preset rigorous when the GPU is idle"))
    if not complete:
        warnings.append(records.warning("interrupted", "interrupted: finished samples are kept", "rerun to complete"))
    warnings.extend(_path_warnings(gpu, topo, mem))
    from sactool.host.machine import machine_block

    from sactool.bench.sizing import last_level_cache

    llc = last_level_cache(reader, cpus) if cpus else None   # the CPUs that wrote the host buffer (trust.py)
    data = records.header(R.KIND, R.SCHEMA_VERSION)
    pdata = proto.to_data()
    pdata["clock"] = "wall time (simulator)" if sim else "CUDA events (GPU time of each launch)"
    pdata["samples"] = "one launch per sample; the launch walks reps top-k steps"
    data.update({
        "machine": machine_block(reader), "command": o.command,
        "tests": ["gpu_gather"] + (["gpu_prefix_copy"] if o.full_prefix else []),
        "protocol": pdata, "memory_node": f"node{mem}" if mem is not None else None,
        "dax_device": o.dax, "cpu_node": f"node{cpu_node}" if cpu_node is not None else None, "cpus": list(cpus),
        "stand_in": _stand_in(topo, mem, o.dax), "buffer": bdesc, "llc": llc.to_data() if llc else None,
        "gpu": gpu.to_data(), "registration": reg, "path_ceiling": ceiling,
        "context_tokens": o.context_tokens, "results": results, "warnings": warnings, "complete": complete,
    })
    return R.from_data(data)


@dataclass(frozen=True)
class _Plan:
    """Sizes and index streams of one run: ``size`` bytes of host buffer; prefixes of
    ``region_records`` records (context + the most steps any stream has); ``streams[(topk,
    pattern)]`` = (uint32 [steps, requests, topk] indices, where they came from)."""

    size: int
    steps_max: int
    region_records: int
    streams: dict


def _plan(o: GpuGatherOptions, gpu, sim: bool, topo, mem, reader, warnings: list, progress) -> _Plan:
    """Buffer size and step counts (the L2 footprint rule), checked; index streams made before any
    buffer exists, so a bad trace fails fast."""
    l2 = gpu.l2_bytes or (0 if sim else L2_FALLBACK_BYTES)  # the simulator has no cache to outrun
    need_steps = {(k, rb): o.steps or steps_for(k, rb, l2, max(o.blocks)) for k in o.topk for rb in o.record_bytes}
    steps_max = max(need_steps.values())
    size = o.size_bytes or default_size(o, steps_max)
    region_records = o.context_tokens + steps_max
    for rb in o.record_bytes:
        if size // rb < max(o.blocks) * region_records:
            raise UsageError(f"--size {format_bytes(size)} holds {size // rb} records of {rb} B, fewer than "
                             f"{max(o.blocks)} requests × {region_records}-record prefixes",
                             f"use --size {format_size_arg(max(o.blocks) * region_records * rb)} or more, fewer "
                             "--blocks or a shorter --context")
    if l2 and size < 4 * l2:
        warnings.append(records.warning("small_buffer", f"the buffer ({format_bytes(size)}) is less than 4× the "
                              f"GPU's L2 ({format_bytes(l2)})",
                              f"GPU L2 may serve repeated reads: use --size {format_size_arg(4 * l2)} or more"))
    if mem is not None and topo is not None and mem in topo.node_ids and not o.dax and not sim:
        from sactool.memory.nodes import check_fits, free_estimate

        check_fits(free_estimate(topo, reader, mem), size)
    streams = {}
    for k in o.topk:
        for pat in o.patterns:
            if progress:
                progress(f"index stream {pat} top-{k}", 0, 1)
            st = max(need_steps[(k, rb)] for rb in o.record_bytes)
            streams[(k, pat)] = index_stream(pat, requests=max(o.blocks), topk=k, steps=st, context=o.context_tokens,
                                             seed=o.seed + k, trace=o.trace)
    if sim:
        warnings.append(records.warning("simulated", "numba's CUDA simulator ran the kernel: correctness only, no GPU figure",
                              "run on a machine with an NVIDIA GPU for figures"))
    return _Plan(size, steps_max, region_records, streams)


def _buffer_block(buf, placement: dict, warnings: list) -> dict:
    """The record's buffer block, and a warning when the placement is not (fully) verified."""
    bdesc = buf.describe()
    bdesc["placement"] = placement
    if not placement["verified"]:
        warnings.append(records.warning("placement_unverified", "the kernel could not confirm where the buffer's pages are: "
                              + "; ".join(placement["notes"]), "figures describe host memory whose node is unknown"))
    elif bdesc.get("verified_fraction") is not None and bdesc["verified_fraction"] < 0.999:
        warnings.append(records.warning("placement_unverified", f"only {bdesc['verified_fraction']:.1%} of the sampled pages "
                              "are on the node asked for", "the node may be short of free memory"))
    return bdesc


def _configs(o: GpuGatherOptions, plan: _Plan, cuda, clock, dev_u8, host_u8) -> list[_Measure]:
    """Every swap-in configuration of the sweep, then the full-prefix copies, per record size."""
    ms: list[_Measure] = []
    for rb in o.record_bytes:
        total = plan.size // rb
        for k in o.topk:
            for pat in o.patterns:
                idx = plan.streams[(k, pat)][0]
                bases = region_bases(idx.shape[0], max(o.blocks), plan.region_records, total)
                for b in o.blocks:
                    for t in o.threads:
                        ms.append(gather_config(cuda, clock, dev_u8, host_u8, record_bytes=rb, topk=k, blocks=b,
                                                threads=t, pattern=pat, idx=idx, bases=bases))
        if o.full_prefix:
            bases = region_bases(plan.steps_max, max(o.blocks), plan.region_records, total)
            for b in o.blocks:
                ms.append(prefix_config(cuda, clock, host_u8, record_bytes=rb, blocks=b, context=o.context_tokens,
                                        bases=bases))
    return ms


def _results(ms, o: GpuGatherOptions, plan: _Plan, ceiling, sim: bool, mem, cpu_node) -> list[dict]:
    """Record entries of every configuration with samples, each gather linked to its full-prefix copy."""
    out = []
    for m in ms:
        r = result_of(m, ceiling, sim)
        if r is None:
            continue
        r["params"]["context_tokens"] = o.context_tokens
        if m.test == "gpu_gather":
            r["params"]["index_source"] = plan.streams[(r["params"]["topk"], r["params"]["index_pattern"])][1]
        r["memory_node"] = f"node{mem}" if mem is not None else None
        r["cpu_node"] = f"node{cpu_node}" if cpu_node is not None else None
        out.append(r)
    link_prefix_to_gather(out)
    return out


def _resolve(o: GpuGatherOptions, reader, warnings):
    """(topology or None, memory node, CPU node, pre-fault CPUs). Best-effort placement survives a
    topology that cannot be read (gVisor's reduced sysfs) and says so."""
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    try:
        from sactool.memory.nodes import topology

        topo = topology(reader)
    except SactoolError as e:
        if o.placement != "best-effort" or o.dax:
            raise
        warnings.append(records.warning("no_topology", f"the NUMA topology cannot be read ({e.message})",
                              "placement is first-touch and unverified"))
        return None, o.node, None, o.cpus or allowed
    if o.dax:
        dev = next((d for d in topo.dax_devices if d.name == o.dax.rsplit("/", 1)[-1]), None)
        if dev is None or dev.mode != "devdax":
            from sactool.memory import map_devdax

            map_devdax(o.dax, reader=reader)  # raises the precise error
            raise TopologyError(f"{o.dax} is not a devdax device", "see 'sactool probe'")
        mem = dev.target_node
    elif o.node is not None:
        mem = o.node
    elif topo.verdict.pool_nodes:
        mem = topo.verdict.pool_nodes[0]
    else:
        mem = None
    if mem is None or (mem not in topo.node_ids and not o.dax):
        if o.placement != "best-effort":
            from sactool.memory.nodes import check_memory_node

            check_memory_node(topo, mem if mem is not None else 0)
        return topo, mem, None, o.cpus or allowed
    from sactool.bench.api import resolve_cpus

    try:
        cpu_node, cpus = resolve_cpus(topo, mem, o.cpus)
    except TopologyError:
        if o.placement != "best-effort":
            raise
        return topo, mem, None, o.cpus or allowed
    return topo, mem, (cpu_node if cpu_node >= 0 else None), cpus


def _stand_in(topo, mem, dax):
    if topo is None or dax or mem is None or mem not in topo.node_ids:
        return None
    kind = topo.node(mem).kind
    if kind == "cxl" and not topo.verdict.stand_in:
        return None
    return {"node": f"node{mem}", "kind": kind, "stands_in_for": "cxl",
            "reason": topo.verdict.reason if topo.verdict.stand_in else f"node{mem} is {kind}, not CXL memory"}


def _path_warnings(gpu, topo, mem) -> list[dict]:
    out = []
    if topo is None or mem is None or gpu.cpu_node is None or mem not in topo.node_ids:
        return out
    near = topo.nearest_cpu_node(mem)
    if near != gpu.cpu_node:
        out.append(records.warning("gpu_remote_memory", f"GPU {gpu.index} hangs off node{gpu.cpu_node}, the memory's nearest "
                         f"CPU node is node{near}: reads cross the inter-socket link",
                         "SAC places each rank's pool on the CXL device of its own socket"))
    return out

