"""``simulate(options) -> SimulationResult``: SAC/CXL vs RDMA pool vs local DRAM for a platform.

For every (context, concurrency) point and placement this runs :func:`engine.run` and reports
mean/p99 TTFT, mean TBT, output-token throughput, the local memory the KV needs and the largest
concurrency that fits; then the ratios SAC/RDMA and SAC/DRAM, their mean over contexts, and the
drivers of each ratio (bytes moved, queueing, capacity cap, compute) for ``--explain``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from sactool.errors import CapacityError, UsageError
from sactool.simulate import engine
from sactool.simulate.gpu import measured_model, prefill_s, roofline_model
from sactool.simulate.misses import DEFAULT_STEPS, MissProfile, lru_profile
from sactool.simulate.platform import CASES, Platform
from sactool.hisparse.cost import rdma_full_prefix_bytes
from sactool.units import format_bytes, format_tokens

SCHEMA_VERSION = 2
"""Version of the ``simulation`` record (``sactool simulate --format json``); its history:

1 — the first format.
2 — the ``machine`` block's ``numa_nodes[].node`` is a number."""


@dataclass(frozen=True)
class SimulationOptions:
    platform: Platform
    contexts: tuple[int, ...] | None = None
    concurrency: tuple[int, ...] | None = None
    output_tokens: int | None = None
    case: str | None = None
    arrival_rate_per_s: float | None = None
    prefetch: bool | None = None
    placements: tuple[str, ...] = engine.PLACEMENTS
    hotbuffer_steps: int = DEFAULT_STEPS
    seed: int = 0
    miss_fn: Callable[[int, int], MissProfile] | None = None   # (context, buffer) -> profile
    notes: tuple[str, ...] = ()     # carried into the result (e.g. where a --profile's figures came from)
    progress: Callable[[str, int, int], None] | None = None    # (what, done, total) per simulated point

    def __post_init__(self) -> None:
        """Refuse what would make the event loop run forever or mean nothing (NaN, inf, <= 0)
        before any work — the platform file's own fields are checked the same way by its loader."""
        rate = self.arrival_rate_per_s
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                 or not math.isfinite(rate) or rate <= 0):
            raise UsageError(f"arrival rate {rate!r} must be a finite number of requests per second above zero",
                             "e.g. --arrival-rate 2.5, or leave it out for a closed loop at the concurrency")
        for what, vals in (("context", self.contexts), ("concurrency", self.concurrency)):
            for v in vals or ():
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise UsageError(f"{what} {v!r} must be a whole number >= 1", f"give positive {what} values")
        for what, n, lo in (("output tokens", self.output_tokens, 1), ("hot-buffer steps", self.hotbuffer_steps, 2)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < lo):
                raise UsageError(f"{what} {n!r} must be a whole number >= {lo}", f"give {what} of at least {lo}")


@dataclass(frozen=True)
class PlacementPoint:
    placement: str
    context_tokens: int
    concurrency: int
    fits: bool
    capped: bool                    # concurrency above what fits: the excess waited
    max_concurrency: int
    local_memory_bytes: float       # host memory the requested concurrency's KV needs (0 for SAC: it is in the pool)
    gpu_hot_buffer_bytes_per_gpu: float   # hot buffers + index keys per GPU at the requested concurrency
    ttft_mean_s: float | None = None
    ttft_p99_s: float | None = None
    tbt_mean_s: float | None = None
    throughput_tokens_per_s: float | None = None
    hit_rate: float | None = None
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Ratios:
    context_tokens: int | None       # None: mean over contexts
    concurrency: int
    sac_vs_rdma_throughput: float | None
    rdma_vs_sac_ttft: float | None    # > 1: SAC has the lower TTFT
    rdma_vs_sac_tbt: float | None
    sac_vs_dram_throughput: float | None
    dram_vs_sac_tbt: float | None = None


