"""The heavy half of :func:`sactool.tune.api.tune` (numpy, simulation, measurement)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sactool.errors import CapacityError, RecordError, TopologyError
from sactool.hisparse import gpus
from sactool.hisparse.capacity import Deployment, min_ratio, rank_sizing
from sactool.records import warning
from sactool.tune import search
from sactool.tune.fit import Fit
from sactool.tune.hotbuffer import HotBufferRuns
from sactool.tune.options import TuneResult
from sactool.tune.points import PointsStore
from sactool.tune.requests import inputs_for, ladder, observed_step, trade
from sactool.units import format_bytes as _gib

@dataclass(frozen=True)
class Job:
    """What :func:`sactool.tune.api.tune` hands over once the options are checked."""

    o: Any                          # TuneOptions
    spec: Any                       # sactool.models.ModelSpec
    kv: str                         # normalised KV dtype
    attn_dp: int
    rec_bytes: int                  # KV record bytes per token per layer
    path: Path                      # profile to write
    points_path: Path | None        # resumable evaluation points (None: not written)
    progress: Any                   # callable(label, done, total) or None
    t0: float                       # perf_counter() at the start, for elapsed_s


@dataclass
class DesignPoint:
    """Everything the search and :func:`sactool.tune.build.build_profile` read about one tune."""

    o: Any
    spec: Any
    kv: str
    attn_dp: int
    rec_bytes: int
    budget: Any                     # hisparse.gpus.GpuBudget
    gpu: Any                        # tune.gpu.GpuChoice: the GPU the budget is planned for, and why
    pool: Any                       # sactool.pool.discover.PoolInfo
    machine: dict
    dep: Deployment
    contexts: tuple[int, ...]       # asked for
    design: tuple[int, ...]         # those the deployment holds
    concurrency: int
    cap_kw: dict
    replicates: int
    warnings: list
    page: Any = None                # tune.pagesize.PageChoice: the pool's page kind and its figures
    workload: dict | None = None    # where the hot-buffer misses came from (the profile's workload block)
    real_pool: Any = None           # tune --engine vllm: the pool as it is (``pool`` is the search's view)
    sensitivity: list | None = None  # the choice with the misses x1, x2, x5, x10 (tune.observed.sensitivity)
    trade: Any = None               # tune.requests.Trade: the design's requests against fewer with larger buffers
    design_concurrency: int | None = None  # asked (concurrency is what the profile holds: fewer when traded)


def execute(job: Job) -> TuneResult:
    """Budget → workload → pool → design point → gather figures → hot-buffer simulation →
    search → profile (written unless ``o.write`` is false)."""
    from sactool.errors import settle, unsettle
    from sactool.tune.build import build_profile

    unsettle()   # the next host of a fleet after one whose profile is written: a signal that came between stops here
    warnings: list[dict[str, str]] = []
    topo, reader = _probe(job)
    gpu = _gpu_choice(job, topo, warnings)
    budget = gpus.kv_budget(model_name=job.spec.name, tp=job.o.tp, gpu=gpu.name,
                            budget_bytes=job.o.gpu_kv_budget_bytes, weights_bytes=job.o.weights_bytes,
                            checkpoint=job.spec.checkpoint, gpu_source=gpu.detail)
    contexts, replicates, trace = _workload(job, warnings)
    model_wl = _model_workload(job)
    _check_one_request(job, budget, contexts)
    machine, pool = _probe_pool(job, warnings, topo, reader)
    real_pool = pool
    if job.o.engine == "vllm":
        from sactool.tune.vllm import as_search_pool

        pool = as_search_pool(pool, job.o.tp // job.attn_dp)
    fit = Fit(job, budget, pool)
    design, concurrency = fit.design_point(contexts, warnings)
    model_wl, obs = _refit(job, model_wl, design, replicates, warnings)
    sizing = _gather_size(job, pool, warnings)
    size = sizing.size_bytes if sizing is not None else None
    points = PointsStore(job, [t.name for t in pool.targets], model_wl, size)
    from sactool.bench.quick import QuickGathers

    with QuickGathers() as qg:   # every quick-gather buffer placed and verified once for all points (bench/quick.py)
        gather = _gather(job, pool, machine, replicates, points, blocks=fit.dep.requests_per_rank(concurrency),
                         sizing=sizing, gathers=qg)
        page = _page_size(job, pool, replicates, points, size, gathers=qg)
    warnings += list(gather.warnings)
    d = DesignPoint(o=job.o, spec=job.spec, kv=job.kv, attn_dp=job.attn_dp, rec_bytes=job.rec_bytes, budget=budget,
                    gpu=gpu, pool=pool, machine=machine, dep=fit.dep, contexts=contexts, design=design,
                    concurrency=concurrency, cap_kw=fit.cap_kw, replicates=replicates, warnings=warnings,
                    page=page, workload=_workload_block(job, model_wl, trace, replicates), real_pool=real_pool)
    sims = HotBufferRuns(job, design, replicates, trace, points, model_wl)
    chosen, ranked, evals, space = _search(d, fit.placements, gather, sims)
    design_evals = evals
    step = observed_step(d, obs[0], obs[1], fit.placements, gather, sims, chosen, warnings) if obs else None
    d.trade = trade(d, fit.placements, gather, sims, chosen, step)
    d.sensitivity = _sensitivity(d, fit.placements, gather, sims, evals, step)
    d.design_concurrency = concurrency
    if d.trade.traded:   # the profile holds fewer requests, each with the larger buffer
        d.concurrency = d.trade.requests_per_rank * d.attn_dp
        evals = [e for e in d.trade.evals if e.candidate.device_buffer_size == d.trade.chosen.candidate.device_buffer_size]
        chosen, ranked = d.trade.chosen, search.choose(evals)[1]
    profile, summary, alternatives = build_profile(d, chosen=chosen, ranked=ranked, evals=evals, gather=gather,
                                                   by_buffer_evals=design_evals)
    if job.o.engine == "vllm":
        from sactool.tune.vllm import to_vllm

        profile, summary = to_vllm(d, profile, summary, warnings)
    settle()   # inside tune()'s interrupt handler, its last stop: from here a signal finds the profile finished
    written = _write(job, profile)
    return TuneResult(profile=profile, path=written, summary=summary, alternatives=tuple(alternatives),
                      evaluated=len(design_evals) + len(d.trade.evals), space=space, warnings=tuple(warnings),
                      elapsed_s=time.perf_counter() - job.t0, chosen_objective_s=chosen.mean_s,
                      best_objective_s=ranked[0].mean_s, simulations=dict(sims.counts))


def _workload(job: Job, warnings: list) -> tuple[tuple[int, ...], int, Any]:
    """Contexts, replicates and the trace (``--trace`` replays its own context, once)."""
    o, spec = job.o, job.spec
    contexts, replicates, trace = tuple(sorted(set(o.contexts))), o.replicates, None
    if o.trace is None:
        return contexts, replicates, trace
    from sactool.workload import load_trace

    trace = load_trace(o.trace)
    if trace.top_k != spec.index_topk:
        raise RecordError(f"trace {o.trace} has top_k {trace.top_k}, {spec.name} selects {spec.index_topk}",
                          "pass a trace of this model")
    if trace.context_tokens > spec.max_position_embeddings:
        raise RecordError(f"trace {o.trace} context {trace.context_tokens} exceeds max positions "
                          f"{spec.max_position_embeddings}", "pass a trace of this model")
    if "contexts" in o.given:
        warnings.append(warning("trace_context", f"--trace replays its own context "
                                f"({trace.context_tokens} tokens); --context is ignored", ""))
    return (trace.context_tokens,), 1, trace


WORKLOADS = ("sharegpt-dsv32", "filler-sac-runs")
"""``tune --workload``: the real-prompt model (default) or the SAC paper runs' filler prompt."""


