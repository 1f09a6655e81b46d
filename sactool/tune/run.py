"""The heavy half of :func:`sactool.tune.api.tune` (numpy, simulation, measurement)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sactool.errors import CapacityError, RecordError, TopologyError
from sactool.hisparse import gpus
from sactool.hisparse.capacity import (Deployment, max_requests_per_rank, min_ratio, pool_bytes_needed,
                                      rank_plan)
from sactool.hisparse.placement import candidates as placement_candidates
from sactool.hisparse.placement import pool_bytes_per_rank, round_robin
from sactool.tune import search
from sactool.tune.options import SAC_CONCURRENCY, TuneResult

OUTPUT_TOKENS = 1024
"""Output length the cold first step is amortised over: SAC's Round-2 output, fixed at 1024
tokens (paper-sac.md §3 "Round-2 output fixed at 1024")."""


def misses_per_token(misses, output_tokens: int = OUTPUT_TOKENS) -> float:
    """Mean missed records per step per layer over a request's output.

    ``misses``: int [steps, layers] from the LRU simulation; step 0 fills the hot buffer from its
    initial contents (sglang-integration.md §2.3 step 3). The first step is paid once per request,
    the steady state (mean of the later steps) on every other generated token.
    """
    first = float(misses[0].mean())
    steady = float(misses[1:].mean()) if misses.shape[0] > 1 else first
    return (first + steady * (output_tokens - 1)) / output_tokens


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def execute(o, spec, kv: str, attn_dp: int, rec_bytes: int, path: Path, points_path: Path | None,
            progress, t0: float):
    from sactool.host.machine import machine_block
    from sactool.host.sysfs import SysfsReader
    from sactool.records import append_jsonl, digest, read_jsonl
    from sactool.topology import probe
    from sactool.tune.build import build_profile
    from sactool.tune.pool import from_bench, measure_rounds, pool_info

    warnings: list[dict[str, str]] = []
    top_k, layers, idx = spec.index_topk, spec.num_layers, spec.indexer_bytes
    budget = gpus.kv_budget(model_name=spec.name, tp=o.tp, gpu=o.gpu, budget_bytes=o.gpu_kv_budget_bytes,
                            weights_bytes=o.weights_bytes)

    contexts, replicates, trace = tuple(sorted(set(o.contexts))), o.replicates, None
    if o.trace is not None:
        from sactool.workload import load_trace

        trace = load_trace(o.trace)
        if trace.top_k != top_k:
            raise RecordError(f"trace {o.trace} has top_k {trace.top_k}, {spec.name} selects {top_k}",
                              "pass a trace of this model")
        if trace.context_tokens > spec.max_position_embeddings:
            raise RecordError(f"trace {o.trace} context {trace.context_tokens} exceeds max positions "
                              f"{spec.max_position_embeddings}", "pass a trace of this model")
        contexts, replicates = (trace.context_tokens,), 1
        if "contexts" in o.given:
            warnings.append({"code": "trace_context", "message": f"--trace replays its own context "
                             f"({trace.context_tokens} tokens); --context is ignored", "hint": ""})

    one = rank_plan(1, top_k, min_ratio(1, top_k, min(contexts)), layers=layers, record_bytes=rec_bytes,
                    indexer_bytes=idx)
    if one.gpu_bytes > budget.bytes_per_gpu:
        raise CapacityError(
            f"the GPU KV budget ({_gib(budget.bytes_per_gpu)} per GPU: {budget.detail}) is too small for one "
            f"request with top_k={top_k} hot-buffer slots: it needs {_gib(one.gpu_bytes)}",
            "give a larger --gpu-kv-budget, a larger --gpu, or more GPUs (--tp)")

    reader = SysfsReader(o.sysfs_root)
    topo = probe(reader)
    machine = machine_block(reader)
    pool = pool_info(topo, reader if topo.live else None)
    if not topo.live and o.bench is None:
        raise TopologyError(f"the topology comes from a recording ({o.sysfs_root}), not this system: "
                            "tune cannot measure its pool", "pass --bench FILE measured on that machine")
    if pool.stand_in:
        warnings.append({"code": "stand_in", "message": pool.reason, "hint": "figures describe DRAM, not CXL"})
    dep = Deployment(o.tp, attn_dp)
    names = [t.name for t in pool.targets]
    placements = placement_candidates(o.tp, names)
    part = pool_bytes_per_rank(round_robin(o.tp, names), pool.targets)
    cap_kw = dict(gpu_budget_bytes=budget.bytes_per_gpu, pool_bytes_per_rank=part, layers=layers,
                  record_bytes=rec_bytes, indexer_bytes=idx)
    max_req = {c: max_requests_per_rank(top_k, c, **cap_kw) for c in contexts}
    total_cap = sum(t.capacity_bytes for t in pool.targets)

    def no_fit(conc: int, ctx: int) -> CapacityError:
        need = pool_bytes_needed(conc, ctx, dep, layers=layers, record_bytes=rec_bytes)
        req = dep.requests_per_rank(conc)
        gpu_need = rank_plan(req, top_k, min_ratio(req, top_k, ctx), layers=layers, record_bytes=rec_bytes,
                             indexer_bytes=idx).gpu_bytes
        rep = f" x {dep.replication} TP copies" if dep.replication > 1 else ""
        return CapacityError(
            f"{conc} requests of {ctx} tokens need {_gib(need)} of pool memory ({spec.kv_bytes_per_token(kv)} B "
            f"per token{rep}; {_gib(need / o.tp)} per rank) and {_gib(gpu_need)} of GPU memory per rank; the pool "
            f"has {_gib(total_cap)} ({', '.join(names)}; {_gib(part)} per rank) and the GPU budget is "
            f"{_gib(budget.bytes_per_gpu)}; at most {attn_dp * max_req[ctx]} such requests fit",
            "lower --concurrency or --context, add pool memory, or use DP attention (--attn-dp = --tp)")

    if o.concurrency is not None:
        concurrency = o.concurrency
        for c in contexts:
            if max_req[c] < dep.requests_per_rank(concurrency):
                raise no_fit(concurrency, c)
        design = contexts
    else:
        design = tuple(c for c in contexts if max_req[c] >= 1)
        if not design:
            raise no_fit(attn_dp, contexts[0])
        concurrency = min(SAC_CONCURRENCY, attn_dp * max_req[max(design)])
        for c in contexts:
            if c not in design:
                warnings.append({"code": "context_does_not_fit",
                                 "message": str(no_fit(attn_dp, c).message),
                                 "hint": "the profile's context_length stops below it"})
        if concurrency < SAC_CONCURRENCY:
            warnings.append({"code": "concurrency_lowered", "message": f"design concurrency {concurrency}: "
                             f"the pool holds no more at {max(design)} tokens (SAC's 64 would not fit)",
                             "hint": "give --concurrency to choose another design point"})

    # ---- resumable points ----------------------------------------------------------------
    key = digest(json.dumps({"model": spec.name, "kv": kv, "steps": o.steps, "seed": o.seed,
                             "trace": digest(Path(o.trace).read_bytes()) if o.trace else None,
                             "gather_seconds": o.gather_seconds, "bench": str(o.bench) if o.bench else None,
                             "targets": names}, sort_keys=True))[:23]
    done: list[dict] = []
    if points_path is not None:
        if o.resume:
            done = [p for p in read_jsonl(points_path) if p.get("key") == key]
        elif points_path.exists():
            points_path.unlink()

    def on_point(p: dict) -> None:
        if points_path is not None:
            points_path.parent.mkdir(parents=True, exist_ok=True)
            append_jsonl(points_path, {**p, "key": key})

    if o.bench is not None:
        gather = from_bench(o.bench, rec_bytes, pool, machine, strict=o.strict)
    else:
        gather = measure_rounds(pool, rec_bytes, top_k, replicates, seconds=o.gather_seconds,
                                done=[p for p in done if p.get("kind") == "gather"], on_point=on_point,
                                progress=progress)
    warnings += list(gather.warnings)

    # ---- hot-buffer simulation over the workload ------------------------------------------
    misses: dict[int, list[dict[int, float]]] = {c: [{} for _ in range(replicates)] for c in design}
    hits: dict[int, list[dict[int, float]]] = {c: [{} for _ in range(replicates)] for c in design}
    for p in done:
        if p.get("kind") == "sim" and p["context"] in misses and p["rep"] < replicates:
            for b, (m, h) in p["buffers"].items():
                misses[p["context"]][p["rep"]][int(b)] = m
                hits[p["context"]][p["rep"]][int(b)] = h

    def simulate(buffers: list[int], label: str) -> None:
        import numpy as np

        from sactool.hisparse.hotbuffer import simulate_many

        todo = [(c, r) for c in design for r in range(replicates)
                if any(b not in misses[c][r] for b in buffers)]
        for i, (c, r) in enumerate(todo):
            want = [b for b in buffers if b not in misses[c][r]]
            if trace is not None:
                ind = trace.indices
            else:
                from sactool.workload import generate_topk

                ind = generate_topk(c, o.steps, layers, top_k, seed=o.seed + r)
            res = simulate_many(ind, want, context_tokens=c)
            pt = {}
            for b, hb in zip(want, res):
                m = misses_per_token(np.asarray(hb.misses))
                pt[str(b)] = [m, 1.0 - m / top_k]
                misses[c][r][b], hits[c][r][b] = m, 1.0 - m / top_k
            on_point({"kind": "sim", "context": c, "rep": r, "buffers": pt})
            if progress:
                progress(label, i + 1, len(todo))

    x_kw = dict(contexts=design, concurrency=concurrency, deployment=dep, targets=pool.targets, layers=layers,
                record_bytes=rec_bytes, indexer_bytes=idx, top_k=top_k, gpu_budget_bytes=budget.bytes_per_gpu,
                misses=misses, hit_rate=hits, bandwidth=gather.rounds)
    x = search.Inputs(**x_kw)
    if o.exhaustive:
        stage1 = search.all_buffers(top_k)
    else:  # the coarse grid plus the largest sizes that fit (arithmetic only), simulated in one pass
        fine = [b for b in search.largest_feasible(x, placements) if b not in search.coarse_buffers(top_k)]
        stage1 = sorted(set(search.coarse_buffers(top_k)) | set(fine))
    simulate(stage1, "simulate")
    evals = [search.evaluate(c, x) for c in search.candidates_for(stage1, x, placements,
                                                                  knobs=o.exhaustive)]
    best = search.best_feasible_buffer(evals)
    if best is None:
        raise CapacityError("no configuration fits the design point: "
                            + "; ".join(min(evals, key=lambda e: e.gpu_bytes_per_rank).why_infeasible),
                            "lower --concurrency or --context, or raise the GPU budget")
    if not o.exhaustive:   # the CTA widths and prefetch settings of the best size (they tie)
        evals += [search.evaluate(c, x) for c in search.candidates_for([best], x, placements, knobs=True)
                  if c.swap_in_block_size != search.DEFAULT_SWAP_IN_BLOCK or not c.prefetch]
    chosen, ranked = search.choose(evals)
    space = len(search.all_buffers(top_k)) * 2 * len(search.SWAP_IN_BLOCK_SIZES) * 2 * len(placements)

    profile, summary, alternatives = build_profile(
        o=o, spec=spec, kv=kv, attn_dp=attn_dp, rec_bytes=rec_bytes, budget=budget, pool=pool, machine=machine,
        dep=dep, contexts=contexts, design=design, concurrency=concurrency, chosen=chosen, ranked=ranked,
        evals=evals, gather=gather, cap_kw=cap_kw, warnings=warnings, replicates=replicates)
    written = None
    if o.write:
        from sactool.profile import save_profile

        written = save_profile(profile, path, force=o.force)
        if points_path is not None and points_path.exists():
            points_path.unlink()

    return TuneResult(profile=profile, path=written, summary=summary, alternatives=tuple(alternatives),
                      evaluated=len(evals), space=space, warnings=tuple(warnings),
                      elapsed_s=time.perf_counter() - t0, chosen_objective_s=chosen.mean_s,
                      best_objective_s=ranked[0].mean_s)


__all__ = ["execute", "misses_per_token", "OUTPUT_TOKENS", "Any"]
