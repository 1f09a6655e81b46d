"""How fast the pool gathers: gather figures from a bench record (``--bench``) or from short
measurements tune runs itself, interleaved over the pool's targets (where the pool is:
:mod:`sactool.pool.discover`), and warnings about the GPUs tune plans for.

On a machine without CXL a DRAM node stands in; the figures measured on it describe DRAM, and
everything downstream says so (``stand_in``).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from sactool.errors import RecordError, TopologyError
from sactool.pool.discover import PoolInfo
from sactool.records import warning


def gpu_warnings(topo, environ=None) -> list:
    """Warnings about the GPUs tune plans for: one per GPU that is not a CUDA device (an AMD
    Instinct: SGLang HiSparse with the sactool_cxl plug-in runs on CUDA GPUs only, so no rank is
    planned on it), and one when CUDA's numbering cannot be told (gpu_local_nodes left empty)."""
    import os

    from sactool.topology.cuda import cuda_devices

    gpus = getattr(topo, "gpus", ()) or ()
    view = cuda_devices(gpus, os.environ if environ is None else environ)
    kinds: dict[str, list[str]] = {}
    for g in view.not_cuda:
        kinds.setdefault(f"{g.vendor_name or g.vendor} {g.device}, class {g.pci_class}", []).append(g.pci_device)
    out = [warning("gpu_not_cuda", f"{', '.join(b)} ({kind}) " + ("is not a CUDA device" if len(b) == 1 else
                   "are not CUDA devices") + ": SGLang HiSparse with the sactool_cxl plug-in runs on CUDA GPUs "
                   "only, and no rank is planned on them", "serve on NVIDIA GPUs") for kind, b in kinds.items()]
    if not view.known and gpus:
        out.append(warning("gpu_numbering_unknown", view.why + "; pool.gpu_local_nodes is left empty",
                           "unset CUDA_DEVICE_ORDER (sactool serve sets PCI_BUS_ID) and name GPUs by index"))
    return out


@dataclass(frozen=True)
class GatherInputs:
    """``rounds[i][target]``: gather bandwidth (B/s) of round i; ``info``: the profile's bench block."""

    rounds: tuple[dict[str, float], ...]
    info: dict[str, Any]
    warnings: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class PoolSource:
    """The pool and its fetch figures when they come from a record, not from this machine: ``tune
    --fleet`` gives one per host (:func:`sactool.fleet.split.pool_source`). tune receives it and
    never reads the fleet record itself (tune does not import fleet)."""

    machine: dict[str, Any]            # the machine block of the host the figures describe
    pool: PoolInfo                     # its share of the pool, as one target
    gather: GatherInputs               # its bandwidth when every host fetches at once
    block: dict[str, Any]              # the profile's ``fleet`` block (the share, where each figure came from)
    record_path: str | None            # the record it came from



FETCH_FIGURES = {
    "gpu": "GPU swap-in (sactool bench gpu-gather: a GPU loading the records from the pool, as HiSparse does)",
    "cpu_proxy": "CPU gather (sactool bench gather): a CPU proxy for the GPU swap-in",
}
"""What the pool's fetch throughput was measured with, as profiles and tables name it."""


def bench_paths(bench) -> list:
    """``--bench`` as a list: None → [], one path → [path], several → them."""
    if bench is None:
        return []
    if isinstance(bench, (list, tuple)):
        return list(bench)
    return [bench]


def _measures(rec, t) -> bool:
    """Does bench record ``rec`` measure pool target ``t`` (its NUMA node or its DAX device)?"""
    dax = rec.data.get("dax_device")
    if dax and dax.rsplit("/", 1)[-1] == t.name:
        return True
    return not dax and t.node is not None and rec.memory_node == t.node