def _model_workload(job: Job):
    """The named top-k workload (``--workload``): ``sharegpt-dsv32``, the workload model of this model
    (per-layer targets where a profile fits, else the random spread; the rule simulate shares,
    ``workload.layers.model_workload``), or a packaged filler workload (``workload.filler``)."""
    from sactool.errors import UsageError
    from sactool.workload.layers import model_workload

    spec, name = job.spec, getattr(job.o, "workload", "sharegpt-dsv32")
    if name == "sharegpt-dsv32":
        return model_workload(spec.name, spec.num_layers, spec.index_topk)
    if name not in WORKLOADS:
        raise UsageError(f"unknown --workload {name!r}", f"use one of {', '.join(WORKLOADS)}")
    from sactool.workload.filler import load_filler_workload

    return load_filler_workload(name, top_k=spec.index_topk)


def _workload_block(job: Job, model_wl, trace, replicates: int) -> dict[str, Any]:
    """The profile's ``workload`` block: what the hot-buffer misses were simulated on."""
    o = job.o
    if trace is not None:
        return {"source": "trace", "trace": str(o.trace), "trace_model": trace.meta.get("model"),
                "trace_source": trace.meta.get("source"), "steps": trace.steps, "layers": trace.layers,
                "context_tokens": trace.context_tokens, "mode": "colocated",
                "detail": f"--trace {o.trace}: its own top-k selections, replayed once"}
    return {**model_wl.to_data(), "steps": o.steps, "seeds": [o.seed + r for r in range(replicates)],
            "mode": "colocated"}


