"""Memory benchmarks: numba kernels with specs, an explicit protocol, and the ``bench`` record.

Light to import (no numpy/numba until something is measured). Entry points used across sactool:

* :func:`run_bench` / :class:`BenchOptions` — what ``sactool bench`` runs;
* :func:`load_bench` — read a bench record (older upgraded, newer refused);
* :func:`gather_figure` — gather throughput for any record size from a record;
* :func:`run_quick_gather` — a few seconds of real gather measurement (``sactool tune`` without --bench,
  many of them on one placed buffer: :class:`sactool.bench.quick.QuickGathers`).
"""

from __future__ import annotations

from sactool.bench.record import BenchRecord, GatherFigure, gather_figure, lines_touched, load_bench


def run_bench(opts, **kw):
    """See :func:`sactool.bench.api.run_bench`."""
    from sactool.bench.api import run_bench as _run

    return _run(opts, **kw)


def __getattr__(name):
    if name in ("BenchOptions", "TESTS"):
        from sactool.bench import api

        return getattr(api, name)
    raise AttributeError(name)


def run_quick_gather(node: int | None, record_bytes: int, topk: int, threads: int | None = None, *,
                     size_bytes: int | None = None, seconds: float = 2.0, reader=None,
                     hugepages: str = "thp", notify=None) -> BenchRecord:
    """A short real gather measurement on memory ``node`` (None: the pool node).

    One configuration: ``record_bytes`` records, ``topk`` uniform indices per step, ``threads``
    threads (None: all CPUs of the nearest CPU node), the default prefetch distance; buffer
    ``size_bytes`` (default: sized from this machine, :func:`sactool.bench.sizing.derive`: 8× the
    gathering CPUs' last-level cache, at least 256 MiB, at most what the node holds). ``seconds`` bounds the measuring time
    (imports, placement and kernel load come on top: ~2–3 s here). ``hugepages``: the buffer's
    page kind (thp, none = 4 KiB, 2MB/1GB hugetlb). Another sactool measurement running: it waits,
    telling ``notify`` (a one-line text callback) whom for (:mod:`sactool.bench.lock`). Returns a full
    bench record; Ctrl-C raises KeyboardInterrupt (a partial measurement is not a figure). A complete
    record comes back settled (:func:`sactool.errors.settle`: a signal after the measurement is
    recorded, not raised): the caller saves it (tune: its journal), then calls
    :func:`sactool.errors.unsettle` to go on interruptibly — a signal that came meanwhile is raised
    there, the point already on disk. Many points on one buffer: :class:`sactool.bench.quick.QuickGathers`
    (this is one point of a session of its own).
    """
    from sactool.bench.quick import QuickGathers

    with QuickGathers(reader) as q:
        return q.gather(node, record_bytes, topk, threads, size_bytes=size_bytes, seconds=seconds,
                        hugepages=hugepages, notify=notify)


__all__ = ["BenchRecord", "GatherFigure", "gather_figure", "lines_touched", "load_bench", "run_bench",
           "run_quick_gather", "BenchOptions"]