def from_bench(paths, record_bytes: int, pool: PoolInfo, machine: dict, *, strict: bool, blocks: int | None = None,
               swap_in_block: int | None = None, top_k: int | None = None) -> GatherInputs:
    """Fetch figures from ``sactool bench`` records (``--bench``, one or more: one per pool target).

    Each pool target takes the record that measured it (its node or DAX device); one record for
    several targets serves them all (warned). From that record the GPU swap-in figure
    (``bench gpu-gather``) at ``blocks`` requests in flight per rank and CTA width
    ``swap_in_block`` is used when the record has one; otherwise its CPU gather figure, labelled a
    *CPU proxy* for the GPU path (warned, with the reason the GPU figure was not usable).
    A record from another machine or another memory node warns, or is refused with ``strict``.

    Ranks sharing a target share its figure (:func:`sactool.hisparse.cost.step_time_over_targets`).
    For a GPU figure that is the conservative reading: it is one GPU's throughput from the target,
    and one GPU cannot show how much more the target gives several GPUs at once.
    """
    from sactool.bench import load_bench

    from sactool.bench.figures import record_warnings

    recs = [(p, load_bench(p)) for p in bench_paths(paths)]
    warnings = record_warnings(recs, machine, strict=strict)
    want = {"record_bytes": record_bytes, "blocks": blocks or 1, "threads": swap_in_block, "topk": top_k}
    mine = {t.name: _records_of(t, recs, strict, warnings) for t in pool.targets}
    swap = swap_in_choice(mine, want) if swap_in_block is None else None
    if swap is not None:
        want["threads"] = swap.block_size
    rows = [_target_row(t, mine[t.name], want) for t in pool.targets]
    used_for: dict[str, list[str]] = {}
    for row in rows:
        used_for.setdefault(row["path"], []).append(row["target"])
    for p, ts in used_for.items():
        if len(ts) > 1:
            warnings.append(warning("bench_one_node", f"one bench record for {len(ts)} pool targets: {p}'s figure is used "
                                  f"for {', '.join(ts)}", "bench each pool target to compare placements on measured figures"))
    proxy = [r["target"] for r in rows if r["figure"] == "cpu_proxy"]
    if proxy:
        why = next((r["gpu_not_used"] for r in rows if r.get("gpu_not_used")), "")
        warnings.append(warning("cpu_proxy", f"fetch throughput of {', '.join(proxy)} is a CPU gather figure, a CPU proxy "
                              "for the GPU swap-in" + (f" ({why})" if why else ""),
                              "measure the GPU path: sactool bench gpu-gather --node <target> --out F, then tune --bench F"))
    flags = _figure_flags(recs, rows)
    warnings += flags
    info = _bench_info(recs, rows, pool, record_bytes, blocks)
    info["figure_flags"] = [dict(w) for w in flags]
    if swap is not None:
        info["swap_in"] = swap.to_data()
    return GatherInputs(_rounds(rows), info, tuple(warnings))


def _rounds(rows: list[dict]) -> tuple[dict[str, float], ...]:
    """The measurement rounds tune compares candidates over: the samples of the figures when every
    target's figure comes from one record (its protocol took sample i of every configuration in the
    same rotated round, so they pair) and each has two or more; else one round of the medians
    (samples of different records, taken at different times, do not pair)."""
    samples = [r.get("samples") or () for r in rows]
    n = min(len(v) for v in samples)
    if len({r["path"] for r in rows}) != 1 or n < 2:
        return ({r["target"]: r["bandwidth_bytes_per_s"] for r in rows},)
    return tuple({r["target"]: float(v[i]) for r, v in zip(rows, samples)} for i in range(n))


def _gather_samples(rec, f) -> tuple[float, ...]:
    """Bytes/s of each sample of the gather result a *measured* CPU figure ``f`` is the median of: its
    records over its seconds (``raw``); () for a derived figure, or when they do not give its median."""
    import statistics

    if f.source != "measured":
        return ()
    for r in rec.results:
        p, d = r.get("params") or {}, r.get("derived") or {}
        if (r.get("test") != "gather" or p.get("record_bytes") != f.record_bytes or p.get("threads") != f.threads
                or d.get("ns_per_record") != f.ns_per_record):
            continue
        try:
            v = tuple(float(x["work"]) * f.record_bytes / float(x["seconds"]) for x in r.get("raw") or ())
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return ()
        ok = v and math.isclose(statistics.median(v), f.bandwidth_bytes_per_s, rel_tol=1e-6)
        return v if ok else ()
    return ()


