"""Engine-neutral placement of a rank's KV host pool, as the pool's spec says: which target the
rank maps on this machine (the rank plan over the live targets), how much it may take there, and
the allocation itself (:mod:`sactool.memory`: mbind with the settings' policy, huge pages,
pre-faulting near the node, move_pages verification; or the rank's slice of its DAX device).

One :class:`HostPoolPlacer` per process holds the :class:`~sactool.pool.plan.PoolSpec` (pool
settings, world size, byte budget — never a profile), the machine's structure probed once
(targets, prefault CPUs), the plan, and what it placed; momentary figures (a node's free memory)
are read again at each allocation (:mod:`sactool.pool.readings`). An engine's hooks
(:mod:`sactool.plugins`) ask it for a budget and a buffer, and name the engine
(``engine``) for its messages. No torch, no engine here: testable on node 0.

Several pools in one process (a second coordinator, SGLang's caller hook firing twice, vLLM's
private-pool path called twice, DeepSeek-V4's one allocation per layer) never share bytes: what a
live mapping of this process holds is kept here, process-wide (:class:`Held`), and every placement
counts it. On a DAX device the next pool maps the first free aligned stretch of the rank's slice
that holds it — beside every stretch a live mapping of the same device holds, whichever placer
mapped it; when none is left the pool does not fit, as a pool larger than the slice does (strict:
stop naming the sizes; else the engine's allocator, with a warning). In NUMA mode the bytes live
pools hold count against the rank's pinned share (``pool.capacity_bytes``), and the node's free
memory is read again for each answer, so it counts the pools already placed. A stretch is held
while its mapping exists: it is free again only once the mapping is gone — closed by
:meth:`HostPoolPlacer.close` or by the engine dropping its last view of a region — never while an
array still views it.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from sactool.pool.plan import PoolSpec

from sactool.pool.contract import POISON_ENV, STANDIN_ENV, poison_from_env, standin_devices

logger = logging.getLogger("sactool.pool")   # the plug-ins log under sactool.plugins.<engine>

VERIFY_ALL_PAGES_UP_TO = 1 << 20
"""Pages checked with move_pages: every page up to this many (4 GiB of 4 KiB pages), else an even
sample of this many — a bound on the time a 40 GB pool's verification takes, stated in the log."""


class PlacementStop(RuntimeError):
    """Raised in strict mode: the rank must not start with the pool in the wrong memory."""


def stop(msg: str) -> None:
    """Log and raise :class:`PlacementStop` (``pool.strict``)."""
    logger.error("sactool_cxl: %s (pool.strict: stopping)", msg)
    raise PlacementStop(f"sactool_cxl: {msg}")


def fallback(msg: str, engine: str = "the engine") -> None:
    """Log that the engine's own allocator is used (``engine``: its name, for the message)."""
    logger.warning("sactool_cxl: %s; %s own allocator is used", msg, possessive(engine))


def possessive(engine: str) -> str:
    """``SGLang`` -> ``SGLang's``, ``the engine`` -> ``the engine's``."""
    return engine + "'s"


@dataclass(frozen=True)
class PoolResult:
    """What was placed, for the log, for tests and for scripts/sglang-integration."""

    rank: int
    target: str
    size_bytes: int
    verified_fraction: float
    pages_checked: int
    node_pages: dict[int, int]
    hugepage_bytes: int
    line: str
    address: int = 0
    offset_bytes: int = 0           # devdax: the slice's offset in the device
    path: str | None = None         # devdax: the device (or the file standing in for it)
    budget_answer: int | None = None  # what the plug-in answered the engine's host-memory check


@dataclass(frozen=True)
class Held:
    """Pool memory a live mapping of this process holds: bytes ``[start, end)`` of a DAX device
    (``key`` = :func:`device_key` of the device, or of the file standing in for it), or ``end``
    bytes of rank ``rank``'s NUMA share of ``target`` (``key`` = ``("numa", target, rank)``, start 0).
    ``mapping``: the mmap, weakly — held while it exists and is open."""

    key: tuple
    start: int
    end: int
    target: str
    rank: int | None
    mapping: Callable[[], Any]

    def live(self) -> bool:
        mm = self.mapping()
        return mm is not None and not getattr(mm, "closed", False)


_HELD: list[Held] = []
_HELD_LOCK = threading.RLock()   # choosing a stretch and mapping it are one step (threads of one engine)


