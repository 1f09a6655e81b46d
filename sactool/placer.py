"""Engine-neutral placement of a rank's HiSparse host pool, as its profile says: which target the
rank maps on this machine (the rank plan over the live targets), how much it may take there, and
the allocation itself (:mod:`sactool.memory`: mbind with the profile's policy, huge pages,
pre-faulting near the node, move_pages verification; or the rank's slice of its DAX device).

One :class:`HostPoolPlacer` per process holds the profile, the machine probed once (targets,
budgets, prefault CPUs; each allocation's free-memory check still reads the node's free memory as
it is then) and the plan, and what it placed. The SGLang hooks (:mod:`sactool.sglang_plugin`) ask it for a budget and a
buffer; another engine's plug-in would ask it the same. No torch, no SGLang here: testable on
node 0.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("sactool.sglang_plugin")   # the plug-in's log lines, whichever engine

STANDIN_ENV = "SACTOOL_DEVDAX_STANDIN"
VERIFY_ALL_PAGES_UP_TO = 1 << 20
"""Pages checked with move_pages: every page up to this many (4 GiB of 4 KiB pages), else an even
sample of this many — a bound on the time a 40 GB pool's verification takes, stated in the log."""


class PlacementStop(RuntimeError):
    """Raised in strict mode: the rank must not start with the pool in the wrong memory."""


def stop(msg: str) -> None:
    """Log and raise :class:`PlacementStop` (``pool.strict``)."""
    logger.error("sactool_cxl: %s (pool.strict: stopping)", msg)
    raise PlacementStop(f"sactool_cxl: {msg}")


def fallback(msg: str) -> None:
    """Log that the engine's own allocator is used."""
    logger.warning("sactool_cxl: %s; SGLang's own allocator is used", msg)


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
    budget_answer: int | None = None  # what the plug-in answered SGLang's host-memory check


def standin_devices() -> dict[str, dict]:
    """``$SACTOOL_DEVDAX_STANDIN``: DAX device name -> {"path", "align_bytes"} of a file standing in."""
    import json

    raw = os.environ.get(STANDIN_ENV, "")
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): {"path": str(v["path"]), "align_bytes": int(v["align_bytes"])} for k, v in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"${STANDIN_ENV} is not a JSON mapping name -> {{path, align_bytes}}: {e}") from None