@dataclass(frozen=True)
class SimulationResult:
    platform: str
    origin: str
    model: str
    kv_dtype: str
    record_bytes: int
    case: str
    output_tokens: int
    hotbuffer_steps: int
    inputs: dict[str, Any]
    points: tuple[PlacementPoint, ...]
    ratios: tuple[Ratios, ...]
    validation: dict[str, Any]
    notes: tuple[str, ...]
    # validation view of the miss volume vs the authors' logs (``misscheck``); never an input
    miss_check: dict[str, Any] = field(default_factory=dict)

    def point(self, placement: str, context: int, concurrency: int) -> PlacementPoint:
        for p in self.points:
            if (p.placement, p.context_tokens, p.concurrency) == (placement, context, concurrency):
                return p
        raise KeyError((placement, context, concurrency))

    def to_data(self) -> dict[str, Any]:
        from sactool.records import header, to_data

        from sactool.host.machine import machine_block

        d = header("simulation", SCHEMA_VERSION)
        # the host that ran the model (the simulated platform is described by `platform`/`inputs`)
        d["machine"] = machine_block()
        d.update({f.name: to_data(getattr(self, f.name)) for f in dataclasses.fields(self)})
        return d


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q * (len(s) - 1)))))
    return s[k]


def _path(p: Platform, placement: str, record_bytes: int, common_s: float = 0.0) -> engine.PathModel:
    """A rank's path to the memory it gathers from (:func:`sactool.simulate.engine.path_model`)."""
    return engine.path_model(p, placement, record_bytes, common_s)


def calibration_of(p: Platform, record_bytes: int, layers: int):
    """The platform's fitted calibration (``calibration.calibrate``, made when it was loaded), or None."""
    return p.calibration


def _check(opts: SimulationOptions, spec, contexts, concs, out: int, case: str, rate) -> None:
    """Refuse what the model cannot run, naming the option (before any work)."""
    p = opts.platform
    if out < 1:
        raise UsageError(f"output tokens {out} must be >= 1", "e.g. --output-tokens 1024")
    if case not in CASES:
        raise UsageError(f"unknown case {case!r}", f"use {' or '.join(CASES)}")
    for c in contexts:
        if c > spec.max_position_embeddings:
            raise UsageError(f"context {c} tokens exceeds {spec.name}'s max_position_embeddings "
                             f"{spec.max_position_embeddings}", "pick a shorter --context")
        if c + out > spec.max_position_embeddings:
            raise UsageError(f"context {c} + output {out} tokens exceeds {spec.name}'s max_position_embeddings "
                             f"{spec.max_position_embeddings}", "pick a shorter --context or fewer output tokens")
    for c in concs:
        if c < 1:
            raise UsageError(f"concurrency {c} must be >= 1", "give positive concurrencies")
    if rate is not None and rate <= 0:
        raise UsageError(f"arrival rate {rate} must be > 0", "give requests per second above zero")
    if case == "cache_populate" and not p.prefill_points:
        raise UsageError("cache_populate needs measured prefill times (platform field prefill.measured)",
                         "add prefill.measured to the platform file, or simulate --case cache_hit")
    bad = [x for x in opts.placements if x not in engine.PLACEMENTS]
    if bad:
        raise UsageError(f"unknown placement {bad[0]!r}", f"use {', '.join(engine.PLACEMENTS)}")


