"""The one reader of bench figures: which measured result serves a fetch of ``R``-byte records — from a
GPU swap-in or a CPU gather, at which concurrency and index pattern — and what is wrong with the record
it comes from. ``tune`` (the pool's fetch figure per target, :mod:`sactool.tune.pool`) and ``simulate``
(a profile's gather curve, :mod:`sactool.simulate.fromprofile`) both ask here, so one record holding
CPU gathers and GPU swap-ins side by side gives both the same figure.

The rule, per record (and over a target's records: every record's GPU figure before any CPU one):

1. **GPU first.** A GPU swap-in figure (``bench gpu-gather``, measured on a GPU, not numba's simulator)
   at that record size is the path HiSparse runs, so it is used when there is one
   (:func:`sactool.bench.gpufigure.gpu_gather_figure`: ``blocks`` requests in flight, nearest measured;
   CTA width ``width`` when measured, else the fastest; uniform indices when measured; top-k nearest).
2. **Else the CPU gather** (``bench gather``), a *CPU proxy* for the GPU path
   (:func:`sactool.bench.record.gather_figure`: ``threads`` threads, None: the most measured; a size not
   measured derived by cache lines per record and said so; uniform indices when measured). Why the
   GPU figure was not usable is kept (``gpu_not_used``).
3. **Neither**: a RecordError naming why each path failed.

What may be wrong with the figure, in the words of :mod:`sactool.bench.trust` — measured inside the
last-level cache (overstated), descheduled (understated), beside busy CPUs (understated) — comes from
:func:`figure_flags`; what may be wrong with the record (interrupted, another machine) from
:func:`record_warnings`. Light: no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sactool.errors import RecordError

PATHS = ("gpu", "cpu_proxy")


@dataclass(frozen=True)
class FetchFigure:
    """The figure that serves a fetch: ``path`` "gpu" (a GPU swap-in) or "cpu_proxy" (a CPU gather);
    ``threads``: GPU threads per block or CPU threads; ``blocks``: GPU requests in flight (None for a CPU
    figure); ``source``: measured, interpolated, extrapolated, "measured (GPU)"; ``detail``: what was
    picked and why; ``gpu_not_used``: why no GPU figure served (empty when one did); ``figure``: the
    :class:`~sactool.bench.gpufigure.GpuGatherFigure` or :class:`~sactool.bench.record.GatherFigure`."""

    path: str
    record_bytes: int
    bandwidth_bytes_per_s: float
    ns_per_record: float
    threads: int
    blocks: int | None
    source: str
    detail: str
    gpu_not_used: str
    figure: Any


def _gpu(record, record_bytes: int, blocks: int, width: int | None, topk: int | None) -> FetchFigure:
    from sactool.bench.gpufigure import gpu_gather_figure

    f = gpu_gather_figure(record, record_bytes, blocks, threads=width, topk=topk)
    return FetchFigure("gpu", record_bytes, f.bandwidth_bytes_per_s, f.ns_per_record, f.threads_per_block, f.blocks,
                       f.source, f.detail, "", f)


def _cpu(record, record_bytes: int, threads: int | None, why_not_gpu: str) -> FetchFigure:
    from sactool.bench.record import gather_figure

    f = gather_figure(record, record_bytes, threads=threads)
    return FetchFigure("cpu_proxy", record_bytes, f.bandwidth_bytes_per_s, f.ns_per_record, f.threads, None,
                       f.source, f.detail, why_not_gpu, f)


def fetch_figure(record, record_bytes: int, *, blocks: int = 1, width: int | None = None, topk: int | None = None,
                 threads: int | None = None, paths: Sequence[str] = PATHS) -> FetchFigure:
    """The figure of one bench record for ``record_bytes`` records (see the module for the rule):
    a GPU figure at ``blocks`` requests in flight and CTA width ``width``, else a CPU gather figure at
    ``threads`` threads (None: the most measured). ``paths`` narrows the kinds tried."""
    why: list[str] = []
    if "gpu" in paths:
        try:
            return _gpu(record, record_bytes, blocks, width, topk)
        except RecordError as e:
            why.append(e.message)
    if "cpu_proxy" in paths:
        try:
            return _cpu(record, record_bytes, threads, "; ".join(why))
        except RecordError as e:
            why.append(e.message)
    where = f" ({record.path})" if getattr(record, "path", None) else ""
    raise RecordError(f"no usable fetch figure for {record_bytes} B records{where}: " + "; ".join(why),
                      "pass a record of 'sactool bench gpu-gather' or 'sactool bench gather' that measured them")


class NoFigure(RecordError):
    """No record serves the fetch: ``gpu_why`` and ``cpu_why`` hold each record's reason per path."""

    def __init__(self, gpu_why: list[str], cpu_why: list[str]):
        super().__init__("; ".join(gpu_why + cpu_why[-1:]) or "no bench record",
                         "pass a record of 'sactool bench gpu-gather' or 'sactool bench gather' for it")
        self.gpu_why, self.cpu_why = gpu_why, cpu_why


