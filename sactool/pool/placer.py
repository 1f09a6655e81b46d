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
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from typing import Any

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
        """Unmap every buffer placed (tests; a serving process keeps them until it exits)."""
        for b in self._keep:
            b.close()
        self._keep.clear()

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


    def place(self, rank: int | None, n_bytes: int, *, rank_source: str = "", slice_used: int = 0) -> Any:
        """Allocate the pool of ``rank`` as the spec says; return the PlacedBuffer (kept alive) or
        None after logging why the engine's allocator must be used (PlacementStop when ``strict``).
        ``slice_used``: bytes of the rank's devdax slice earlier allocations of the same pool took (the
        next one maps right after them)."""
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
            buf = self._allocate(plan, n_bytes, slice_used)
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
            return plan.slot.size_bytes, (f"its slice of {plan.target} at offset {plan.offset_bytes} "
                                          f"(rank plan, align {plan.align_bytes})")
        if plan.policy == "weighted_interleave" or plan.node is None:
            return None, ""
        from sactool.pool.readings import node_room

        now = node_room(self.topology(), self.reader, plan.node)   # a momentary reading, taken now
        if now.bytes is None:
            return None, ""
        from sactool.units import format_bytes

        room = now.bytes
        share = self._pinned_share(plan)
        if share is not None and share < room:   # pool.capacity_bytes pins what this rank's pool may take
            return share, (f"rank {plan.rank}'s share of {plan.target}'s pinned capacity: {format_bytes(share)} "
                           f"(pool.capacity_bytes over {len(plan.shared_with) + 1} rank(s))")
        return room, f"free memory of {plan.target}: {now.source}"


    def _pinned_share(self, plan: Any) -> int | None:
        """NUMA mode with ``pool.capacity_bytes``: this rank's share of the pinned capacity (the rank plan's
        slot); None when the capacity is not pinned (the node's free memory decides)."""
        if plan.mode != "numa" or self.spec.settings.capacity_bytes is None:
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
                raise ValueError(f"{self.engine} asks for {n_bytes} bytes" + (f" more ({slice_used} of the slice already hold "
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

            raise ValueError(f"{self.engine} asks for {format_bytes(n_bytes)}" + (f" more ({format_bytes(slice_used)} already "
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
        if plan.mode == "devdax":   # placement = the mapping (/proc/self/maps); move_pages says ENOENT there
            m = buf.mapping
            expect = ("mapping verified (/proc/self/maps: the device at the slice's offset, on its align)"
                      if m is not None and m.verified else
                      f"mapping NOT as planned: {m.reason if m is not None else 'not checked'}")
            line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                    f"on {plan.target}, {buf.hugepages}: {expect}, zero-filled in "
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