def _figure_flags(recs, rows) -> list[dict]:
    """The one cache-and-noise rule (:mod:`sactool.bench.trust`) over each record a target's figure came
    from: its gather results (CPU proxy) or GPU gather results, measured inside the cache, descheduled or
    beside busy CPUs (:func:`sactool.bench.figures.figure_flags`)."""
    from sactool.bench.figures import figure_flags

    out, seen = [], set()
    for r in rows:
        key = (r["path"], r["figure"])
        if key in seen:
            continue
        seen.add(key)
        rec = next(rec for p, rec in recs if str(p) == r["path"])
        out += figure_flags(rec, r["figure"], where=f"bench record {r['path']}")
    return out


def _where(rec) -> str:
    return rec.data.get("dax_device") or (f"node{rec.memory_node}" if rec.memory_node is not None else "?")


def _records_of(t, recs, strict: bool, warnings: list) -> list:
    """The records that measured target ``t``; else the first record, with a warning (refused with ``strict``)."""
    mine = [(p, r) for p, r in recs if _measures(r, t)]
    if mine:
        return mine
    p, rec = recs[0]
    msg = (f"bench record {p} measured {_where(rec)}, not pool target {t.name}" if len(recs) == 1 else
           f"no bench record measured pool target {t.name}; {p} ({_where(rec)}) stands in")
    if strict:
        raise RecordError(msg, f"bench the pool target: sactool bench --node {t.name}")
    warnings.append(warning("bench_other_node", msg, "its figure is used for that target"))
    return [(p, rec)]


def _gpu_figure(mine, want: dict, threads: int | None):
    """(path, record, figure) of the first of ``mine`` with a GPU swap-in figure at ``want``, else
    (None, None, the reasons none had one) — :func:`sactool.bench.figures.first_figure`, GPU only."""
    from sactool.bench.figures import NoFigure, first_figure

    try:
        p, rec, f = first_figure(mine, want["record_bytes"], blocks=want["blocks"], width=threads, topk=want["topk"],
                                 paths=("gpu",))
    except NoFigure as e:
        return None, None, e.gpu_why
    return p, rec, f.figure


def swap_in_choice(mine: dict, want: dict):
    """``swap_in_block_size`` from the GPU swap-in figures of the pool targets' records
    (:func:`sactool.tune.search.choose_swap_in_block`) at ``want["blocks"]`` requests in flight per
    rank: per width, µs per top-k step per request = top-k × record bytes ÷ the width's bandwidth
    (the figure's median, and per rotated round for the tie test), the slowest target deciding.
    Without any GPU figure: SGLang's default, said to be one."""
    from sactool.tune.search import choose_swap_in_block, default_swap_in

    per_target = {}
    for name, recs in mine.items():
        p, rec, f = _gpu_figure(recs, want, None)
        if p is None:
            continue
        per_target[name] = {w: _gpu_figure([(p, rec)], want, w)[2] for w in f.widths}
    if not per_target:
        return default_swap_in("no GPU swap-in record (sactool bench gpu-gather) for the pool; CTA widths "
                               "tie in the model")
    widths = set.intersection(*(set(fs) for fs in per_target.values()))
    if not widths:
        return default_swap_in("the pool targets' GPU records share no CTA width")

    def us(f, bw: float) -> float:   # one request's top-k step at this width
        return f.topk * f.record_bytes / bw * 1e6

    step = {w: max(us(fs[w], fs[w].bandwidth_bytes_per_s) for fs in per_target.values()) for w in widths}
    n = min(len(fs[w].samples) for fs in per_target.values() for w in widths)
    rounds = {w: [max(us(fs[w], fs[w].samples[i]) for fs in per_target.values()) for i in range(n)]
              for w in widths}
    blocks = {fs[w].blocks for fs in per_target.values() for w in widths}
    where = (f", the slowest of {', '.join(per_target)}" if len(per_target) > 1 else "") + (
        f", from the GPU record of {', '.join(per_target)} only (CPU proxy elsewhere)"
        if len(per_target) < len(mine) else "") + (
        "" if blocks == {want["blocks"]} else f"; nearest measured: {', '.join(map(str, sorted(blocks)))} blocks")
    choice = choose_swap_in_block(step, rounds, want["blocks"], where=where)
    return replace(choice, figure="; ".join(f"{name}: {fs[choice.block_size].detail}" if len(per_target) > 1
                                            else fs[choice.block_size].detail
                                            for name, fs in per_target.items()))


