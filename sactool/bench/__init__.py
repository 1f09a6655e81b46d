"""Memory benchmarks: numba kernels with specs, an explicit protocol, and the ``bench`` record.

Light to import (no numpy/numba until something is measured). Entry points used across sactool:

* :func:`run_bench` / :class:`BenchOptions` — what ``sactool bench`` runs;
* :func:`load_bench` — read a bench record (older upgraded, newer refused);
* :func:`gather_figure` — gather throughput for any record size from a record;
* :func:`run_quick_gather` — a few seconds of real gather measurement (``sactool tune`` without --bench).
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
    there, the point already on disk.
    """
    from sactool.bench.api import BenchOptions, run_bench as _run
    from sactool.bench.protocol import Protocol
    from sactool.bench.sizing import FLOOR_BYTES

    if seconds <= 0:
        from sactool.errors import UsageError

        raise UsageError(f"seconds {seconds} must be positive", "e.g. 3")
    rounds = 5
    # warm-up + calibration take about 3 sample lengths on top of the rounds
    proto = Protocol("quick", max(0.005, seconds / (rounds + 4)), rounds, warmup=1)
    opts = BenchOptions(tests=("gather",), node=node, size_bytes=size_bytes, size_floor_bytes=FLOOR_BYTES, size_option="--gather-size",
                        threads=(threads,) if threads else None, record_bytes=(record_bytes,), topk=topk,
                        preset="fast", command="quick-gather", protocol=proto, hugepages=hugepages)
    if threads is None:
        from dataclasses import replace

        from sactool.bench.api import resolve_cpus
        from sactool.memory.nodes import topology

        topo = topology(reader)
        mem = node if node is not None else topo.verdict.pool_nodes[0]
        _, cpus = resolve_cpus(topo, mem, None)
        opts = replace(opts, threads=(len(cpus),))
    rec = _run(opts, reader=reader, notify=notify)
    if not rec.complete:
        # run_bench keeps a partial record for 'sactool bench' to write; a quick figure built
        # from it ("median of 1 samples") would be silently wrong, so the interrupt goes on
        raise KeyboardInterrupt
    return rec


__all__ = ["BenchRecord", "GatherFigure", "gather_figure", "lines_touched", "load_bench", "run_bench",
           "run_quick_gather", "BenchOptions"]