def first_figure(records: Sequence[tuple[Any, Any]], record_bytes: int, *, blocks: int = 1, width: int | None = None,
                 topk: int | None = None, threads: int | None = None,
                 paths: Sequence[str] = PATHS) -> tuple[Any, Any, FetchFigure]:
    """(path, record, figure) for a target measured by several records ``[(path, record), …]``: the first
    record's GPU figure that exists, else the first CPU one (GPU before CPU across the records, as for
    one). :class:`NoFigure` holds each record's reasons when none serves."""
    gpu_why: list[str] = []
    cpu_why: list[str] = []
    if "gpu" in paths:
        for p, rec in records:
            try:
                return p, rec, _gpu(rec, record_bytes, blocks, width, topk)
            except RecordError as e:
                gpu_why.append(e.message)
    if "cpu_proxy" in paths:
        for p, rec in records:
            try:
                return p, rec, _cpu(rec, record_bytes, threads, "; ".join(gpu_why))
            except RecordError as e:
                cpu_why.append(e.message)
    raise NoFigure(gpu_why, cpu_why)


def request_and_total(record, record_bytes: int, *, width: int | None = None,
                      topk: int | None = None) -> tuple[FetchFigure, FetchFigure]:
    """Two figures of the same kind, as a serving model needs them: one request alone (1 block, or 1
    CPU thread) and all requests together (the most blocks measured at that size, or the most threads)."""
    one = fetch_figure(record, record_bytes, blocks=1, width=width, topk=topk, threads=1)
    if one.path == "gpu":
        from sactool.bench.gpufigure import gpu_results

        most = max(int(r["params"]["blocks"]) for r in gpu_results(record)
                   if int(r["params"]["record_bytes"]) == record_bytes)
        return one, fetch_figure(record, record_bytes, blocks=most, width=width, topk=topk, paths=("gpu",))
    return one, fetch_figure(record, record_bytes, threads=None, paths=("cpu_proxy",))


def figure_flags(record, path: str, *, where: str) -> list[dict]:
    """The cache-and-noise warnings (``bench_in_cache``, ``bench_descheduled``, ``bench_cpus_shared``) of
    the results of the kind a figure of ``path`` came from (:func:`sactool.bench.trust.record_flags`)."""
    from sactool.bench.trust import record_flags

    return record_flags(record.data, where=where, tests=("gpu_gather",) if path == "gpu" else ("gather",))


def record_warnings(records: Sequence[tuple[Any, Any]], machine: dict, *, strict: bool) -> list[dict]:
    """What is stale about the records figures come from: an interrupted record (its figures come from the
    samples that finished: ``bench_incomplete``), one measured on another host or CPU model
    (``bench_other_machine``; refused with ``strict``)."""
    from sactool.records import warning

    out = []
    for p, rec in records:
        theirs = (rec.data.get("machine") or {})
        for key in ("hostname", "cpu_model"):
            if theirs.get(key) and machine.get(key) and theirs[key] != machine[key]:
                msg = f"bench record {p} was measured on {key} {theirs[key]!r}, this is {machine[key]!r}"
                if strict:
                    raise RecordError(msg, "measure here with 'sactool bench', or drop --strict to use it anyway")
                out.append(warning("bench_other_machine", msg, "figures from another machine may not hold here"))
                break
    for p, rec in records:   # an interrupted bench (Ctrl-C, SIGTERM) kept the samples it had finished
        if not rec.complete:
            out.append(warning("bench_incomplete", f"{p} is an interrupted bench record (complete: false): "
                               "its figures come from the samples that finished",
                               "rerun the bench to the end for the full protocol"))
    return out