class HostPoolPlacer:
    """The placement half of the plug-in for one process: ``profile`` (a
    :class:`sactool.profile.Profile`), ``strict`` (stop instead of falling back), ``reader`` (the
    machine, or a recorded tree in tests). The topology is probed once and the rank plan made once."""

    def __init__(self, profile: Any, *, strict: bool = False, reader: Any = None):
        from sactool.host.sysfs import SysfsReader

        self.profile = profile
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
        """Unmap every buffer placed (tests; a serving process keeps them until it exits)."""
        for b in self._keep:
            b.close()
        self._keep.clear()

    def live_targets(self) -> list[Any]:
        """The profile's pool targets with the facts of this machine (sizes, align, CPU node), or of
        the files standing in for DAX devices (``$SACTOOL_DEVDAX_STANDIN``)."""
        from sactool.profile.hostpool import pool_targets as names_of
        from sactool.hisparse.rankplan import Target
        from sactool.hisparse.targets import pool_targets

        profile = self.profile
        q = profile.pool
        names = names_of(profile)
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
            for t in pool_targets(self.topology(), self.reader, rest, capacity_bytes=q.capacity_bytes):
                out[t.name] = t
        return [out[n] for n in names]


    def plan_for(self, rank: int) -> Any:
        """This rank's PoolPlan (the rank plan over this machine's targets, computed once)."""
        from sactool.profile.hostpool import plan_for_rank, rank_plan

        profile = self.profile
        if self._plans is None:
            targets = self.live_targets()
            self._plans = (targets, rank_plan(profile, targets, check_pool=False))
        targets, plan = self._plans
        if not 0 <= rank < len(plan.slots):
            from sactool.errors import RecordError

            raise RecordError(f"rank {rank} is outside the profile's {len(plan.slots)} ranks (sglang.tp_size)",
                              "the profile's sglang.tp_size must match the --tp-size SGLang runs with")
        return plan_for_rank(profile, rank, targets, plan)


    def place(self, rank: int | None, n_bytes: int, *, rank_source: str = "", slice_used: int = 0) -> Any:
        """Allocate the pool of ``rank`` as the profile says; return the PlacedBuffer (kept alive) or
        None after logging why SGLang's allocator must be used (PlacementStop when ``strict``).
        ``slice_used``: bytes of the rank's devdax slice earlier allocations of the same pool took (the
        next one maps right after them)."""
        from sactool.errors import SactoolError

        strict = self.strict
        fail = stop if strict else fallback
        if rank is None:
            fail("cannot tell this process's rank (no SGLang TP group, no $SACTOOL_RANK/$RANK)")
            return None
        try:
            plan = self.plan_for(rank)
        except (SactoolError, OSError, ValueError) as e:
            fail(f"rank {rank}: {getattr(e, 'message', e)}")
            return None
        try:
            buf = self._allocate(plan, n_bytes, slice_used)
        except (SactoolError, OSError, ValueError) as e:
            from sactool.units import format_bytes

            fail(f"rank {rank}: placing {format_bytes(n_bytes)} on {plan.target} failed: {getattr(e, 'message', e)}")
            return None
        res = self.describe(plan, buf, rank_source)
        logger.warning(res.line)      # WARNING so it shows at SGLang's default log level
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
            return plan.slot.size_bytes, (f"its slice of {plan.target} at offset {plan.offset_bytes} "
                                          f"(rank plan, align {plan.align_bytes})")
        if plan.policy == "weighted_interleave" or plan.node is None:
            return None, ""
        from sactool.memory import nodes as memnodes

        f = memnodes.free_estimate(self.topology(), self.reader, plan.node)
        if f.bytes is None:
            return None, ""
        from sactool.units import format_bytes

        margin, room = f.margin_bytes, f.room_bytes or 0   # known: f.bytes is not None
        share = self._pinned_share(plan)
        if share is not None and share < room:   # pool.capacity_bytes pins what this rank's pool may take
            return share, (f"rank {plan.rank}'s share of {plan.target}'s pinned capacity: {format_bytes(share)} "
                           f"(pool.capacity_bytes over {len(plan.shared_with) + 1} rank(s))")
        return room, f"free memory of {plan.target}: {f.source}, minus {format_bytes(margin)} kept back"


    def _pinned_share(self, plan: Any) -> int | None:
        """NUMA mode with ``pool.capacity_bytes``: this rank's share of the pinned capacity (the rank plan's
        slot); None when the capacity is not pinned (the node's free memory decides)."""
        if plan.mode != "numa" or self.profile.pool.capacity_bytes is None:
            return None
        return plan.slot.size_bytes if plan.slot is not None else None


    def _allocate(self, plan: Any, n_bytes: int, slice_used: int = 0) -> Any:
        from sactool.host.sysfs import parse_cpulist
        from sactool.memory import allocate, map_devdax, map_shared
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
            slot = plan.slot
            if slot is None or slot.size_bytes is None:
                raise ValueError(f"no slice of {plan.target} is planned for rank {plan.rank} (device size unknown)")
            stand = standin_devices().get(plan.target)
            align = (stand["align_bytes"] if stand else plan.align_bytes) or 1
            need = -(-n_bytes // align) * align
            if slice_used + need > slot.size_bytes:
                raise ValueError(f"SGLang asks for {n_bytes} bytes" + (f" more ({slice_used} of the slice already hold "
                                 "earlier allocations of this pool)" if slice_used else "")
                                 + f", rank {plan.rank}'s slice of {plan.target} holds {slot.size_bytes} (rank plan)")
            offset = (slot.offset_bytes or 0) + slice_used
            if stand:
                buf = map_shared(stand["path"], os.stat(stand["path"]).st_size, stand["align_bytes"], n_bytes,
                                 offset_bytes=offset, name=plan.target,
                                 note=f"a file standing in for /dev/{plan.target} (${STANDIN_ENV})")
            else:
                buf = map_devdax(plan.target, n_bytes, offset_bytes=offset, reader=reader)
            self._dontfork(buf)
            buf.prefault_seconds = zero_fill(buf.mmap, buf.size_bytes, plan.prefault_threads, cpus)
            buf.verify(sample)
            return buf
        share = self._pinned_share(plan)
        if share is not None and slice_used + n_bytes > share:
            from sactool.units import format_bytes

            raise ValueError(f"SGLang asks for {format_bytes(n_bytes)}" + (f" more ({format_bytes(slice_used)} already "
                             "placed for this pool)" if slice_used else "") + f", rank {plan.rank}'s share of "
                             f"{plan.target}'s pinned capacity holds {format_bytes(share)} (pool.capacity_bytes over "
                             f"{len(plan.shared_with) + 1} rank(s))")
        kw: dict[str, Any] = dict(node=plan.node, policy="bind" if plan.policy == "weighted_interleave" else plan.policy,
                                  hugepages=plan.hugepages, prefault_threads=plan.prefault_threads,
                                  prefault_cpus=cpus, check_free=True, verify_sample=sample, reader=reader)
        if plan.policy == "weighted_interleave":
            kw["weights"] = dict(plan.interleave_weights)
        buf = allocate(n_bytes, **kw)
        self._dontfork(buf)
        return buf


    def describe(self, plan: Any, buf: Any, rank_source: str = "") -> PoolResult:
        r = buf.report or buf.verify(VERIFY_ALL_PAGES_UP_TO)
        where = ", ".join(f"node{k}: {v}" if k >= 0 else f"errno{-k}: {v}" for k, v in sorted(r.node_pages.items()))
        checked = "all" if r.pages_checked >= r.pages_total else f"a sample of {r.pages_checked} of {r.pages_total}"
        stand = " (a DRAM node stood in for CXL: pool.stand_in)" if plan.stand_in and plan.mode == "numa" else ""
        if plan.mode == "devdax":
            expect = (f"{r.verified_fraction:.1%} of {checked} pages on "
                      f"{', '.join(f'node{n}' for n in r.expected_nodes)}" if r.expected_nodes
                      else f"{checked} pages asked for (no target node known)")
            line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                    f"on {plan.target}, {buf.hugepages}: move_pages {expect} [{where}], zero-filled in "
                    f"{buf.prefault_seconds:.2f} s by {plan.prefault_threads} threads")
        else:
            line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                    f"on {plan.target}{stand}, policy {buf.policy}, hugepages {plan.hugepages}: verified "
                    f"{r.verified_fraction:.1%} of {checked} pages on {', '.join(f'node{n}' for n in r.expected_nodes)} "
                    f"[{where}], huge-page bytes {r.hugepage_bytes}, prefault {buf.prefault_seconds:.2f} s "
                    f"by {plan.prefault_threads} threads")
        if plan.mode == "devdax":
            gpu = f" (GPU {plan.slot.gpu})" if plan.slot is not None else ""
            line += (f"; devdax slice{gpu} at offset {buf.offset_bytes} of {buf.path}"
                     + (" (a file standing in for the device)" if any("standing in" in n for n in buf.notes) else "")
                     + f", {len(plan.shared_with) + 1} rank(s) share {plan.target}; "
                     "move_pages may not report device-DAX pages (cudaHostRegister of such memory is unverified "
                     "here, docs/sources.md, SGLang §6.5)")
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