def _weak(mm: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(mm)
    except TypeError:            # an object without weak references: held as long as the process
        return lambda: mm


def holdings(key: tuple | None = None) -> list[Held]:
    """What live mappings of this process hold (of ``key`` only, when given); mappings gone are dropped."""
    with _HELD_LOCK:
        _HELD[:] = [h for h in _HELD if h.live()]
        return [h for h in _HELD if key is None or h.key == key]


def hold_range(key: tuple, start: int, end: int, mm: Any, *, target: str, rank: int | None) -> Held:
    """Record that ``mm`` holds ``[start, end)`` of ``key`` (until it is closed or collected)."""
    h = Held(key, start, end, target, rank, _weak(mm))
    with _HELD_LOCK:
        _HELD.append(h)
    return h


def device_key(path: str) -> tuple:
    """What a DAX device (or the file standing in for it) is, not what it is called: ``(st_dev,
    st_ino, st_rdev)`` — two names of one device are one key, a name given to another file later is
    another. ``("dax", path)`` when it cannot be stat'ed (the mapping then fails with the reason)."""
    try:
        st = os.stat(path)
    except OSError:
        return ("dax", path)
    return ("dax", st.st_dev, st.st_ino, st.st_rdev)


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def free_stretches(lo: int, hi: int, align: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The free stretches of ``[lo, hi)`` beside the ``taken`` ``[start, end)`` ranges, each starting
    on ``align`` (a taken range's end is rounded up to it), in order."""
    out: list[tuple[int, int]] = []
    at = _round_up(lo, align)
    for s, e in sorted(taken):
        if e <= at or s >= hi:
            continue
        if s > at:
            out.append((at, s))
        at = max(at, _round_up(e, align))
    if hi > at:
        out.append((at, hi))
    return out


class HostPoolPlacer:
    """The placement half of a plug-in for one process: ``spec`` (a
    :class:`~sactool.pool.plan.PoolSpec`), ``strict`` (stop instead of falling back), ``reader``
    (the machine, or a recorded tree in tests), ``engine`` (the engine's name in messages). The
    topology is probed once and the rank plan made once."""

    def __init__(self, spec: PoolSpec, *, strict: bool = False, reader: Any = None, engine: str = "the engine"):
        from sactool.host.sysfs import SysfsReader

        self.spec = spec
        self.engine = engine
        self.strict = strict
        self.reader = reader or SysfsReader()
        self.placed: list[PoolResult] = []      # what was placed, in order
        self.budget_answer: int | None = None   # the last answer to the engine's host-memory check
        self._keep: list[Any] = []              # PlacedBuffers stay alive as long as the process
        self._topo: Any = None
        self._plans: tuple[list[Any], Any] | None = None

    def topology(self) -> Any:
        """The machine's topology, probed once per process."""
        if self._topo is None:
            from sactool.memory import nodes as memnodes

            self._topo = memnodes.topology(self.reader)
        return self._topo

    def close(self) -> None:
        """Unmap every buffer placed (tests; a serving process keeps them until it exits): their
        stretches of the slices and their bytes of the shares are free again. A buffer that arrays
        still view stays mapped — and held — and the first such BufferError is raised after the
        others are closed."""
        still: list[Any] = []
        errors: list[BufferError] = []
        for b in self._keep:
            try:
                b.close()
            except BufferError as e:
                still.append(b)
                errors.append(e)
        self._keep[:] = still       # in place: a placer that took over this list sees the same
        if errors:
            raise errors[0]

    def live_targets(self) -> list[Any]:
        """The pool's targets with the facts of this machine (sizes, align, CPU node), or of the
        files standing in for DAX devices (``$SACTOOL_DEVDAX_STANDIN``); a DAX device's known poison
        is the set serve read and handed every rank (``$SACTOOL_POOL_POISON``), so all ranks sharing
        a device carve it alike (unset: what the topology holds — a recording's captured list; a
        live probe here does not ask the devices)."""
        import dataclasses

        from sactool.pool.targets import Target, target_facts, target_names

        q = self.spec.settings
        names = target_names(q)
        stand = standin_devices() if q.mode == "devdax" else {}
        out = {}
        for n in names:
            if n in stand:
                size = os.stat(stand[n]["path"]).st_size
                if q.capacity_bytes is not None:
                    size = min(size, q.capacity_bytes)
                out[n] = Target(n, "devdax", size, f"{stand[n]['path']} standing in for /dev/{n} (${STANDIN_ENV})",
                                stand[n]["align_bytes"], None, "a file standing in: no socket")
        rest = [n for n in names if n not in out]
        if rest:
            for t in target_facts(self.topology(), self.reader, rest, capacity_bytes=q.capacity_bytes):
                out[t.name] = t
        given = poison_from_env() if q.mode == "devdax" else None
        for n, recs in (given or {}).items():
            if n in out:
                out[n] = dataclasses.replace(out[n], poison=recs)
        return [out[n] for n in names]


    def plan_for(self, rank: int) -> Any:
        """This rank's PoolPlan (the rank plan over this machine's targets, computed once)."""
        from sactool.pool.plan import plan_for_rank, rank_plan

        spec = self.spec
        if self._plans is None:
            targets = self.live_targets()
            self._plans = (targets, rank_plan(spec, targets, check_pool=False))
            for line in self._plans[1].carve_lines():
                logger.warning("sactool_cxl: slices carved around known poison (%s): %s",
                               f"${POISON_ENV}" if POISON_ENV in os.environ else "the topology's poison list", line)
        targets, plan = self._plans
        if not 0 <= rank < len(plan.slots):
            from sactool.errors import RecordError

            raise RecordError(f"rank {rank} is outside the profile's {len(plan.slots)} ranks",
                              f"the profile's rank count (SGLang: sglang.tp_size) must match what {self.engine} "
                              "runs with")
        return plan_for_rank(spec, rank, targets, plan)


    def place(self, rank: int | None, n_bytes: int, *, rank_source: str = "") -> Any:
        """Allocate the pool of ``rank`` as the spec says; return the PlacedBuffer (kept alive) or
        None after logging why the engine's allocator must be used (PlacementStop when ``strict``).
        Pools this process placed before still hold their bytes (:class:`Held`): devdax maps the next
        free aligned stretch of the rank's slice, NUMA counts them against a pinned share."""
        from sactool.errors import SactoolError

        strict = self.strict

        def fail(msg: str) -> None:
            stop(msg) if strict else fallback(msg, self.engine)

        if rank is None:
            fail(f"cannot tell this process's rank (no {self.engine} rank, no $SACTOOL_RANK/$RANK)")
            return None
        try:
            plan = self.plan_for(rank)
        except (SactoolError, OSError, ValueError) as e:
            fail(f"rank {rank}: {getattr(e, 'message', e)}")
            return None
        try:
            buf = self._allocate(plan, n_bytes)
        except (SactoolError, OSError, ValueError) as e:
            from sactool.units import format_bytes

            fail(f"rank {rank}: placing {format_bytes(n_bytes)} on {plan.target} failed: {getattr(e, 'message', e)}")
            return None
        res = self.describe(plan, buf, rank_source)
        logger.warning(res.line)      # WARNING so it shows at the engines' default log level
        if plan.mode == "numa" and res.verified_fraction < 1.0 and plan.policy == "bind":
            msg = f"rank {rank}: only {res.verified_fraction:.1%} of the checked pages are on {plan.target}"
            if strict:
                buf.close()
                stop(msg)
            logger.warning("sactool_cxl: %s", msg)
        self._keep.append(buf)
        self.placed.append(res)
        return buf


    def pool_budget(self, plan: Any) -> tuple[int | None, str]:
        """Bytes the pool of ``plan`` may take where it goes, and where that figure came from."""
        if plan.mode == "devdax":
            if plan.slot is None or plan.slot.size_bytes is None:
                return None, ""
            where = f"its slice of {plan.target} at offset {plan.offset_bytes} (rank plan, align {plan.align_bytes})"
            lo, hi, align, _, taken = self._slice_state(plan)
            if not taken:
                return plan.slot.size_bytes, where
            gaps = free_stretches(lo, hi, align, taken)
            biggest = max((e - g for g, e in gaps), default=0)
            return biggest, (f"the largest free stretch of {where}: {self._taken_words(lo, hi, taken)}")
        if plan.policy == "weighted_interleave" or plan.node is None:
            return None, ""
        from sactool.pool.readings import node_room

        now = node_room(self.topology(), self.reader, plan.node)   # a momentary reading, taken now
        if now.bytes is None:
            return None, ""
        from sactool.units import format_bytes

        room = now.bytes
        share = self._pinned_share(plan)
        used = self._share_used(plan)
        if share is not None and share - used < room:   # pool.capacity_bytes pins what this rank's pool may take
            return max(share - used, 0), (f"rank {plan.rank}'s share of {plan.target}'s pinned capacity: "
                                          f"{format_bytes(share)} (pool.capacity_bytes over "
                                          f"{len(plan.shared_with) + 1} rank(s))"
                                          + (f", less the {format_bytes(used)} earlier pools of this process hold"
                                             if used else ""))
        return room, f"free memory of {plan.target}: {now.source}"

    def _device_path(self, plan: Any) -> str:
        stand = standin_devices().get(plan.target)
        return stand["path"] if stand else f"/dev/{plan.target}"

    def _slice_state(self, plan: Any) -> tuple[int, int, int, tuple, list[tuple[int, int]]]:
        """(slice start, slice end, align, device key, [start, end) of the slice held by live mappings)."""
        stand = standin_devices().get(plan.target)
        align = (stand["align_bytes"] if stand else plan.align_bytes) or 1
        lo = plan.slot.offset_bytes or 0
        hi = lo + plan.slot.size_bytes
        key = device_key(self._device_path(plan))
        taken = [(h.start, h.end) for h in holdings(key) if h.end > lo and h.start < hi]
        return lo, hi, align, key, taken

    @staticmethod
    def _taken_words(lo: int, hi: int, taken: list[tuple[int, int]]) -> str:
        used = sum(min(e, hi) - max(s, lo) for s, e in taken)
        return (f"{used} of its {hi - lo} bytes held by {len(taken)} earlier pool(s) of this process at "
                + ", ".join(f"[{s:#x}, {e:#x})" for s, e in sorted(taken)))

    def _share_used(self, plan: Any) -> int:
        """NUMA: bytes live pools of this process hold of rank ``plan.rank``'s share of its target."""
        if plan.mode != "numa":
            return 0
        return sum(h.end - h.start for h in holdings(("numa", plan.target, plan.rank)))

    def hold(self, plan: Any, mm: Any, n_bytes: int | None = None) -> None:
        """NUMA: memory the engine mapped itself and the plug-in bound to the plan's target (vLLM's
        shared region) counts against the rank's share while ``mm`` is mapped, as a placed pool does."""
        if plan.mode == "numa":
            hold_range(("numa", plan.target, plan.rank), 0, len(mm) if n_bytes is None else n_bytes, mm,
                 target=plan.target, rank=plan.rank)

    def map_slice(self, plan: Any, n_bytes: int) -> Any:
        """Devdax: map ``n_bytes`` (rounded up to the device's align) at the first free aligned stretch
        of the rank's slice that holds them — beside every stretch live mappings of this process hold —
        ``MAP_SHARED``, as it is (no zero-fill, no check: a shared region's ranks do that), held until
        it is unmapped. ValueError naming the sizes when no stretch holds them."""
        from sactool.pool import region

        slot = plan.slot
        if slot is None or slot.size_bytes is None:
            raise ValueError(f"no slice of {plan.target} is planned for rank {plan.rank} (device size unknown)")
        with _HELD_LOCK:
            lo, hi, align, key, taken = self._slice_state(plan)
            need = _round_up(n_bytes, align)
            at = next((g for g, e in free_stretches(lo, hi, align, taken) if e - g >= need), None)
            if at is None:
                why = f"{self.engine} asks for {n_bytes} bytes, rank {plan.rank}'s slice of {plan.target} holds {hi - lo}"
                if taken:
                    biggest = max((e - g for g, e in free_stretches(lo, hi, align, taken)), default=0)
                    why += (f"; {self._taken_words(lo, hi, taken)}: the largest free stretch holds {biggest} "
                            "(a pool never maps over another)")
                raise ValueError(why + " (rank plan)")
            buf = region.map_slice(plan, n_bytes, offset_bytes=at, reader=self.reader)
            hold_range(key, at, at + max(need, buf.size_bytes), buf.mmap, target=plan.target, rank=plan.rank)
        return buf


    def _pinned_share(self, plan: Any) -> int | None:
        """NUMA mode with ``pool.capacity_bytes``: this rank's share of the pinned capacity (the rank plan's
        slot); None when the capacity is not pinned (the node's free memory decides)."""
        if plan.mode != "numa" or self.spec.settings.capacity_bytes is None:
            return None
        return plan.slot.size_bytes if plan.slot is not None else None


    def _allocate(self, plan: Any, n_bytes: int) -> Any:
        from sactool.host.sysfs import parse_cpulist
        from sactool.memory import allocate
        from sactool.memory.placed import zero_fill

        reader = self.reader
        sample = None if n_bytes // mmap.PAGESIZE <= VERIFY_ALL_PAGES_UP_TO else VERIFY_ALL_PAGES_UP_TO
        cpus = None if plan.prefault_cpus == "auto" else list(parse_cpulist(plan.prefault_cpus))
        if cpus is None and plan.cpu_node is not None and reader.live:
            allowed = os.sched_getaffinity(0)
            try:
                cpus = [c for c in self.topology().node(plan.cpu_node).cpus if c in allowed] or None
            except Exception:
                cpus = None
        if plan.mode == "devdax":
            buf = self.map_slice(plan, n_bytes)      # the next free stretch of the slice, held from here on
            try:
                self._dontfork(buf)
                buf.prefault_seconds = zero_fill(buf.mmap, buf.size_bytes, plan.prefault_threads, cpus)
                buf.verify(sample)
            except BaseException:
                buf.close()                          # no view of it exists yet: its stretch is free again
                raise
            return buf
        share = self._pinned_share(plan)
        used = self._share_used(plan)
        if share is not None and used + n_bytes > share:
            from sactool.units import format_bytes

            raise ValueError(f"{self.engine} asks for {format_bytes(n_bytes)}" + (f" more ({format_bytes(used)} already "
                             "held by earlier pools of this process)" if used else "") + f", rank {plan.rank}'s share of "
                             f"{plan.target}'s pinned capacity holds {format_bytes(share)} (pool.capacity_bytes over "
                             f"{len(plan.shared_with) + 1} rank(s))")
        kw: dict[str, Any] = dict(node=plan.node, policy="bind" if plan.policy == "weighted_interleave" else plan.policy,
                                  hugepages=plan.hugepages, prefault_threads=plan.prefault_threads,
                                  prefault_cpus=cpus, check_free=True, verify_sample=sample, reader=reader)
        if plan.policy == "weighted_interleave":
            kw["weights"] = dict(plan.interleave_weights)
        buf = allocate(n_bytes, **kw)
        hold_range(("numa", plan.target, plan.rank), 0, buf.size_bytes, buf.mmap, target=plan.target, rank=plan.rank)
        self._dontfork(buf)
        return buf


    def describe(self, plan: Any, buf: Any, rank_source: str = "") -> PoolResult:
        r = buf.report or buf.verify(VERIFY_ALL_PAGES_UP_TO)
        where = ", ".join(f"node{k}: {v}" if k >= 0 else f"errno{-k}: {v}" for k, v in sorted(r.node_pages.items()))
        checked = "all" if r.pages_checked >= r.pages_total else f"a sample of {r.pages_checked} of {r.pages_total}"
        stand = " (a DRAM node stood in for CXL: pool.stand_in)" if plan.stand_in and plan.mode == "numa" else ""
        by = f"{plan.prefault_threads} thread{'s' if plan.prefault_threads != 1 else ''}"
        if plan.mode == "devdax":   # placement = the mapping (/proc/self/maps); move_pages says ENOENT there
            m = buf.mapping
            expect = ("mapping verified (/proc/self/maps: the device at the slice's offset, on its align)"
                      if m is not None and m.verified else
                      f"mapping NOT as planned: {m.reason if m is not None else 'not checked'}")
            line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                    f"on {plan.target}, {buf.hugepages}: {expect}, zero-filled in "
                    f"{buf.prefault_seconds:.2f} s by {by}")
        else:
            line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                    f"on {plan.target}{stand}, policy {buf.policy}, hugepages {plan.hugepages}: verified "
                    f"{r.verified_fraction:.1%} of {checked} pages on {', '.join(f'node{n}' for n in r.expected_nodes)} "
                    f"[{where}], huge-page bytes {r.hugepage_bytes}, prefault {buf.prefault_seconds:.2f} s "
                    f"by {by}")
        if plan.mode == "devdax":
            gpu = f" (GPU {plan.slot.gpu})" if plan.slot is not None else ""
            line += (f"; devdax slice{gpu} at offset {buf.offset_bytes} of {buf.path}"
                     + (" (a file standing in for the device)" if any("standing in" in n for n in buf.notes) else "")
                     + f", {len(plan.shared_with) + 1} rank(s) share {plan.target} (cudaHostRegister of device-DAX "
                     "memory is unverified here, docs/sources.md, SGLang §6.5)")
        return PoolResult(plan.rank, plan.target, buf.size_bytes, r.verified_fraction, r.pages_checked,
                          dict(r.node_pages), r.hugepage_bytes, line, address=buf.address,
                          offset_bytes=buf.offset_bytes, path=buf.path, budget_answer=self.budget_answer)


    @staticmethod
    def _dontfork(buf: Any) -> None:
        """MADV_DONTFORK, as SGLang does for its private pinned mappings (no COW after fork)."""
        try:
            buf.mmap.madvise(mmap.MADV_DONTFORK)
        except (AttributeError, OSError) as e:
            logger.info("sactool_cxl: madvise(MADV_DONTFORK) failed: %s", e)


