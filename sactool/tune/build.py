"""Turn the chosen evaluation into the profile (every settings value with its provenance), the
summary the CLI prints, and the alternatives with the reason each lost."""

from __future__ import annotations

import math
from typing import Any

from sactool.profile import (DSA_PAGE_SIZE_CUDA, HiSparseSettings, ModelRef, PoolSettings, Provenance, SglangSettings,
                             new_profile, settings_fields, workload_summary)
from sactool.tune import search
from sactool.hisparse.capacity import max_requests_per_rank, pages, rank_sizing
from sactool.hisparse.cost import rdma_full_prefix_bytes
from sactool.hisparse.engine import ENGINE_CONSTRAINTS
from sactool.pool.rankplan import pool_bytes_per_rank



def _p(source: str, detail: str) -> Provenance:
    return Provenance(source, detail)


def build_profile(d, *, chosen, ranked, evals, gather, by_buffer_evals=None):
    """(profile, summary, alternatives) for the chosen evaluation of design point ``d``
    (:class:`sactool.tune.run.DesignPoint`); ``evals``: the candidates at the chosen requests per rank
    (the alternatives), ``by_buffer_evals``: those at the design's (the by-size table; default ``evals``)."""
    c = chosen.candidate
    req = d.dep.requests_per_rank(d.concurrency)
    plan = rank_sizing(req, c.device_buffer_size, c.host_to_device_ratio, layers=d.spec.num_layers,
                     record_bytes=d.rec_bytes, indexer_bytes=d.spec.indexer_bytes)
    pool_s, hs, sg = _settings(d, c, plan)
    prov = _provenance(d, c, req, gather)
    share = d.o.pool_source
    if share is not None:  # tune --fleet: the pool and its figures come from the fleet record
        src = f"fleet record {share.record_path}: {d.pool.reason}"
        prov.update({k: _p("measured", src) for k in ("pool.mode", "pool.nodes", "pool.stand_in")})
        prov["pool.rank_targets"] = _p("derived", f"{c.placement.strategy} over {d.pool.targets[0].name}, this "
                                       f"host's share ({d.pool.targets[0].capacity_source})")
    predictions = _predictions(d, chosen, ranked, plan, req)
    predictions["per_miss_cost"] = _per_miss(gather)
    if getattr(d, "sensitivity", None):
        predictions["miss_sensitivity"] = d.sensitivity
    if getattr(d, "trade", None) is not None:
        predictions["requests_vs_buffer"] = d.trade.to_data()
    profile = new_profile(model=ModelRef.of(d.spec), pool=pool_s, hisparse=hs, sglang=sg, machine=d.machine,
                          request=_request(d), predictions=predictions, bench=dict(gather.info), provenance=prov,
                          workload=getattr(d, "workload", None),
                          fleet=share.block if share is not None else None)
    summary = _summary(d, c, hs, gather, predictions)
    alternatives = _alternatives(chosen, evals)
    tr = getattr(d, "trade", None)
    if tr is not None and tr.traded:   # the design's own choice, which the trade beat
        e = next(r for r in tr.rows if r["requests_per_rank"] == tr.design_requests)
        w = next(r for r in tr.rows if r["chosen"])
        gain = w["tokens_per_s_per_rank"] / e["tokens_per_s_per_rank"] - 1
        alternatives.insert(0, {"candidate": f"{e['device_buffer_size']} R{e['host_to_device_ratio']} x "
                                             f"{tr.design_requests} requests per rank (the design's)",
                                "fetch_time_per_token_s": e["fetch_time_per_step_s"],
                                "gpu_bytes_per_rank": e["gpu_bytes_per_rank"], "feasible": True,
                                "reason": f"{gain:+.1%} tokens/s per rank for the chosen "
                                          f"{w['device_buffer_size']} x {w['requests_per_rank']} (significant)"})
    summary["by_buffer"] = _by_buffer(chosen, by_buffer_evals if by_buffer_evals is not None else evals)
    summary["requests_vs_buffer"] = predictions.get("requests_vs_buffer")
    summary["per_miss_cost"] = _per_miss(gather)
    summary["miss_sensitivity"] = getattr(d, "sensitivity", None) or []
    return profile, summary, alternatives


