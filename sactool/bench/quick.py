"""Quick gathers on buffers placed once: what ``sactool tune`` measures when no ``--bench`` is given.

``tune`` measures the pool's fetch figure in rounds interleaved over its targets and the pool's page
kind in rounds interleaved over the kinds (:func:`sactool.tune.pool.measure_rounds`,
:func:`sactool.tune.pagesize.measure`): each point is a short gather on a buffer of the size
:mod:`sactool.bench.sizing` derives — 8x the gathering CPUs' last-level cache (3.75 GiB under a
480 MiB L3). Placing one (mbind, every page pre-faulted from the node's CPUs, every page's node
checked with move_pages) takes seconds, and tune used to place a fresh one for every point.

A :class:`QuickGathers` session places each (node, page kind, size) buffer once, verifies it once,
and measures every point that asks for it on it. Everything else of a point is what a fresh
:func:`sactool.bench.run_quick_gather` does — the same options, protocol, index stream and working
set (the buffer's whole records, which must meet the trust rule of :mod:`sactool.bench.sizing`: the
size is not touched) — so a point's figure is the same measurement; its record's ``buffer`` block
(the placement and its verification) adds ``measurement_on_buffer`` (1: placed for this point).

Memory: a session keeps its buffers until it ends. A buffer of another (node, kind) is placed only
where the node holds it beside those already held (the free-memory check of every placement,
:func:`sactool.memory.nodes.check_fits`); where it does not, the session unmaps what it holds first,
and a later point that needs one of those places it again.

The lock: the session takes the machine-wide measurement lock (:mod:`sactool.bench.lock`) before its
first placement and holds it to its end — tune's measuring is one measurement. The first record's
``measurement_lock`` says whom it waited for; every record's ``measured`` is its own point's window.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from sactool.bench import record as R
from sactool.bench.api import BenchOptions, Prepared
from sactool.errors import CapacityError
from sactool.host.sysfs import SysfsReader

ROUNDS = 5
"""Rounds of a quick gather's protocol (warm-up and calibration take about 3 sample lengths more)."""


def quick_options(node: int | None, record_bytes: int, topk: int, threads: int | None, *, size_bytes: int | None,
                  seconds: float, hugepages: str, reader: SysfsReader | None = None) -> BenchOptions:
    """The options of one quick gather (:func:`sactool.bench.run_quick_gather`): one configuration, a
    protocol of :data:`ROUNDS` rounds that ends in about ``seconds``, every CPU of the nearest CPU node
    (``threads`` None)."""
    from sactool.bench.protocol import Protocol
    from sactool.bench.sizing import FLOOR_BYTES

    if seconds <= 0:
        from sactool.errors import UsageError

        raise UsageError(f"seconds {seconds} must be positive", "e.g. 3")
    proto = Protocol("quick", max(0.005, seconds / (ROUNDS + 4)), ROUNDS, warmup=1)
    if threads is None:
        from sactool.bench.api import resolve_cpus
        from sactool.memory.nodes import topology

        topo = topology(reader)
        _, cpus = resolve_cpus(topo, node if node is not None else topo.verdict.pool_nodes[0], None)
        threads = len(cpus)
    return BenchOptions(tests=("gather",), node=node, size_bytes=size_bytes, size_floor_bytes=FLOOR_BYTES,
                        size_option="--gather-size", threads=(threads,), record_bytes=(record_bytes,), topk=topk,
                        preset="fast", command="quick-gather", protocol=proto, hugepages=hugepages)


@dataclass
class _Held:
    """One placed, verified buffer: its record block, its warnings, how many points measured on it."""

    buf: Any
    bdesc: dict
    warnings: list[dict]
    uses: int = 0