def _target_row(t, mine, want: dict) -> dict:
    """Target ``t``'s figure (:func:`sactool.bench.figures.first_figure`): a GPU swap-in figure from any of
    its records, else a CPU gather one."""
    from sactool.bench.figures import NoFigure, first_figure

    try:
        p, rec, f = first_figure(mine, want["record_bytes"], blocks=want["blocks"], width=want["threads"],
                                 topk=want["topk"])
    except NoFigure as e:
        # mine is never empty (_records_of), so every record's refusal is in cpu_why; the last one is said
        raise RecordError(f"no usable fetch figure for pool target {t.name}: " + "; ".join(e.gpu_why + e.cpu_why[-1:]),
                          "pass a record of 'sactool bench gpu-gather' or 'sactool bench gather' for it") from None
    if f.path == "gpu":
        g = f.figure
        return {"target": t.name, "path": str(p), "figure": "gpu", "bandwidth_bytes_per_s": g.bandwidth_bytes_per_s,
                "ns_per_record": g.ns_per_record, "blocks": g.blocks, "threads": g.threads_per_block,
                "topk_step_us": g.topk_step_us, "ceiling_ratio": g.ceiling_ratio, "full_prefix_us": g.full_prefix_us,
                "figure_source": g.source, "detail": g.detail, "stand_in": bool(rec.stand_in),
                "samples": list(g.samples)}
    return {"target": t.name, "path": str(p), "figure": "cpu_proxy", "bandwidth_bytes_per_s": f.bandwidth_bytes_per_s,
            "ns_per_record": f.ns_per_record, "threads": f.threads, "figure_source": f.source, "detail": f.detail,
            "gpu_not_used": f.gpu_not_used, "stand_in": bool(rec.stand_in), "samples": list(_gather_samples(rec, f.figure))}


def _bench_info(recs, rows, pool: PoolInfo, record_bytes: int, blocks: int | None) -> dict[str, Any]:
    """The profile's bench block: the first target's figure in the historical keys, every target in ``targets``."""
    from pathlib import Path

    from sactool.records import digest

    kinds = {r["figure"] for r in rows}
    path = "gpu" if kinds == {"gpu"} else "cpu_proxy" if kinds == {"cpu_proxy"} else "mixed"
    first = rows[0]
    frec = next(r for p, r in recs if str(p) == first["path"])
    from sactool.inputfile import read_input

    return {"source": "file", "path": first["path"], "digest": digest(read_input(first["path"], what="bench record")),
            "paths": [str(p) for p, _ in recs], "digests": [digest(read_input(p, what="bench record")) for p, _ in recs],
            "memory_node": f"node{frec.memory_node}" if frec.memory_node is not None else frec.data.get("dax_device"),
            "stand_in": any(r["stand_in"] for r in rows) or pool.stand_in, "record_bytes": record_bytes,
            "threads": first["threads"], "bandwidth_bytes_per_s": first["bandwidth_bytes_per_s"],
            "ns_per_record": first["ns_per_record"], "figure_source": first["figure_source"],
            "detail": first["detail"] if len(rows) == 1 else "; ".join(f"{r['target']}: {r['detail']}" for r in rows),
            "fetch_path": path,
            "fetch_figure": FETCH_FIGURES.get(path, "GPU swap-in for some targets, CPU proxy for others"),
            "design_blocks": blocks, "targets": rows}