def _refit(job: Job, model_wl, design, replicates: int, warnings: list):
    """``--observed``: the workload refit so the simulation reproduces the engine's miss rate at the buffer
    it ran (:mod:`sactool.tune.observed`), and (the observation, that buffer); without it, the workload as
    it is and None."""
    o = job.o
    if getattr(o, "observed", None) is None:
        return model_wl, None
    if job.o.trace is not None:
        from sactool.errors import UsageError

        raise UsageError("--observed refits the workload model; --trace replays a recorded trace instead",
                         "drop one of them")
    from sactool.tune.observed import refit
    from sactool.watch.observe import load

    obs = load(o.observed)
    buf = o.observed_buffer or obs.device_buffer_size
    if buf is None:
        from sactool.errors import UsageError

        raise UsageError(f"--observed {o.observed}: the engine's metrics do not say the hot-buffer size it ran",
                         "give --observed-buffer SLOTS (vLLM's default for DeepSeek-V3.2 and SGLang's: 4096), or "
                         "observe with 'sactool watch --once --format json', whose record names it")
    wl, rec = refit(model_wl, obs, buf, design, o.steps, [o.seed + r for r in range(replicates)],
                    job.spec.index_topk, job.progress)
    warnings.append(warning("workload_refit", f"workload refit to the engine's miss rate {rec['observed_miss_rate']:.2%} "
                            f"at {buf} slots ({o.observed}; {rec['observed_over_model']:.2f}x the model's "
                            f"{rec['model_miss_rate']:.2%}): rate_scale {rec['rate_scale']:.3g}, simulated "
                            f"{rec['refit_miss_rate']:.2%}; {rec['note']}", "fit on this one observation: "
                            "observe again after serving with the new profile to check it"))
    return wl, (obs, buf)


