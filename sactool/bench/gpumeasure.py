"""``bench gpu-gather``'s measurements: the GPU clock (CUDA events; wall time under the simulator),
one configuration of the top-k gather kernel or of the full-prefix copy, and its derived figures."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from sactool import records
from sactool.bench.gpuoptions import LINE
from sactool.bench.gpustreams import expected_records
from sactool.bench.protocol import Config
from sactool.errors import SactoolError, TopologyError


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
    d: dict[str, Any] = {"bandwidth_bytes_per_s": bw, "step_us": step_s * 1e6,
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