@dataclass
class QuickGathers:
    """A session of quick gathers (see the module); a context manager: buffers unmapped and the lock
    released at its end. ``placements``: (node, page kind, bytes) of every buffer it placed, in order."""

    reader: SysfsReader | None = None
    placements: list[tuple[int, str, int]] = field(default_factory=list)
    _prepared: dict[tuple, Prepared] = field(default_factory=dict)
    _held: dict[tuple, _Held] = field(default_factory=dict)
    _stack: ExitStack | None = None
    _lock: dict | None = None

    def __enter__(self) -> "QuickGathers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def gather(self, node: int | None, record_bytes: int, topk: int, threads: int | None = None, *,
               size_bytes: int | None = None, seconds: float = 2.0, hugepages: str = "thp",
               notify: Callable[[str], None] | None = None) -> R.BenchRecord:
        """One quick gather (:func:`sactool.bench.run_quick_gather`'s arguments and record) on this
        session's buffer for (node, ``hugepages``, size), placed now if it has none. Ctrl-C raises
        KeyboardInterrupt (a partial figure is no figure); a complete record comes back settled."""
        key = (node, record_bytes, topk, threads, size_bytes, seconds, hugepages)
        p = self._prepared.get(key)
        if p is None:
            if size_bytes is None:
                self._unmap()   # a size derived from the free memory: as a fresh run derives it, not beside ours
            opts = quick_options(node, record_bytes, topk, threads, size_bytes=size_bytes, seconds=seconds,
                                 hugepages=hugepages, reader=self.reader)
            p = self._make_room(lambda: _prepare(opts, self.reader))
            self._prepared[key] = p
        rec = self._measure(p, notify)
        if not rec.complete:
            # a figure built from a partial record ("median of 1 samples") would be silently wrong
            raise KeyboardInterrupt
        return rec

    def _measure(self, p: Prepared, notify) -> R.BenchRecord:
        from sactool.bench import runner
        from sactool.bench.api import _utc_us, busy_warning, finish

        lock = self._take_lock(p.opts, notify)
        results: list[dict] = []
        warnings = list(p.warnings)
        busy_warning(p, warnings)
        held = self._buffer(p)
        warnings.extend(held.warnings)
        held.uses += 1
        window = {"start_utc": _utc_us()}
        complete = runner.measure_all(held.buf, p.opts, p.proto, p.cpus, p.threads, p.llc, p.gather_idx, results,
                                      warnings, reader=p.reader)
        window["end_utc"] = _utc_us()
        return finish(p, results, warnings, dict(held.bdesc, measurement_on_buffer=held.uses), complete, lock, window)

    def _take_lock(self, opts: BenchOptions, notify) -> dict:
        """The lock's record block: taken (or waited for) by the first point, held by the later ones."""
        from sactool.bench.lock import LockState, measurement_lock

        if self._stack is None:
            stack = ExitStack()
            state = stack.enter_context(measurement_lock(wait=opts.wait, notify=notify,
                                                         what=f"'sactool bench {opts.command}'"))
            self._stack, self._lock = stack, state.to_data()
            return dict(self._lock)
        assert self._lock is not None
        return LockState(self._lock["path"], 0.0, None, self._lock["unavailable_reason"]).to_data()

    def _buffer(self, p: Prepared) -> _Held:
        """This session's buffer for ``p`` (node, page kind, size), placed and verified now if it has none."""
        from sactool.bench.api import _buffer_warnings
        from sactool.memory import allocate

        key = (p.mem, p.opts.hugepages, p.size)
        held = self._held.get(key)
        if held is not None:
            return held
        buf = self._make_room(lambda: allocate(p.size, node=p.mem, hugepages=p.opts.hugepages,
                                               prefault_threads=len(p.cpus), prefault_cpus=p.cpus, topo=p.topo,
                                               reader=p.reader))
        try:
            bdesc = buf.describe()
            held = _Held(buf, bdesc, _buffer_warnings(bdesc, p.opts, p.mem, p.size, p.llc))
        except BaseException:
            buf.close()
            raise
        self._held[key] = held
        self.placements.append(key)
        return held

    def _make_room(self, fn):
        """``fn()``; where the node cannot hold it beside this session's buffers (CapacityError), unmap
        them and try once more."""
        try:
            return fn()
        except CapacityError:
            if not self._held:
                raise
        self._unmap()
        return fn()

    def _unmap(self) -> None:
        from sactool.memory.placed import close_after

        held, self._held = self._held, {}
        first: BaseException | None = None
        for h in held.values():
            try:
                close_after(h.buf)
            except BaseException as e:   # a view still alive: the others are unmapped all the same
                first = first or e
        if first is not None:
            raise first

    def close(self) -> None:
        """Unmap every buffer, then release the lock (a bench waiting for it finds the memory free)."""
        try:
            self._unmap()
        finally:
            stack, self._stack = self._stack, None
            if stack is not None:
                stack.close()


def _prepare(opts: BenchOptions, reader) -> Prepared:
    from sactool.bench.api import prepare

    return prepare(opts, reader)


__all__ = ["QuickGathers", "quick_options", "ROUNDS"]