def simulate(opts: SimulationOptions) -> SimulationResult:
    """Stages: resolve the run's settings from the platform and the options (and check them);
    the compute model; every (context, concurrency, placement) point; ratios; notes; the inputs
    the result reports."""
    from sactool.models import get_model

    p = opts.platform
    notes: list[str] = list(opts.notes)
    spec = get_model(p.model)
    R = spec.record_bytes(p.kv_dtype)
    L = spec.num_layers
    contexts = tuple(opts.contexts or p.contexts)
    concs = tuple(opts.concurrency or p.concurrency)
    out = p.output_tokens if opts.output_tokens is None else opts.output_tokens
    case = opts.case or p.case
    prefetch = p.prefetch if opts.prefetch is None else opts.prefetch
    rate = opts.arrival_rate_per_s if opts.arrival_rate_per_s is not None else p.arrival_rate_per_s
    _check(opts, spec, contexts, concs, out, case, rate)
    if p.gpu.step_points:
        compute = measured_model(p.gpu.step_points)
    else:
        compute = roofline_model(p.gpu.name, model_name=spec.name, tp=p.gpus, layers=L, top_k=p.top_k,
                                 record_bytes=R, index_key_bytes=spec.indexer_bytes)
    cal = calibration_of(p, R, L)
    miss_fn = opts.miss_fn or _default_miss_fn(opts, cal)
    harness = p.harness == "e2e_bench" and case == "cache_hit" and rate is None
    if p.harness == "e2e_bench" and not harness:
        notes.append("the benchmark harness models the cache-hit round in a closed loop: "
                     f"{'cache_populate' if case != 'cache_hit' else 'Poisson arrivals'} use the steady model")
    setup = _Setup(p, opts, L, R, out, case, rate, prefetch, compute, miss_fn, harness, cal)
    _refuse_what_fits_nowhere(p, opts.placements, spec.indexer_bytes, contexts, concs, L, R, out)
    points, miss_used, overheads = _sweep(setup, spec.indexer_bytes, contexts, concs)
    ratios = _ratios(points, contexts, concs)
    if opts.progress:
        total_points = len(contexts) * len(concs) * len(opts.placements)
        opts.progress("done", total_points, total_points)
    notes += _run_notes(p, opts, concs, harness)
    inputs = _inputs(setup, contexts, overheads, miss_used)
    check = {}
    if "sac" in opts.placements and "dram" in opts.placements:
        from sactool.simulate.misscheck import miss_check

        check = miss_check(p, contexts=contexts, layers=L, record_bytes=R,
                           paths={pl: _path(p, pl, R, setup.common_s) for pl in ("sac", "dram")}, compute=compute,
                           miss_fn=miss_fn, layer_profile=_layer_targets(p))
    return SimulationResult(p.name, p.origin, spec.name, p.kv_dtype, R, case, out, opts.hotbuffer_steps, inputs,
                            tuple(points), tuple(ratios), dict(p.validation), tuple(notes), check)


def _sweep(st: "_Setup", indexer_bytes: int, contexts, concs):
    """Every (context, concurrency, placement) point in that order: (points, the miss profiles used,
    the HiSparse overheads by context); :func:`_refuse_what_fits_nowhere` has refused what fits no placement."""
    p, opts, L, R = st.p, st.opts, st.layers, st.record_bytes
    total_points = len(contexts) * len(concs) * len(opts.placements)
    done_points = 0
    overheads: dict[int, dict[int, float]] = {}
    points: list[PlacementPoint] = []
    miss_used: dict[str, dict[str, float]] = {}
    for ctx in contexts:
        kv = rdma_full_prefix_bytes(ctx, R, L)     # one request's full KV (all layers)
        idx_bytes = ctx * L * indexer_bytes
        for conc in concs:
            for pl in opts.placements:
                buf, cap, local, per_gpu_hot = _capacity(p, pl, conc, kv, idx_bytes, L, R, st.out)
                limit = min(conc, cap)
                if limit < 1:
                    points.append(PlacementPoint(pl, ctx, conc, False, True, cap, local, per_gpu_hot))
                    done_points += 1
                    continue
                if opts.progress:
                    opts.progress(f"{format_tokens(ctx)} c={conc} {pl}", done_points, total_points)
                prof = st.miss_fn(ctx, buf)
                miss_used[f"{ctx}/{buf}"] = {"cold_misses_per_layer": prof.at(0), "steady_misses_per_layer": prof.steady,
                                             "hit_rate": prof.hit_rate}
                res = _run_point(st, pl, ctx, conc, limit, prof, overheads)
                done_points += 1
                points.append(PlacementPoint(
                    pl, ctx, conc, True, limit < conc, cap, local, per_gpu_hot,
                    ttft_mean_s=sum(res.ttft_s) / len(res.ttft_s), ttft_p99_s=_pct(res.ttft_s, 0.99),
                    tbt_mean_s=sum(res.tbt_s) / len(res.tbt_s), throughput_tokens_per_s=res.throughput_tokens_per_s,
                    hit_rate=prof.hit_rate, breakdown=dataclasses.asdict(res.breakdown)))
    return points, miss_used, overheads


