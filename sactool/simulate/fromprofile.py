"""``--profile P``: a platform built from a sactool profile, its bench record, and a base platform.

From the profile: model, KV dtype, GPUs (``sglang.tp_size``), attention-DP ranks, top-k, hot-buffer
size (used for the RDMA placement too: like for like), pool targets (``pool.nodes`` or
``pool.dax_devices``: one CXL device each, each rank on the target ``pool.rank_targets`` names (or
the profile's rank rule), so an uneven map shares a device among more ranks).
From its bench block / record (``sactool bench gather`` → ``sactool tune --bench``): the pool's
gather figures — one request's time per record (the 1-thread figure when the record is at hand,
else the record's figure) and the all-threads gather bandwidth as the pool device's deliverable
bandwidth. A DRAM bench record (``dram_bench``) gives the DRAM placement its own figures;
without one the pool's figures stand in for DRAM too (said in the notes).
Everything else (links, NICs, GPU compute, capacities) comes from the base platform file, whose
values carry their own sources.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sactool.errors import RecordError
from sactool.simulate.platform import GatherCurve, GatherPoint, Platform, check
from sactool.units import format_bytes

BENCH_HINT = ("run 'sactool bench gather --node <pool node> --record-bytes <656|1152> --out bench.json', "
              "then 'sactool tune --bench bench.json' (or plain 'sactool tune', which measures a quick gather)")


def _curve_from_figures(record_bytes: int, s_per_record: float, aggregate: float | None, source: str) -> GatherCurve:
    # a line through the origin: CPU gathers have no GPU kernel launch to add
    pts = (GatherPoint(1024, 1024 * s_per_record), GatherPoint(2048, 2048 * s_per_record))
    return GatherCurve(record_bytes, pts, source, aggregate)


def _width_note(what: str, width: int, figs) -> str:
    """Which CTA width the GPU figures are at: the profile's ``swap_in_block_size`` when the
    record measured it, else (said) the fastest width the record has at that point."""
    used = [f"{f.blocks} block{'s' if f.blocks != 1 else ''} × {f.threads_per_block} threads "
            f"{f.bandwidth_bytes_per_s / 1e9:.2f} GB/s" for f in figs]
    missing = [f for f in figs if f.threads_per_block != width]
    head = f"{what}: swap-in CTA width {width} threads, the profile's hisparse.swap_in_block_size (what SGLang runs)"
    if missing:
        head += (f"; the GPU record did not measure it (widths {', '.join(map(str, missing[0].widths))}), so its "
                 "fastest measured width stands in")
    gpu = figs[0].gpu or "?"
    return head + f"; figures used (GPU {gpu}, medians): " + ", ".join(used)


def _bench_curve(path: str | None, block: dict | None, record_bytes: int, what: str,
                 swap_in_block: int | None = None) -> tuple[GatherCurve, str, str | None]:
    """Gather curve from a bench record file (preferred) or a profile's bench block, with a note
    on the swap-in CTA width of a GPU record's figures (``swap_in_block``: the profile's width)."""
    if path and Path(path).exists():
        from sactool.bench import load_bench
        from sactool.bench.figures import request_and_total

        rec = load_bench(path)
        node = f"node{rec.memory_node}" if rec.memory_node is not None else "?"
        # the one reader of bench figures (tune's too): a GPU swap-in figure when the record has one at this
        # size — one request's rate from 1 block, the aggregate from the most blocks, both at the CTA width
        # SGLang will run (the profile's swap_in_block_size) — else its CPU gather at 1 and all threads
        one, agg = request_and_total(rec, record_bytes, width=swap_in_block)
        if one.path == "gpu":
            g1, gn = one.figure, agg.figure
            src = (f"{what}: GPU swap-in record {path} ({node}), 1 block × {g1.threads_per_block} threads "
                   f"{g1.ns_per_record:.1f} ns/record, {gn.blocks} blocks × {gn.threads_per_block} threads "
                   f"{gn.bandwidth_bytes_per_s / 1e9:.2f} GB/s")
            note = _width_note(what, swap_in_block, (g1, gn)) if swap_in_block else None
            return (_curve_from_figures(record_bytes, g1.ns_per_record * 1e-9, gn.bandwidth_bytes_per_s, src), node,
                    note)
        src = (f"{what}: bench record {path} ({node}), 1 thread {one.ns_per_record:.1f} ns/record, "
               f"{agg.threads} threads {agg.bandwidth_bytes_per_s / 1e9:.2f} GB/s ({agg.source})")
        return _curve_from_figures(record_bytes, one.ns_per_record * 1e-9, agg.bandwidth_bytes_per_s, src), node, None
    if not block or not block.get("bandwidth_bytes_per_s"):
        raise RecordError(f"{what} has no bench figures", BENCH_HINT)
    bw = float(block["bandwidth_bytes_per_s"])
    if bw <= 0:
        raise RecordError(f"{what}: bench bandwidth_bytes_per_s must be > 0, got {bw}", BENCH_HINT)
    rb = int(block.get("record_bytes") or record_bytes)
    s_rec = record_bytes / bw  # per-request rate unknown without the record: one request gets it all
    src = (f"{what}: profile bench block ({block.get('memory_node')}, {rb} B records, "
           f"{block.get('threads')} threads, {bw / 1e9:.2f} GB/s; per-request rate taken as the same)")
    note = None
    sw = block.get("swap_in") or {}
    if swap_in_block and block.get("fetch_path") == "gpu":
        note = (f"{what}: the bench record is not at hand, so the bench block's figure stands (tune's, at "
                f"{sw.get('block_size', '?')} threads per CTA); the profile's hisparse.swap_in_block_size is "
                f"{swap_in_block}")
    return _curve_from_figures(record_bytes, s_rec, bw, src), str(block.get("memory_node")), note


def platform_from_profile(profile_path, base: Platform, *, dram_bench: str | None = None) -> tuple[Platform, list[str]]:
    """The base platform with the profile's model/engine settings and its measured gather figures."""
    from sactool.models import get_model
    from sactool.profile import load_profile

    prof = load_profile(profile_path)
    if prof.engine != "sglang":
        raise RecordError(f"profile {profile_path} is for {prof.engine}: simulate models SGLang 0.5.23's HiSparse "
                          "(per-rank pools, its swap-in), not vLLM's", "simulate a profile from sactool tune (SGLang)")
    if prof.bench is None:
        raise RecordError(f"profile {profile_path} has no bench figures (its bench block is null)", BENCH_HINT)
    spec = get_model(prof.model.name)
    kv = prof.sglang.kv_cache_dtype
    rb = spec.record_bytes(kv)
    notes = []
    width = prof.hisparse.swap_in_block_size
    cxl, node, width_note = _bench_curve(prof.bench.get("path"), prof.bench, rb, f"profile {profile_path}", width)
    notes += [width_note] if width_note else []
    if dram_bench:
        dram, _, width_note = _bench_curve(dram_bench, None, rb, f"DRAM bench {dram_bench}", width)
        notes += [width_note] if width_note else []
    else:
        dram = cxl
        notes.append(f"no DRAM bench record: the pool's figures ({node}) stand in for local DRAM, so SAC/DRAM "
                     "differs only through links and capacity (give --dram-bench FILE)")
    if prof.bench.get("stand_in") or prof.pool.stand_in:
        notes.append(f"the profile's pool node ({node}) is a DRAM node standing in for CXL")
    targets = len(prof.pool.dax_devices if prof.pool.mode == "devdax" else prof.pool.nodes) or 1
    rank_devices, map_note = _rank_devices(prof)
    notes += [map_note] if map_note else []
    gpus = prof.sglang.tp_size
    ranks = prof.sglang.attn_dp_size
    gpu, gpu_notes = _gpu_section(prof, base)
    notes += gpu_notes
    stand_in = bool(prof.bench.get("stand_in") or prof.pool.stand_in)
    cxl_cap, cap_note = _pool_capacity(prof, base, stand_in)
    notes.append(cap_note)
    p = dataclasses.replace(
        base, name=f"{base.name}+profile:{Path(profile_path).name}", model=spec.name, kv_dtype=kv,
        gpus=gpus, attn_dp_size=ranks, top_k=prof.hisparse.top_k,
        device_buffer_size=prof.hisparse.device_buffer_size, rdma_device_buffer_size=None,
        # DeepSeek-V3.2 has an indexer per layer: HiSparse's prefetch (IndexShare) never applies
        prefetch=False,
        # a profile is served by `sactool serve` on SGLang 0.5.23: its kernel, not the SAC fork's
        hisparse_kernel="sglang-0.5.23",
        pcie_switches=min(base.pcie_switches, gpus), nics=min(base.nics, min(base.pcie_switches, gpus)),
        cxl_devices=len(set(rank_devices)) if rank_devices else min(targets, ranks), cxl_rank_devices=rank_devices,
        cxl_capacity_bytes=cxl_cap, gpu=gpu,
        gather_cxl=cxl, gather_dram=dram,
        # standing in: the same memory node serves both placements, shared the same way
        dram_nodes=base.dram_nodes if dram_bench else min(targets, ranks),
        contexts=tuple(c for c in base.contexts if c <= spec.max_position_embeddings) or base.contexts,
        validation={}, origin=f"{profile_path} (+ {base.origin})",
        # the profile's own prompts: the ShareGPT-profiled workload, not the base runs' filler prompt;
        # the base's calibration (zero-miss step, per-miss cost) only on the GPU it was measured on
        topk_workload="sharegpt-dsv32", shared_prefix=False,
        calibration=base.calibration if gpu.name.lower() == base.gpu.name.lower() else None)
    if prof.bench.get("fetch_path") == "gpu":
        notes.append("the bench record's figures are GPU swap-in loads (sactool bench gpu-gather)")
    else:
        notes.append("the bench record's gathers are CPU loads: a CPU proxy for the GPU swap-in kernel's loads")
    notes.append(f"links, NICs and host DRAM capacity from the base platform {base.origin}")
    if base.harness == "e2e_bench":
        notes.append("benchmark harness, front-end time per prompt token, extend time and RDMA CPU-pass rate "
                     f"from the base platform (the authors' logs), not measured for this profile")
    return check(p), notes