def _sensitivity(d: DesignPoint, placements, gather, sims: HotBufferRuns, evals, step) -> list:
    """Tune's choice re-made with every simulated miss count x2, x5, x10 (no new simulation of the
    buffers the search simulated: their misses scaled, hit rate = 1 - misses / top_k), the design's
    requests weighed against fewer with larger buffers as the choice itself is (:mod:`sactool.tune.requests`)."""
    from sactool.tune.observed import sensitivity

    buffers = sorted({e.candidate.device_buffer_size for e in evals})

    def choice(k: float):
        x = inputs_for(d, gather, sims, d.concurrency, k)
        ev = [search.evaluate(c, x) for c in search.candidates_for(buffers, x, placements)]
        ch, _ = search.choose(ev)
        assert ch is not None   # the same candidates fit whatever the misses: feasibility needs none
        tr = trade(d, placements, gather, sims, ch, step, factor=k)
        same = (tr.chosen.candidate.device_buffer_size, tr.requests_per_rank) == (b0, d.trade.requests_per_rank)
        return tr.chosen, tr.requests_per_rank, ("same: " if same else "") + (tr.brief or tr.why)

    b0 = d.trade.chosen.candidate.device_buffer_size
    return sensitivity(choice, d.trade.chosen, d.trade.requests_per_rank, d.trade.brief or d.trade.why)


def _check_one_request(job: Job, budget, contexts) -> None:
    """The GPU budget must hold one request with top_k hot-buffer slots."""
    top_k = job.spec.index_topk
    one = rank_sizing(1, top_k, min_ratio(1, top_k, min(contexts)), layers=job.spec.num_layers,
                    record_bytes=job.rec_bytes, indexer_bytes=job.spec.indexer_bytes)
    if one.gpu_bytes > budget.bytes_per_gpu:
        raise CapacityError(
            f"the GPU KV budget ({_gib(budget.bytes_per_gpu)} per GPU: {budget.detail}) is too small for one "
            f"request with top_k={top_k} hot-buffer slots: it needs {_gib(one.gpu_bytes)}",
            "give a larger --gpu-kv-budget, a larger --gpu, or more GPUs (--tp)")


def _probe(job: Job):
    """(topology, reader) of this host or of the recording ``--sysfs-root`` names; (None, None) for
    tune --fleet, whose pool comes from the fleet record."""
    from sactool.host.sysfs import SysfsReader
    from sactool.topology import probe

    if job.o.pool_source is not None:
        return None, None
    reader = SysfsReader(job.o.sysfs_root)
    return probe(reader), reader


def _gpu_choice(job: Job, topo, warnings: list):
    """The GPU the budget is planned for (:mod:`sactool.tune.gpu`): probe's NVIDIA GPUs, ``--gpu`` over them."""
    from sactool.tune.gpu import choose_gpu

    choice = choose_gpu(job.o.gpu, getattr(topo, "gpus", ()) or ())
    warnings.extend(choice.warnings)
    return choice


def _probe_pool(job: Job, warnings: list, topo, reader):
    """(machine block, pool info) of this host or of the recording ``--sysfs-root`` names."""
    from sactool.host.machine import machine_block
    from sactool.pool.discover import pool_info
    from sactool.tune.pool import gpu_warnings

    o = job.o
    if o.pool_source is not None:  # tune --fleet: this host's share of a shared pool, from the record
        pool = o.pool_source.pool
        if pool.stand_in:
            warnings.append(warning("stand_in", pool.reason, "figures describe DRAM, not CXL"))
        return o.pool_source.machine, pool
    warnings.extend(gpu_warnings(topo))
    machine = machine_block(reader)
    pool = pool_info(topo, reader, pool_bytes=o.pool_bytes)
    if not topo.live and o.bench is None:
        raise TopologyError(f"the topology comes from a recording ({o.sysfs_root}), not this system: "
                            "tune cannot measure its pool", "pass --bench FILE measured on that machine")
    if pool.stand_in:
        warnings.append(warning("stand_in", pool.reason, "figures describe DRAM, not CXL"))
    return machine, pool