def _per_miss(gather) -> dict[str, Any]:
    """Whether the search charged the per-missed-record cost, its value and provenance."""
    pm = search.per_miss_for(gather.info)
    if pm is None:
        return {"applied": False, "why": "the fetch figure is the GPU swap-in itself (bench.fetch_path gpu): "
                                        "the measurement may already hold the per-record cost"}
    return {"applied": True, **pm.to_data()}


def _by_buffer(chosen, evals) -> list[dict[str, Any]]:
    """Per evaluated ``device_buffer_size``: its best candidate (feasible ones first, then the
    leanest), with the predicted fetch time per token, misses and GPU memory per rank — the
    hot-buffer choice as a table."""
    best: dict[int, Any] = {}
    for e in evals:
        b = e.candidate.device_buffer_size
        cur = best.get(b)
        if cur is None or (e.feasible, -e.mean_s) > (cur.feasible, -cur.mean_s):
            best[b] = e
    rows = []
    for b, e in sorted(best.items()):
        pc = e.per_context.values()
        rows.append({"device_buffer_size": b, "feasible": e.feasible, "chosen": b == chosen.candidate.device_buffer_size,
                     "fetch_time_per_token_s": e.mean_s,
                     "common_miss_time_per_token_s": sum(x["common_miss_time_per_token_s"] for x in pc) / max(1, len(pc)),
                     "misses_per_step_per_layer": sum(x["misses_per_step_per_layer"] for x in pc) / max(1, len(pc)),
                     "gpu_bytes_per_rank": e.gpu_bytes_per_rank,
                     "why_infeasible": "; ".join(e.why_infeasible)})
    return rows


def _gpu_nodes(d) -> tuple[int, ...]:
    """The CPU node of GPUs 0..tp-1 when the probe saw them all with a node, else () (SGLang asks NVML)."""
    nodes = tuple(getattr(d.pool, "gpu_nodes", ())[:d.o.tp])
    return nodes if len(nodes) == d.o.tp and all(n is not None for n in nodes) else ()


def _visible() -> str:
    import os

    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "" if v is None else f", narrowed by CUDA_VISIBLE_DEVICES={v}"


def _hugepages(d) -> str:
    """The measured page kind (tune.pagesize) when it is one the plug-in can allocate, else THP."""
    kind = getattr(getattr(d, "page", None), "kind", "thp")
    return kind if kind in ("none", "thp", "2MB", "1GB") else "thp"


def _settings(d, c, plan):
    """The profile's pool, hisparse and sglang blocks for candidate ``c``."""
    pool, o = d.pool, d.o
    pool_s = PoolSettings(
        placement="plugin", mode=pool.mode,
        nodes=tuple(t.node for t in pool.targets) if pool.mode == "numa" else (),
        dax_devices=tuple(t.name for t in pool.targets) if pool.mode == "devdax" else (),
        rank_assignment=c.placement.strategy, rank_targets=c.placement.rank_targets,
        hugepages=_hugepages(d), prefault_threads=max(1, pool.cpus_near), stand_in=pool.stand_in,
        capacity_bytes=o.pool_bytes, gpu_local_nodes=_gpu_nodes(d))
    hs = HiSparseSettings(top_k=d.spec.index_topk, device_buffer_size=c.device_buffer_size,
                          host_to_device_ratio=c.host_to_device_ratio, swap_in_block_size=c.swap_in_block_size,
                          prefetch=c.prefetch)
    sg = SglangSettings(tp_size=o.tp, attn_dp_size=d.attn_dp, kv_cache_dtype=d.kv, page_size=DSA_PAGE_SIZE_CUDA,
                        mem_fraction_static=d.budget.mem_fraction_static, max_running_requests=d.concurrency,
                        context_length=max(d.design), max_total_tokens=plan.device_slots)
    return pool_s, hs, sg


