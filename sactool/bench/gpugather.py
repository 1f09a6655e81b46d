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

The run is split by what it does: options and defaults (:mod:`~sactool.bench.gpuoptions`), index
streams and the buffer layout (:mod:`~sactool.bench.gpustreams`), the clock and the measured
configurations (:mod:`~sactool.bench.gpumeasure`); this module places the buffer, plans, runs
and writes the record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sactool import records
from sactool.bench import record as R
from sactool.bench.gpumeasure import (  # noqa: F401 (re-exported: what the run is made of)
    GpuClock, _Measure, gather_config, lines_per_round, link_prefix_to_gather, prefix_config, result_of,
)
from sactool.bench.gpuoptions import (  # noqa: F401 (re-exported)
    DEFAULT_BLOCKS, DEFAULT_CONTEXT, DEFAULT_RECORDS, DEFAULT_THREADS, DEFAULT_TOPK, L2_FALLBACK_BYTES, LINE,
    MAX_INDEX_BYTES, PATTERNS, GpuGatherOptions, validate,
)
from sactool.bench.gpustreams import (  # noqa: F401 (re-exported)
    expected_records, fill_pattern, index_stream, region_bases, steps_for,
)
from sactool.bench.protocol import PRESETS, run_protocol
from sactool.errors import SactoolError, TopologyError, UsageError, settle
from sactool.host.sysfs import SysfsReader
from sactool.units import format_bytes, format_size_arg


# ---- the run ------------------------------------------------------------------------------------


def default_size(o: GpuGatherOptions, steps_max: int, floor: int = 1 << 30) -> int:
    region = (o.context_tokens + steps_max) * max(o.record_bytes)
    need = max(o.blocks) * region
    return -(-max(need, floor) // (2 << 20)) * (2 << 20)


def run_gpu_gather(o: GpuGatherOptions, *, reader: SysfsReader | None = None, progress=None,
                   notify=None) -> R.BenchRecord:
    """Measure the GPU swap-in path on one pool target with one GPU and return the bench record.

    The host's CPUs place, fill and register the buffer and time every launch, and the copies cross the
    host's memory: from the placement until the buffer is unmapped the run holds the machine-wide
    measurement lock (:mod:`sactool.bench.lock`, the one ``sactool bench`` takes): another sactool
    measurement running, it waits, saying so through ``notify``, or refuses with ``o.wait`` False (exit
    11). The record keeps ``measurement_lock`` and ``measured`` (the locked window)."""
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
    ceiling = gpuplace.path_ceiling(gpu, topo, mem, o.dax, reader)
    from sactool.bench.api import _utc_us
    from sactool.bench.lock import measurement_lock

    with measurement_lock(wait=o.wait, notify=notify, what=f"'sactool bench {o.command}'") as lock:
        window = {"start_utc": _utc_us()}
        results, complete, reg, bdesc = _place_and_measure(o, cuda, sim, plan, proto, ceiling, topo, mem, cpu_node,
                                                           cpus, reader, warnings, progress)
        window["end_utc"] = _utc_us()
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
        "protocol": pdata, "memory_node": mem,
        "dax_device": o.dax, "cpu_node": cpu_node, "cpus": list(cpus),
        "stand_in": _stand_in(topo, mem, o.dax), "buffer": bdesc, "llc": llc.to_data() if llc else None,
        "gpu": gpu.to_data(), "registration": reg, "path_ceiling": ceiling,
        "context_tokens": o.context_tokens, "results": results, "warnings": warnings, "complete": complete,
        "measurement_lock": lock.to_data(), "measured": window,
    })
    return R.from_data(data)


def _place_and_measure(o: GpuGatherOptions, cuda, sim: bool, plan: "_Plan", proto, ceiling: dict, topo, mem, cpu_node,
                       cpus, reader, warnings: list, progress) -> tuple[list[dict], bool, dict | None, dict]:
    """Place, fill and register the host buffer, run the protocol over every configuration, unmap it;
    (results, complete, registration, buffer block). Ctrl-C keeps the finished samples."""
    from sactool.bench import gpuplace

    if progress:
        progress(f"placing {format_bytes(plan.size)} on " + (o.dax or (f"node{mem}" if mem is not None else "host memory")), 0, 1)
    buf, placement = gpuplace.place(plan.size, node=mem, dax=o.dax, cpus=cpus, topo=topo, reader=reader,
                                    placement=o.placement, hugepages=o.hugepages)
    results: list[dict] = []
    ms: list = []
    complete, reg, bdesc = True, None, {}
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
            settle()   # the last statement the interrupt can stop: from here a signal finds the record finished
            del dev_u8
    except KeyboardInterrupt:
        complete = False
        if not results and ms:   # stopped between the measurement and its results: the samples are kept
            results = _results(ms, o, plan, ceiling["ceiling_bytes_per_s"], sim, mem, cpu_node)
    finally:
        host_u8 = placed_u8 = dev_u8 = None  # noqa: F841  (drop the views, and configs over them, first)
        ms = []  # noqa: F841
        from sactool.memory.placed import close_after

        close_after(buf)
    return results, complete, reg, bdesc


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
    # the simulator has no cache to outrun either: no 1 GiB floor (filling it took ~50 s of a 60 s run under load)
    size = o.size_bytes or default_size(o, steps_max, floor=(64 << 20) if sim else (1 << 30))
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
        r["memory_node"] = mem
        r["cpu_node"] = cpu_node
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
    return {"node": mem, "kind": kind, "stands_in_for": "cxl",
            "reason": topo.verdict.reason if topo.verdict.stand_in else f"node{mem} is {kind}, not CXL memory"}


def _path_warnings(gpu, topo, mem) -> list[dict]:
    out: list[dict] = []
    if topo is None or mem is None or gpu.cpu_node is None or mem not in topo.node_ids:
        return out
    near = topo.nearest_cpu_node(mem)
    if near != gpu.cpu_node:
        out.append(records.warning("gpu_remote_memory", f"GPU {gpu.index} hangs off node{gpu.cpu_node}, the memory's nearest "
                         f"CPU node is node{near}: reads cross the inter-socket link",
                         "SAC places each rank's pool on the CXL device of its own socket"))
    return out