def _gather_size(job: Job, pool, warnings: list):
    """Before measuring: the quick-gather buffer (:mod:`sactool.bench.sizing`), sized from the last-level
    cache of the CPUs that gather and the pool node's free memory; ``--gather-size`` inside that cache
    would measure the cache, not the pool (refused, exit 3), one under 8x it is warned with the cache's
    share. None where tune does not gather itself (``--gather-size`` then unused: warned)."""
    o = job.o
    if o.bench is not None or o.pool_source is not None:
        if o.gather_size_bytes is not None:
            warnings.append(warning("gather_size_unused", "--gather-size sizes tune's own quick gathers; the "
                                    "fetch figures come from the bench record, so it is not used",
                                    "drop --gather-size, or --bench to measure here"))
        return None
    if pool.mode != "numa":
        return None
    from sactool.bench import sizing
    from sactool.bench.api import resolve_cpus
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import free_estimate, topology

    reader = SysfsReader(o.sysfs_root)
    topo = topology(reader)
    caches, rooms, where = [], [], []
    for t in pool.targets:   # every target is measured from the CPUs nearest it
        cpu_node, cpus = resolve_cpus(topo, t.node, None)
        caches.append(sizing.last_level_cache(reader, cpus))
        rooms.append(free_estimate(topo, reader, t.node).room_bytes)
        where.append(f"node{cpu_node}'s CPUs")
    proc, _ = sizing.process_room(reader)
    known = [r for r in rooms + [proc] if r is not None]
    room = min(known) if known else None
    cache = max((c for c in caches if c is not None), key=lambda c: c.bytes, default=None)
    at = where[caches.index(cache)] if cache is not None else where[0]
    if o.gather_size_bytes is not None:
        rule = sizing.check_given(o.gather_size_bytes, cache, room, where=at, refuse_in_cache=True)
    else:
        rule = sizing.derive(cache, room, where=at)
    warnings.extend(rule.warnings)
    return rule


def _gather(job: Job, pool, machine, replicates: int, points: PointsStore, *, blocks: int, sizing=None,
            gathers=None):
    """Fetch figures: from ``--bench`` (GPU swap-in figures at ``blocks`` requests in flight per rank
    when the records have them, else the CPU proxy), or interleaved quick CPU measurements (resumable;
    ``gathers``: the :class:`sactool.bench.quick.QuickGathers` session they are measured in)."""
    from sactool.tune.pool import from_bench, measure_rounds

    o = job.o
    if o.pool_source is not None:
        from sactool.tune.pool import FETCH_FIGURES

        g = o.pool_source.gather   # a fleet bench record's CPU gathers: the CPU proxy
        g.info.setdefault("fetch_path", "cpu_proxy")
        g.info.setdefault("fetch_figure", FETCH_FIGURES["cpu_proxy"])
        g.info.setdefault("swap_in", search.default_swap_in(
            "a fleet record holds CPU gathers, no GPU swap-in figure; CTA widths tie in the model").to_data())
        return g
    if o.bench is not None:   # the CTA width is chosen from the record's GPU figures (tune.pool.swap_in_choice)
        return from_bench(o.bench, job.rec_bytes, pool, machine, strict=o.strict, blocks=blocks,
                          top_k=job.spec.index_topk)
    g = measure_rounds(pool, job.rec_bytes, job.spec.index_topk, replicates, seconds=o.gather_seconds,
                       done=points.of_kind("gather"), on_point=points.add, progress=job.progress,
                       size_bytes=sizing.size_bytes, gathers=gathers)
    g.info["buffer_rule"] = sizing.to_data()
    g.info["detail"] += f" ({sizing.rule})"
    g.info["swap_in"] = search.default_swap_in("tune measured CPU gathers, no GPU swap-in figure; CTA widths tie "
                                               "in the model").to_data()
    return g


