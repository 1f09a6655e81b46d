"""GPU swap-in figures from a bench record written by ``sactool bench gpu-gather`` (light: no numpy).

``tune`` asks for the pool's fetch throughput at the design point: ``record_bytes`` records,
``blocks`` requests in flight per rank (one CTA each, as HiSparse launches them), a CTA width.
:func:`gpu_gather_figure` answers from the record's ``gpu_gather`` results, or raises
RecordError saying why it cannot (no GPU results, simulator results, that record size not
measured) so the caller can fall back to the CPU gather figure — a *CPU proxy* for the GPU path.
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.errors import RecordError, UsageError
from sactool.units import node_name


@dataclass(frozen=True)
class GpuGatherFigure:
    """One measured GPU swap-in configuration. ``bandwidth_bytes_per_s``: all ``blocks`` requests
    together; ``topk_step_us``: one top-k step of every request in flight; ``ns_per_record``:
    1e9 / records per second (all requests together); ``detail`` says what was picked and why."""

    record_bytes: int
    blocks: int
    threads_per_block: int
    topk: int
    bandwidth_bytes_per_s: float
    topk_step_us: float
    ns_per_record: float
    memory_node: str | None
    dax_device: str | None
    gpu: str | None
    ceiling_ratio: float | None
    full_prefix_us: float | None
    source: str
    detail: str
    samples: tuple[float, ...] = ()     # bandwidth per measurement round (rotated rounds: paired across widths)
    widths: tuple[int, ...] = ()        # the CTA widths measured at this record size, top-k and block count


def gpu_results(record) -> list[dict]:
    return [r for r in record.results if r.get("test") == "gpu_gather" and r.get("derived")]


def has_gpu_figures(record) -> bool:
    """True when the record holds GPU swap-in results measured on a GPU (not the simulator)."""
    return bool(gpu_results(record)) and not (record.data.get("gpu") or {}).get("simulator")


def _nearest(values, want: int) -> int:
    return min(sorted(set(values)), key=lambda v: (abs(v - want), -v))


def gpu_gather_figure(record, record_bytes: int, blocks: int, *, threads: int | None = None,
                      topk: int | None = None) -> GpuGatherFigure:
    """The GPU figure for ``record_bytes`` at ``blocks`` requests in flight.

    Picks uniform indices when measured (as the CPU figure does), the measured top-k nearest
    ``topk``, the CTA width ``threads`` when measured (else the fastest one at that point), and the
    measured block count nearest ``blocks`` (said in ``detail`` when it differs). A record size
    that was not measured is not derived: GPU rounds of 32 words do not scale like CPU cache lines.
    """
    if not isinstance(record_bytes, int) or record_bytes <= 0:
        raise UsageError(f"record size {record_bytes!r} must be a positive number of bytes", "e.g. 656")
    where = f" ({record.path})" if getattr(record, "path", None) else ""
    rs = gpu_results(record)
    if not rs:
        raise RecordError(f"the bench record has no GPU swap-in results{where}",
                          "run 'sactool bench gpu-gather' on the GPU machine and pass its --out file")
    g = record.data.get("gpu") or {}
    if g.get("simulator"):
        raise RecordError(f"the bench record's GPU results come from numba's CUDA simulator{where}: no GPU figure",
                          "measure on a machine with an NVIDIA GPU")
    rs = [r for r in rs if int(r["params"]["record_bytes"]) == record_bytes]
    if not rs:
        have = sorted({int(r["params"]["record_bytes"]) for r in gpu_results(record)})
        raise RecordError(f"the bench record's GPU results do not include {record_bytes} B records (measured: "
                          f"{', '.join(map(str, have))}){where}", f"rerun with --record-bytes {record_bytes}")
    if any(r["params"].get("index_pattern") == "uniform" for r in rs):
        rs = [r for r in rs if r["params"].get("index_pattern") == "uniform"]
    notes = []
    ks = {int(r["params"]["topk"]) for r in rs}
    k = _nearest(ks, topk) if topk else max(ks)
    if topk and k != topk:
        notes.append(f"top-k {topk} not measured; used {k}")
    rs = [r for r in rs if int(r["params"]["topk"]) == k]
    bs = {int(r["params"]["blocks"]) for r in rs}
    b = _nearest(bs, blocks)
    if b != blocks:
        notes.append(f"{blocks} requests in flight not measured; used {b} blocks")
    rs = [r for r in rs if int(r["params"]["blocks"]) == b]
    ths = {int(r["params"]["threads_per_block"]) for r in rs}
    if threads is not None and threads in ths:
        pick = next(r for r in rs if int(r["params"]["threads_per_block"]) == threads)
    else:
        pick = max(rs, key=lambda r: r["derived"]["bandwidth_bytes_per_s"])
        if threads is not None:
            notes.append(f"{threads} threads per block not measured; used the fastest measured width, "
                         f"{pick['params']['threads_per_block']}")
    d, p = pick["derived"], pick["params"]
    detail = (f"measured on GPU {g.get('index')} ({g.get('name')}): {record_bytes} B records, top-k {k}, {b} blocks "
              f"× {p['threads_per_block']} threads, {p.get('index_pattern')} indices, median of {pick['stats']['n']} "
              "samples")
    return GpuGatherFigure(record_bytes, b, int(p["threads_per_block"]), k, float(d["bandwidth_bytes_per_s"]),
                           float(d["topk_step_us"]), 1e9 / float(d["records_per_s"]),
                           None if record.data.get("memory_node") is None else node_name(record.data["memory_node"]),
                           record.data.get("dax_device"), g.get("name"),
                           d.get("ceiling_ratio"), d.get("full_prefix_us"), "measured (GPU)",
                           "; ".join([detail] + notes), tuple(float(v) for v in pick.get("samples") or ()),
                           tuple(sorted(ths)))