def _page_provenance(d) -> Provenance:
    page = getattr(d, "page", None)
    if page is None or not page.figures:
        return _p("default", "MADV_HUGEPAGE (THP)" + (f": {page.why}" if page is not None else ""))
    med = page.to_data()["median_bandwidth_bytes_per_s"]
    figs = ", ".join(f"{k} {v / 1e9:.2f} GB/s" for k, v in med.items())
    return _p("measured", f"{page.kind}: {page.why}; median gather bandwidth per page kind on "
                          f"node{d.pool.targets[0].node}: {figs}")


def _swap_in_provenance(gather) -> Provenance:
    """Measured (chosen from the GPU record's CTA widths: why, and the figure) or SGLang's default."""
    sw = gather.info.get("swap_in") or {}
    if sw.get("source") == "measured":
        return _p("measured", f"{sw['why']}; figure: {sw.get('figure')}")
    return _p("default", sw.get("why") or "SGLang 0.5.23's default, not a measurement")


def _provenance(d, c, req: int, gather) -> dict[str, Provenance]:
    """Where every settings value came from (all of :func:`settings_fields`)."""
    o, spec, pool, design = d.o, d.spec, d.pool, d.design
    user = o.given
    measured = "measured" if gather.info.get("source") else "derived"
    bench_ref = gather.info.get("digest") or f"quick gather on {gather.info.get('memory_node')}"
    bench_ref += {"gpu": " (GPU swap-in)", "cpu_proxy": " (CPU proxy for the GPU swap-in)",
                  "mixed": " (GPU swap-in and CPU proxy)"}.get(gather.info.get("fetch_path"), "")
    stand = " (node standing in for CXL: DRAM figures)" if pool.stand_in else ""

    def who(opt: str, default_detail: str) -> Provenance:
        return _p("user", f"--{opt}") if opt in user else _p("default", default_detail)

    prov = {
        "pool.placement": _p("default", "sactool_cxl plug-in: SGLang re-execs ranks under numactl, so only an "
                             "in-process placement reaches the host pool (docs/sources.md, design facts)"),
        "pool.mode": _p("measured", f"probe: {pool.reason}"),
        "pool.nodes": _p("measured", f"probe verdict: {pool.reason}"),
        "pool.dax_devices": _p("measured", "probe: devdax devices" if pool.mode == "devdax" else "not devdax"),
        "pool.rank_assignment": _p("derived", "search: " + ("one pool target, so every assignment is the same"
                                                            if len(pool.targets) == 1 else
                                                            "least predicted fetch time over placements")),
        "pool.rank_targets": _p("derived", f"{c.placement.strategy} over {', '.join(t.name for t in pool.targets)}"),
        "pool.policy": _p("default", "MPOL_BIND: the pool stays on its target (SAC maps it fully)"),
        "pool.interleave_weights": _p("default", "empty: policy is bind"),
        "pool.hugepages": _page_provenance(d),
        "pool.prefault_threads": _p("derived", "CPUs of each target's own CPU node (the fewest of "
                                    + ", ".join(f"{t.name} → node{t.cpu_node}" for t in pool.targets) + ")"),
        "pool.prefault_cpus": _p("default", "auto: the CPUs of each target's own CPU node (its socket)"),
        "pool.register_chunk_gb": _p("default", "SGLang default (256 GB chunks)"),
        "pool.strict": _p("default", "fall back to SGLang's allocator (and log it) when placement fails"),
        "pool.stand_in": _p("measured", pool.reason),
        "pool.gpu_local_nodes": (_p("measured", "probe: the CPU node of CUDA devices 0..tp-1 (PCI bus order, "
                                    "which sactool serve sets as CUDA_DEVICE_ORDER" + _visible() + "; one node)")
                                 if _gpu_nodes(d) else
                                 _p("default", "empty: no GPU seen by probe; SGLang finds each GPU's node with NVML")),
        "hisparse.top_k": _p("engine", f"{spec.name} index_topk (SGLang overrides top_k with it)"),
        "hisparse.device_buffer_size": _p(measured, f"least predicted fetch time per token under the GPU and pool "
                                          f"limits at {req} request(s) per rank ("
                                          + (d.trade.why if getattr(d, "trade", None) is not None else "the design's")
                                          + "); misses from LRU simulation on the "
                                          f"{workload_summary(getattr(d, 'workload', None))}; bandwidth "
                                          f"{bench_ref}{stand}"),
        "hisparse.host_to_device_ratio": _p("derived", f"smallest ratio whose host pool holds {req} request(s) of "
                                            f"{max(design)} tokens per rank"),
        "hisparse.swap_in_block_size": _swap_in_provenance(gather),
        "hisparse.prefetch": _p("default",
                                "SGLang default on; it only acts on IndexShare layers"),
        "sglang.tested": _p("default", "SGLang range the profile was written for"),
        "sglang.entrypoint": _p("default", "python -m sglang.launch_server"),
        "sglang.role": _p("default", "colocated prefill and decode"),
        "sglang.tp_size": who("tp", "canonical DeepSeek-V3.2 command: --tp-size 8"),
        "sglang.attn_dp_size": who("attn-dp", "DP attention (= tp): no MLA replication across ranks"),
        "sglang.kv_cache_dtype": who("kv-dtype", "fp8_e4m3: 656 B records"),
        "sglang.page_size": _p("engine", "DSA forces page size 64 on CUDA"),
        "sglang.mem_fraction_static": _p("default", "0.85, as in the SAC runs"),
        "sglang.max_running_requests": (_p("user", "--concurrency") if "concurrency" in user else
                                        _p("measured", f"{d.trade.why} (predictions.requests_vs_buffer)")
                                        if getattr(d, "trade", None) is not None and d.trade.traded else
                                        _p("derived", "design concurrency: SAC's 64, or what the pool holds")),
        "sglang.context_length": _p("derived", "longest requested context the deployment holds"),
        "sglang.dsa_decode_backend": _p("default", "auto: HiSparse picks flashmla_kv (fp8) / flashmla_sparse (bf16)"),
        "pool.capacity_bytes": (_p("user", "--pool-bytes: bytes of each pool target the pool may use")
                                if o.pool_bytes is not None else
                                _p("default", "each target's free memory + reclaimable page cache, or its DAX size, "
                                   "read where the pool is placed")),
        "sglang.base_gpu_id": _p("default", "0: rank r runs on GPU r (SGLang's default numbering, one node)"),
        "sglang.max_total_tokens": _p("derived", f"device slots per rank: {req} request(s) x "
                                      f"(device_buffer_size + one {DSA_PAGE_SIZE_CUDA}-token page)"),
    }
    missing = set(settings_fields()) - set(prov)
    assert not missing, missing  # every settings field has a provenance (a programming error otherwise)
    return prov