def _refuse_what_fits_nowhere(p: Platform, placements, indexer_bytes: int, contexts, concs, L: int, R: int,
                              out_tokens: int) -> None:
    """Before any point is simulated: a (context, concurrency) that every placement would have to
    cap below the request is refused (exit 6), naming the largest concurrency the platform's pools
    and GPU budget hold at that context (:func:`_capacity`, arithmetic only). Simulating it would
    queue the excess requests and take time in proportion to the request (minutes at 100000)."""
    bad, fit_at = [], {}
    for ctx in contexts:
        kv = rdma_full_prefix_bytes(ctx, R, L)
        caps = {pl: _capacity(p, pl, 1, kv, ctx * L * indexer_bytes, L, R, out_tokens)[1] for pl in placements}
        most = max(caps.values(), default=0)
        over = [c for c in concs if c > most]
        if over:
            fit_at[ctx] = most
            each = ", ".join(f"{pl} {n}" for pl, n in caps.items())
            need = _capacity(p, "dram", max(over), kv, 0, L, R, out_tokens)[2]   # its KV, a shared prefix once
            bad.append(f"{', '.join(map(str, over))} at {format_tokens(ctx)} tokens "
                       f"({format_bytes(need)} of KV for {max(over)}; at most {most} fit: {each})")
    if not bad:
        return
    pools = f"CXL pool {format_bytes(p.cxl_capacity_bytes)}, host DRAM {format_bytes(p.dram_capacity_bytes)}"
    most = ", ".join(f"{n} at {format_tokens(c)}" for c, n in fit_at.items() if n >= 1)
    hint = (f"lower --concurrency (at most {most} fit), " if most else "") + \
        f"lower --context, or add pool capacity ({pools})"
    raise CapacityError("concurrency fits in no placement: " + "; ".join(bad), hint)