def _page_size(job: Job, pool, replicates: int, points: PointsStore, size: int | None, gathers=None):
    """The pool's page kind: measured on the pool node (each kind available there, rounds
    interleaved) when tune measures the pool itself; a devdax device's align fixes it; a --bench
    record measured one kind only, so the engine default stays and says so."""
    from sactool.tune.pagesize import DEFAULT_KIND, PageChoice, available, choose, measure

    o = job.o
    if pool.mode == "devdax":
        aligns = sorted({t.align_bytes for t in pool.targets if t.align_bytes})
        return PageChoice(f"devdax align {', '.join(map(str, aligns)) or 'unknown'}", {},
                          "the device's align fixes a devdax mapping's page size (daxctl reconfigure-device --align)",
                          {})
    if o.bench is not None or o.pool_source is not None:
        return PageChoice(DEFAULT_KIND, {}, "not measured: the --bench record measured one page kind; the engine "
                          "default (THP) is kept", {})
    if size is None:   # no gather buffer sized (tune measures nothing itself): nothing to compare on
        return PageChoice(DEFAULT_KIND, {}, "not measured: tune sized no gather buffer here; the engine "
                          "default (THP) is kept", {})
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import topology

    reader = SysfsReader(o.sysfs_root)
    node = pool.targets[0].node
    kinds, skipped = available(topology(reader), reader, node, size_bytes=size)
    figures = measure(node, kinds, job.rec_bytes, job.spec.index_topk, replicates, seconds=o.gather_seconds,
                      done=points.of_kind("pagesize"), on_point=points.add, progress=job.progress,
                      size_bytes=size, gathers=gathers)
    return choose(figures, skipped)


def _search(d: DesignPoint, placements, gather, sims: HotBufferRuns):
    """(chosen, ranked, evaluations, size of the candidate space)."""
    o, top_k = d.o, d.spec.index_topk
    x = inputs_for(d, gather, sims, d.concurrency)
    if o.exhaustive:
        stage1 = search.all_buffers(top_k)
    else:  # the coarse grid plus the largest sizes that fit (arithmetic only), simulated in one pass
        fine = [b for b in search.largest_feasible(x, placements) if b not in search.coarse_buffers(top_k)]
        stage1 = sorted(set(search.coarse_buffers(top_k)) | set(fine))
    # fewer requests' larger buffers (tune.requests), simulated in the same pass; evaluated there, not here
    fits = search.largest_feasible(x, placements, n=1)
    rungs = ladder(d, placements, gather, sims, fits[-1]) if fits and "concurrency" not in o.given else []
    sims.simulate(sorted(set(stage1) | {b for _, b in rungs}), "simulate")
    evals = [search.evaluate(c, x) for c in search.candidates_for(stage1, x, placements, knobs=o.exhaustive)]
    best = search.best_feasible_buffer(evals)
    if best is None:
        raise CapacityError("no configuration fits the design point: "
                            + "; ".join(min(evals, key=lambda e: e.gpu_bytes_per_rank).why_infeasible),
                            "lower --concurrency or --context, or raise the GPU budget")
    if not o.exhaustive:   # the CTA widths and prefetch settings of the best size (they tie)
        evals += [search.evaluate(c, x) for c in search.candidates_for([best], x, placements, knobs=True)
                  if c.swap_in_block_size != x.swap_in_block or not c.prefetch]
    chosen, ranked = search.choose(evals)
    space = len(search.all_buffers(top_k)) * 2 * len(search.SWAP_IN_BLOCK_SIZES) * 2 * len(placements)
    return chosen, ranked, evals, space


def _write(job: Job, profile) -> Path | None:
    """Save the profile (atomically) and drop the points file it supersedes."""
    if not job.o.write:
        return None
    from sactool.profile import save_profile

    written = save_profile(profile, job.path, force=job.o.force, make_parents=not job.o.out)
    # a failed write raised above with the profile saved under the temporary directory; the
    # points file stays then, so nothing finished is lost either way
    if job.points_path is not None and job.points_path.exists():
        job.points_path.unlink()
    return written


__all__ = ["DesignPoint", "Job", "execute"]