def _rank_devices(prof) -> tuple[tuple[int, ...], str | None]:
    """The pool device of each simulated (attention-DP) rank, from the target each GPU rank maps
    (:func:`sactool.pool.plan.rank_target`: ``pool.rank_targets`` when tune resolved them, else
    the profile's rule), numbered over the targets used; ((), note) when the rule needs the machine
    (``locality`` without resolved targets): then ``rank % targets``, said."""
    from sactool.pool.plan import PoolSpec, rank_target

    ranks, world = prof.sglang.attn_dp_size, prof.world_size
    spec = PoolSpec.of(prof)
    try:
        names = [rank_target(spec, r * world // ranks) for r in range(ranks)]   # DP rank r's first GPU rank
    except RecordError as e:
        return (), f"which device each rank reads is not in the profile ({e.message}): ranks spread rank % targets"
    used = list(dict.fromkeys(names))
    return tuple(used.index(n) for n in names), None


def _gpu_section(prof, base: Platform):
    """GPU compute and memory for the profile's GPU: the base platform's measured step times only
    when the profile names the same GPU, else the roofline of the profile's GPU (no HiSparse fixed
    cost: it was measured on the base GPU). The per-GPU KV budget is the one tune derived."""
    from sactool.simulate.platform import GpuSection

    req = prof.request or {}
    name = str(req.get("gpu") or base.gpu.name).lower()
    budget = (prof.predictions or {}).get("gpu_kv_budget_bytes") \
        or ((req.get("gpu_kv_budget") or {}).get("bytes_per_gpu")) or base.gpu.kv_budget_bytes
    notes = []
    if budget:
        notes.append(f"GPU memory for hot buffers + index keys: {format_bytes(float(budget))} per GPU (from the profile)")
    if name == base.gpu.name.lower():
        return dataclasses.replace(base.gpu, kv_budget_bytes=float(budget) if budget else None), notes
    notes.append(f"the profile's GPU ({name}) is not the base platform's ({base.gpu.name}): compute from the "
                 f"{name} roofline, and no HiSparse fixed cost (measured on {base.gpu.name} only)")
    return GpuSection(name=name, step_points=(), hisparse_overhead_s=0.0,
                      kv_budget_bytes=float(budget) if budget else None,
                      source=f"roofline for {name} (profile request.gpu)"), notes


def _pool_capacity(prof, base: Platform, stand_in: bool) -> tuple[float, str]:
    """The CXL pool capacity: the profile's pool targets, unless a DRAM node stood in for them."""
    targets = (prof.request or {}).get("pool_targets") or []
    total = sum(float(t.get("capacity_bytes") or 0) for t in targets if isinstance(t, dict))
    if stand_in or total <= 0:
        why = "a DRAM node stood in for the pool" if stand_in else "the profile records no pool capacity"
        return base.cxl_capacity_bytes, (f"CXL pool capacity from the base platform "
                                         f"({format_bytes(base.cxl_capacity_bytes)}): {why}")
    return total, f"CXL pool capacity {format_bytes(total)}: the profile's pool targets"


def with_convert_bench(p: Platform, path) -> tuple[Platform, str]:
    """The platform with the RDMA layout-conversion rate of a ``sactool bench convert`` record."""
    from sactool.bench import load_bench
    from sactool.bench.record import convert_figure
    from sactool.models import get_model

    rb = get_model(p.model).record_bytes(p.kv_dtype)
    bw, src = convert_figure(load_bench(path), rb)
    was = p.rdma_conversion_bytes_per_s
    note = (f"RDMA CPU passes at {bw / 1e9:.2f} GB/s measured here ({src}, {path}) instead of "
            + (f"the platform's {was / 1e9:.2f} GB/s" if was else "none"))
    return dataclasses.replace(p, rdma_conversion_bytes_per_s=bw), note