def _per_context(d, chosen, plan) -> list[dict[str, Any]]:
    """One row per asked context: fit, RDMA full-prefix bytes, the most it holds, the prediction."""
    c, layers, rec_bytes, concurrency, dep = chosen.candidate, d.spec.num_layers, d.rec_bytes, d.concurrency, d.dep
    attn_dp, design = d.attn_dp, d.design
    part = pool_bytes_per_rank(c.placement, d.pool.targets)
    per_ctx = []
    for ctx in d.contexts:
        row: dict[str, Any] = {"context_tokens": ctx, "fits": ctx in design,
                               "rdma_full_prefix_bytes_per_request": rdma_full_prefix_bytes(ctx, rec_bytes, layers),
                               "rdma_full_prefix_bytes": rdma_full_prefix_bytes(ctx, rec_bytes, layers)
                               * concurrency * dep.replication}
        kw = dict(d.cap_kw, pool_bytes_per_rank=part)
        row["max_concurrency"] = attn_dp * max_requests_per_rank(c.device_buffer_size, ctx, **kw)
        # a context beyond the profile's context_length is refused by SGLang: the profile holds none
        row["profile_holds"] = attn_dp * min(plan.device_slots // (c.device_buffer_size + DSA_PAGE_SIZE_CUDA),
                                             plan.host_tokens // pages(ctx)) if ctx in design else 0
        if ctx in chosen.per_context:
            row.update({k: v for k, v in chosen.per_context[ctx].items()})
            row["fetch_bytes_per_step"] = row["fetch_bytes_per_token"] * concurrency * dep.replication
        per_ctx.append(row)
    return per_ctx


def _predictions(d, chosen, ranked, plan, req: int) -> dict[str, Any]:
    o, budget, concurrency, design, top_k = d.o, d.budget, d.concurrency, d.design, d.spec.index_topk
    part = pool_bytes_per_rank(chosen.candidate.placement, d.pool.targets)
    per_ctx = _per_context(d, chosen, plan)
    best = ranked[0]
    cmp = search.compare(chosen, best) if best is not chosen else None
    predictions = {
        "objective": "generated tokens per second per rank: at the design's requests the fetch time per generated "
                     "token decides (pool bytes over the measured bandwidth, plus the per-missed-record cost where it "
                     "applies: per_miss_cost; mean over the design contexts); fewer requests with larger buffers are "
                     "weighed against it with the engine's measured decode step (requests_vs_buffer)",
        "fetch_time_per_token_s": chosen.mean_s,
        "fetch_time_per_token_per_round_s": list(chosen.samples_s),
        "device_token_slots": plan.device_slots,
        "design_concurrency": getattr(d, "design_concurrency", None) or concurrency,
        "concurrency": concurrency,
        "design_contexts": list(design),
        "requests_per_rank": req,
        "gpu_bytes_per_rank": plan.gpu_bytes,
        "hot_buffer_bytes_per_rank": plan.hot_buffer_bytes,
        "index_key_bytes_per_rank": plan.index_key_bytes,
        "gpu_kv_budget_bytes": budget.bytes_per_gpu,
        "host_pool_bytes_per_rank": plan.host_pool_bytes,
        "host_pool_bytes": plan.host_pool_bytes * o.tp,
        "pool_partition_bytes_per_rank": part,
        "per_context": per_ctx,
        "best_candidate_fetch_time_per_token_s": best.mean_s,
        "chosen_vs_best": None if cmp is None else {"delta_s": cmp.delta_s,
                                                    # null: one replicate gives no interval (not infinity)
                                                    "ci95_s": cmp.ci_s if math.isfinite(cmp.ci_s) else None,
                                                    "significant": cmp.significant},
        "engine_constraints": [dict(e, value=top_k if e["setting"] == "hisparse.top_k" else e["value"])
                               for e in ENGINE_CONSTRAINTS],
        "replicates": d.replicates,
        "warnings": list(d.warnings),
    }
    if getattr(d, "page", None) is not None:
        predictions["pool_page_size"] = d.page.to_data()
    return predictions


def _request(d) -> dict[str, Any]:
    """What was asked, as recorded in the profile."""
    o, budget, pool, kv, contexts, replicates = d.o, d.budget, d.pool, d.kv, d.contexts, d.replicates
    return {"model": o.model, "contexts": list(contexts), "concurrency": o.concurrency, "tp": o.tp,
               "attn_dp": o.attn_dp, "gpu": budget.gpu, "gpu_from": _gpu_from(d),
               "gpu_kv_budget_bytes": o.gpu_kv_budget_bytes,
               "gpu_kv_budget": {"bytes_per_gpu": budget.bytes_per_gpu, "source": budget.source,
                                 "detail": budget.detail},
               "kv_dtype": kv, "steps": o.steps, "replicates": replicates, "seed": o.seed,
               "trace": str(o.trace) if o.trace else None, "bench": _bench_request(o.bench),
               "pool_targets": [{"name": t.name, "capacity_bytes": t.capacity_bytes, "source": t.capacity_source}
                                for t in pool.targets]}


def _gpu_from(d) -> dict[str, Any] | None:
    """Where the GPU the budget is planned for came from (tune.gpu.GpuChoice): user, probe or default."""
    g = getattr(d, "gpu", None)
    return g.to_data() if g is not None else None


def _summary(d, c, hs, gather, predictions) -> dict[str, Any]:
    """What the table shows (also in JSON)."""
    o, spec, pool, kv, rec_bytes, attn_dp, layers = d.o, d.spec, d.pool, d.kv, d.rec_bytes, d.attn_dp, d.spec.num_layers
    return {"model": spec.name, "kv_cache_dtype": kv, "record_bytes": rec_bytes, "layers": layers,
               "pool": [{"name": t.name, "capacity_bytes": t.capacity_bytes, "capacity_source": t.capacity_source}
                        for t in pool.targets],
               "stand_in": pool.stand_in, "pool_reason": pool.reason,
               "gather_bandwidth_bytes_per_s": gather.info.get("bandwidth_bytes_per_s"),
               "gather_detail": gather.info.get("detail"),
               "fetch_path": gather.info.get("fetch_path"), "fetch_figure": gather.info.get("fetch_figure"),
               "swap_in": gather.info.get("swap_in"),
               "hisparse_config": hs.config_json(), "prefetch": hs.prefetch,
               "placement": c.placement.label, "rank_targets": list(c.placement.rank_targets),
               "tp": o.tp, "attn_dp": attn_dp, "workload": getattr(d, "workload", None),
               "gpu": d.budget.gpu, "gpu_from": _gpu_from(d),
               "gpu_kv_budget": {"source": d.budget.source, "detail": d.budget.detail},
               **{k: predictions[k] for k in (
                   "fetch_time_per_token_s", "design_concurrency", "concurrency", "gpu_bytes_per_rank",
                   "hot_buffer_bytes_per_rank",
                   "index_key_bytes_per_rank", "gpu_kv_budget_bytes", "host_pool_bytes_per_rank", "host_pool_bytes",
                   "per_context", "engine_constraints")}}


def _bench_request(bench):
    """``request.bench`` as the user gave it: None, one path, or a list of paths (one per pool target)."""
    from sactool.tune.pool import bench_paths

    ps = [str(b) for b in bench_paths(bench)]
    return None if not ps else ps[0] if len(ps) == 1 else ps


def _alternatives(chosen, evals, n_feasible: int = 4, n_infeasible: int = 2) -> list[dict[str, Any]]:
    seen = {chosen.candidate}
    ranked = sorted((e for e in evals if e.feasible), key=lambda e: e.mean_s)
    feas = sorted((e for e in evals if e.feasible and e.candidate not in seen), key=lambda e: e.mean_s)
    by_buf: dict[int, Any] = {}
    for e in sorted((e for e in evals if not e.feasible and e.mean_s < chosen.mean_s),
                    key=lambda e: (e.candidate.device_buffer_size, e.gpu_bytes_per_rank)):
        by_buf.setdefault(e.candidate.device_buffer_size, e)   # the leanest variant of each size
    sizes = sorted(by_buf)
    infeas = [by_buf[b] for b in dict.fromkeys(sizes[:1] + sizes[-1:])]  # next size up, and the largest
    picked, labels = [], set()
    for e in feas:
        k = (e.candidate.device_buffer_size, e.candidate.host_to_device_ratio, e.candidate.placement)
        if k in labels:
            continue
        labels.add(k)
        picked.append(e)
        if len(picked) >= n_feasible:
            break
    knob = next((e for e in feas if e.candidate.device_buffer_size == chosen.candidate.device_buffer_size
                 and e.candidate.host_to_device_ratio == chosen.candidate.host_to_device_ratio
                 and e.candidate.placement == chosen.candidate.placement), None)
    if knob is not None and knob not in picked:
        picked.append(knob)
    picked += infeas[:n_infeasible]
    return [{"candidate": e.candidate.label, "fetch_time_per_token_s": e.mean_s,
             "gpu_bytes_per_rank": e.gpu_bytes_per_rank, "feasible": e.feasible,
             "reason": search.reason_lost(e, chosen, ranked)} for e in picked]