def _capacity(p: Platform, pl: str, conc: int, kv: int, idx_bytes: int, L: int, R: int, out_tokens: int = 0):
    """One placement at one (context, concurrency): (device hot-buffer tokens, the largest
    concurrency that fits, the local memory the requested concurrency needs, hot buffers + index
    keys per GPU)."""
    ranks = p.attn_dp_size
    buf = p.rdma_device_buffer_size if (pl == "rdma" and p.rdma_device_buffer_size) else p.device_buffer_size
    hot = buf * L * R
    # capacity: the memory that must hold every resident request's full KV
    cap_mem = p.cxl_capacity_bytes if pl == "sac" else p.dram_capacity_bytes
    cap = int(cap_mem // kv)
    if p.shared_prefix and pl != "rdma":
        # one prompt for all requests: each rank's slice of the pool holds the prefix once (reference
        # counted) and every resident request's own output tokens
        own = max(1, out_tokens) * L * R
        cap = max(0, ranks * int((cap_mem / ranks - kv) // own))
        conc_kv = kv * min(conc, ranks) + conc * own
    else:
        conc_kv = conc * kv
    if p.gpu.kv_budget_bytes:
        cap = min(cap, int(p.gpu.kv_budget_bytes // (hot + idx_bytes)) * ranks)
    # what the requested concurrency needs (max_concurrency says how much of it fits)
    local = 0.0 if pl == "sac" else float(conc_kv)
    per_gpu_hot = -(-conc // ranks) * (hot + idx_bytes)
    return buf, cap, local, per_gpu_hot


def _inputs(st: "_Setup", contexts, overheads: dict[int, dict[int, float]],
            miss_used: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The figures the run used, as the result reports them (``inputs``)."""
    p = st.p
    return {
        "compute": st.compute.detail,
        "hisparse_overhead_s": p.gpu.hisparse_overhead_s,
        "hisparse_overhead_by_requests_per_rank_s": {str(k): v for k, v in overheads.items()},
        "harness": p.harness if st.harness else "steady",
        "frontend_s_per_prompt_token": p.frontend_s_per_prompt_token,
        "extend_s": {str(c): prefill_s(p.extend_points, c) for c in contexts} if p.extend_points else {},
        "rdma_conversion_bytes_per_s": p.rdma_conversion_bytes_per_s,
        "layer_targets": _layer_targets(p),
        "hisparse_kernel": p.hisparse_kernel,
        "prefetch": st.prefetch,
        "arrival": f"poisson {st.rate}/s" if st.rate else "closed loop",
        "paths": {pl: dataclasses.asdict(_path(p, pl, st.record_bytes, st.common_s)) for pl in ("sac", "dram")},
        "calibration": st.cal.to_data() if st.cal else None,
        "nic": {"count": p.nics, "bandwidth_bytes_per_s": p.nic_bytes_per_s,
                "fetch_blocks_decode": p.rdma_fetch_blocks_decode},
        "misses": miss_used,
    }


def _layer_targets(p: Platform) -> str | None:
    """The per-layer locality profile that fits the platform's model (None: random layer spread);
    the one rule tune shares (``workload.layers.model_workload``)."""
    from sactool.models import get_model
    from sactool.workload.layers import model_workload

    spec = get_model(p.model)
    return model_workload(spec.name, spec.num_layers, p.top_k).layer_targets


def _default_miss_fn(opts: SimulationOptions, cal=None) -> Callable[[int, int], MissProfile]:
    """Hot-buffer misses from the workload model + LRU replay (per-layer targets when profiled)."""
    from sactool.models import get_model

    p = opts.platform
    if p.topk_workload == "filler":
        from sactool.simulate.fillerfit import profile

        steps = max(2, opts.output_tokens or p.output_tokens)
        return lambda ctx, buf: profile(p.filler, ctx, buf, p.top_k, kernel=p.hisparse_kernel, steps=steps,
                                        seed=opts.seed)
    if p.topk_workload == "calibrated":
        from sactool.simulate.misses import calibrated_profile

        if cal is None:
            spec = get_model(p.model)
            cal = calibration_of(p, spec.record_bytes(p.kv_dtype), spec.num_layers)

        return lambda ctx, buf: calibrated_profile(cal, ctx, buf, p.top_k)
    L = get_model(p.model).num_layers
    case = opts.case or p.case
    mode = "pd" if case == "cache_hit" else "colocated"
    targets = _layer_targets(p)
    return lambda ctx, buf: lru_profile(ctx, buf, p.top_k, L, steps=opts.hotbuffer_steps, seed=opts.seed,
                                        mode=mode, layer_targets=targets, kernel=p.hisparse_kernel)


def dram_step_s(points, requests_per_rank: float, context: int) -> float:
    """Measured DRAM-HiSparse decode step at a batch and context: piecewise linear in requests per
    rank at each measured context (end segments extended), then linear in context between them."""
    from sactool.simulate.gpu import _line

    by: dict[int, list[tuple[int, float]]] = {}
    for q in points:
        by.setdefault(q.context_tokens, []).append((q.requests_per_rank, q.step_time_s))
    per = tuple(sorted((c, _line(tuple(sorted(v)), requests_per_rank)) for c, v in by.items()))
    if context <= per[0][0]:
        return per[0][1]
    if context >= per[-1][0]:
        return per[-1][1]
    return _line(per, context)


def _overhead_fn(p: Platform, sc, compute, dram_misses: MissProfile, ctx: int):
    """HiSparse per-step cost at b requests per rank: the measured DRAM-HiSparse step minus GPU
    compute minus the modelled swap-in of the DRAM path at the same batch (steady misses), >= 0."""
    dsc = dataclasses.replace(sc, placement="dram", path=_path(p, "dram", sc.record_bytes), hisparse_overhead_s=0.0,
                              overhead_fn=None, prefetch=False)
    R = sc.ranks
    cache: dict[int, float] = {}
    table: dict[int, float] = {}

    def fn(b: int) -> float:
        if b not in cache:
            st = dram_misses.steady
            _, comp, _, swap = engine._step_time(dsc, [b] * R, [b * st] * R, [st] * R, [], {})
            cache[b] = max(0.0, dram_step_s(p.gpu.dram_step_points, b, ctx) - comp - swap)
        return cache[b]

    for b in sorted({q.requests_per_rank for q in p.gpu.dram_step_points}):
        table[b] = fn(b)
    return fn, table


def _calibrated_overhead_fn(cal, sc, compute, ctx: int):
    """HiSparse per-step cost at b requests per rank: the calibrated zero-miss step
    (``Calibration.base_s``) minus GPU compute minus the per-layer kernel latency the engine adds
    (the misses' cost is added by the engine itself), >= 0."""
    cache: dict[int, float] = {}

    def fn(b: int) -> float:
        if b not in cache:
            cache[b] = max(0.0, cal.base_s(b, ctx) - compute.step_s(b, ctx) - sc.layers * sc.path.fixed_s)
        return cache[b]

    table = {b: fn(b) for b, _ in cal.base[min(cal.base, key=lambda c: abs(c - ctx))]}
    return fn, table


@dataclass(frozen=True)
class _Setup:
    """What every simulated point of one run shares."""

    p: Platform
    opts: SimulationOptions
    layers: int
    record_bytes: int
    out: int
    case: str
    rate: float | None
    prefetch: bool
    compute: Any
    miss_fn: Callable[[int, int], MissProfile]
    harness: bool
    cal: Any = None                 # calibration.Calibration or None

    @property
    def common_s(self) -> float:
        return self.cal.per_missed_record_s if self.cal else 0.0


def _run_point(st: _Setup, pl: str, ctx: int, conc: int, limit: int, prof: MissProfile,
               overheads: dict[int, dict[int, float]]):
    """One placement at one (context, concurrency): the harness or the steady model."""
    p, opts, L, R, out, case, rate = st.p, st.opts, st.layers, st.record_bytes, st.out, st.case, st.rate
    prefetch, compute, miss_fn, harness = st.prefetch, st.compute, st.miss_fn, st.harness
    rpc = p.requests_per_concurrency
    if harness and pl == "rdma" and p.rdma_requests_per_concurrency:
        rpc = p.rdma_requests_per_concurrency
    sc = engine.Scenario(
        placement=pl, ranks=p.attn_dp_size, layers=L, record_bytes=R, context=ctx, output_tokens=out,
        concurrency=conc, limit=limit, requests=max(conc, int(round(rpc * conc))),
        arrival_rate_per_s=rate, case=case, compute=compute,
        hisparse_overhead_s=p.gpu.hisparse_overhead_s, prefetch=prefetch, path=_path(p, pl, R, st.common_s),
        misses=prof, gpus_per_switch=p.gpus_per_switch,
        switch_uplink_bytes_per_s=p.switch_uplink_bytes_per_s, nics=p.nics,
        nic_bytes_per_s=p.nic_bytes_per_s, nic_chunk_bytes=p.nic_chunk_bytes,
        nic_per_message_s=p.nic_per_message_s, fetch_blocks_decode=p.rdma_fetch_blocks_decode,
        conversion_bytes_per_s=p.rdma_conversion_bytes_per_s, fetch_fixed_s=p.rdma_fetch_fixed_s,
        prefill_s=prefill_s(p.prefill_points, ctx) if p.prefill_points else 0.0,
        pool_write_bytes_per_s=p.cxl_write_bytes_per_s if pl == "sac" else p.dram_write_bytes_per_s,
        seed=opts.seed)
    if st.cal is not None:
        ovh_fn, overheads[ctx] = _calibrated_overhead_fn(st.cal, sc, compute, ctx)
        sc = dataclasses.replace(sc, overhead_fn=ovh_fn)
    elif p.gpu.dram_step_points:
        ovh_fn, overheads[ctx] = _overhead_fn(p, sc, compute,
                                              miss_fn(ctx, p.gpu.dram_step_buffer or p.device_buffer_size), ctx)
        sc = dataclasses.replace(sc, overhead_fn=ovh_fn)
    if not harness:
        return engine.run(sc)
    from sactool.simulate.harness import HarnessInputs, run_harness

    return run_harness(sc, HarnessInputs(p.frontend_s_per_prompt_token * ctx,
                                         prefill_s(p.extend_points, ctx) if p.extend_points else 0.0))


def _run_notes(p: Platform, opts: SimulationOptions, concs, harness: bool) -> list[str]:
    """What the reader should know about how this run was modelled."""
    notes = []
    if p.rdma_conversion_bytes_per_s is None and "rdma" in opts.placements:
        notes.append("RDMA layout conversion (page-first -> layer-first CPU copy) not modelled: "
                     "no measured rate in the platform (rdma.layout_conversion_bytes_per_s)")
    if p.rdma_device_buffer_size and p.rdma_device_buffer_size != p.device_buffer_size:
        notes.append(f"RDMA runs with a {p.rdma_device_buffer_size}-slot hot buffer, SAC/DRAM with "
                     f"{p.device_buffer_size} (as in the platform's source runs)")
    if not p.gpu.kv_budget_bytes:
        notes.append("GPU memory (hot buffers + index keys) does not cap concurrency here: no gpu.kv_budget_bytes")
    if p.attn_dp_size < p.gpus:
        notes.append(f"{p.gpus} GPUs in {p.attn_dp_size} attention-DP ranks: each rank is simulated as one GPU; the "
                     "replicated swap-ins of its attention-TP peers are not added to the shared links")
    cal = p.calibration
    if p.topk_workload == "filler" and not opts.miss_fn:
        notes.append("hot-buffer misses: LRU replay over each request's whole output of the filler workload "
                     "(workload.topk filler: the prompt the runs decoded; its parameters fitted to the "
                     f"calibration's misses at {', '.join(map(str, sorted({b for _, b in cal.misses}))) if cal else '?'} "
                     "slots, simulate.fillerfit)")
    elif p.topk_workload == "calibrated" and cal is not None and not opts.miss_fn:
        notes.append(f"hot-buffer misses: fitted on the platform's {cal.runs} calibration runs (workload.topk "
                     f"calibrated: the prompt those runs decoded), a request-life mean per context and buffer")
    else:
        notes.append(f"hot-buffer misses from {opts.hotbuffer_steps} simulated decode steps per context "
                     f"({p.hisparse_kernel} HiSparse kernel's LRU) of the ShareGPT-profiled workload model; "
                     "later steps use the steady mean")
    if cal is not None:
        notes.append(f"decode step: zero-miss step and a per-missed-record cost of "
                     f"{cal.per_missed_record_s * 1e9:.0f} ns (every placement) fitted on {cal.runs} calibration "
                     f"runs (rms {cal.rms_s * 1e3:.2f} ms); held out: {'; '.join(p.calibration_held_out) or '-'}")
    if p.calibration_baselines:
        notes.append("read from the validation run families (agreement with them is not a prediction): "
                     + ", ".join(p.calibration_baselines))
    if harness:
        rq = {pl: max(1, int(round((p.rdma_requests_per_concurrency if pl == "rdma" and p.rdma_requests_per_concurrency
                                    else p.requests_per_concurrency) * concs[0]))) for pl in opts.placements}
        notes.append("harness e2e_bench (the platform's default, as the authors' runs): the first concurrency requests "
                     "are dispatched in one burst, each completion sends the next; throughput = output tokens / round "
                     "duration; TTFT = first streamed chunk; run set sizes at concurrency "
                     f"{concs[0]}: " + ", ".join(f"{pl} {n}" for pl, n in rq.items()))
    return notes


def _div(a, b):
    return a / b if (a is not None and b) else None


def _ratios(points: list[PlacementPoint], contexts, concs) -> list[Ratios]:
    by = {(q.placement, q.context_tokens, q.concurrency): q for q in points}
    out = []
    for conc in concs:
        per = []
        for ctx in contexts:
            s, r, d = by.get(("sac", ctx, conc)), by.get(("rdma", ctx, conc)), by.get(("dram", ctx, conc))
            g = lambda q, k: getattr(q, k) if q is not None and q.fits else None  # noqa: E731
            x = Ratios(ctx, conc,
                       _div(g(s, "throughput_tokens_per_s"), g(r, "throughput_tokens_per_s")),
                       _div(g(r, "ttft_mean_s"), g(s, "ttft_mean_s")),
                       _div(g(r, "tbt_mean_s"), g(s, "tbt_mean_s")),
                       _div(g(s, "throughput_tokens_per_s"), g(d, "throughput_tokens_per_s")),
                       _div(g(d, "tbt_mean_s"), g(s, "tbt_mean_s")))
            per.append(x)
            out.append(x)
        if len(contexts) > 1:
            def mean(k):
                vals = [getattr(x, k) for x in per if getattr(x, k) is not None]
                return sum(vals) / len(vals) if vals else None
            out.append(Ratios(None, conc, mean("sac_vs_rdma_throughput"), mean("rdma_vs_sac_ttft"),
                              mean("rdma_vs_sac_tbt"), mean("sac_vs_dram_throughput"), mean("dram_vs_sac_tbt")))
    return out