def _gib(n: int) -> str:
    from sactool.units import format_bytes

    return format_bytes(n)


def measure_rounds(pool: PoolInfo, record_bytes: int, top_k: int, rounds: int, *, seconds: float,
                   done: Sequence[dict], on_point: Callable[[dict], None],
                   progress: Callable[[str, int, int], None] | None = None,
                   size_bytes: int | None = None, gathers=None) -> GatherInputs:
    """``rounds`` short gather measurements on every pool node, interleaved (A B A B …) so drift
    hits every target alike. ``done``: points from an earlier run (``--resume``). ``gathers``: the
    :class:`sactool.bench.quick.QuickGathers` session whose buffers the points reuse (None: one of its
    own) — each target's buffer is placed and verified once for all rounds."""
    from sactool.bench.quick import QuickGathers

    if pool.mode != "numa":
        raise TopologyError("tune cannot measure a devdax pool itself",
                            "run 'sactool bench' on the DAX device and pass --bench FILE")
    if gathers is None:
        with QuickGathers() as own:
            return measure_rounds(pool, record_bytes, top_k, rounds, seconds=seconds, done=done, on_point=on_point,
                                  progress=progress, size_bytes=size_bytes, gathers=own)
    from sactool.bench.figures import fetch_figure
    from sactool.errors import unsettle

    have = {(p["round"], p["target"]): p for p in done}
    total, n = rounds * len(pool.targets), 0
    out: list[dict[str, float]] = []
    last: dict = {}
    for r in range(rounds):
        rnd = {}
        for t in pool.targets:
            p = have.get((r, t.name))
            if p is None:
                rec = gathers.gather(t.node, record_bytes, top_k, seconds=seconds, size_bytes=size_bytes,
                                     notify=(lambda m: progress(m, n, total)) if progress else None)
                fig = fetch_figure(rec, record_bytes, paths=("cpu_proxy",))
                p = {"kind": "gather", "round": r, "target": t.name, "bandwidth_bytes_per_s": fig.bandwidth_bytes_per_s,
                     "ns_per_record": fig.ns_per_record, "threads": fig.threads, "source": fig.source,
                     "detail": fig.detail}
                on_point(p)
                unsettle()   # the point is on disk: a signal that came after the gather stops tune here
            rnd[t.name] = float(p["bandwidth_bytes_per_s"])
            last = p
            n += 1
            if progress:
                progress("gather", n, total)
        out.append(rnd)
    bws = [v for rnd in out for v in rnd.values()]
    info = {"source": "quick", "path": None, "digest": None,
            "memory_node": ", ".join(t.name for t in pool.targets), "stand_in": pool.stand_in,
            "record_bytes": record_bytes, "threads": last.get("threads"), "rounds": rounds,
            "buffer_bytes": size_bytes,
            "bandwidth_bytes_per_s": sorted(bws)[len(bws) // 2],
            "bandwidth_samples_bytes_per_s": bws, "figure_source": last.get("source"),
            "detail": (last.get("detail") or "") + f"; {rounds} rounds interleaved over targets"
                      + (f", {_gib(size_bytes)} buffer" if size_bytes else ""),
            "fetch_path": "cpu_proxy", "fetch_figure": FETCH_FIGURES["cpu_proxy"]}
    warn = warning("cpu_proxy", "tune measured CPU gathers: the pool's fetch throughput is a CPU proxy for the GPU swap-in",
                 "measure the GPU path: sactool bench gpu-gather --node <target> --out F, then tune --bench F")
    return GatherInputs(tuple(out), info, (warn,))
