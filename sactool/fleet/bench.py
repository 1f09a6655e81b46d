"""``mpirun -n N … sactool bench gather|latency|bandwidth|loaded``: the same kernels on every rank,
each sample starting at an MPI barrier, swept over 1, 2, 4, … N active ranks.

Order of work (every stage is one :meth:`Fleet.agree`, so an error on any rank stops all of them
at the same point, before anything expensive where possible):

1. options: every rank's options must be identical (node, sizes, seeds, preset, …) — refused
   otherwise, before measuring;
2. local checks: the node exists here and holds memory, CPUs, free memory for this machine's ranks;
   for a devdax device (``--node daxX.Y``), the ranks of one machine each take their own aligned,
   disjoint slice of it (:func:`dax_slices`: the rank plan's one rule, the one serve and the
   plug-in follow) and the buffer must fit the slice; each rank knows its place from the exchange
   (ranks grouped by machine, MPI's ``COMM_TYPE_SHARED`` local rank);
3. placement: each rank maps and verifies its own buffer on the node or its slice of the device
   (ranks of one machine split its CPU node's CPUs; when there are fewer CPUs than ranks they share
   them, and the record says so);
4. the sweep: for k = 1, 2, 4, … N the first k ranks of the activation order (round-robin over
   hosts, so 2 active ranks are on 2 hosts when there are 2) calibrate together and agree on one
   repetition count (the largest); then the rounds run every (k, configuration) unit in rotated
   order, so drift hits every step of the curve alike; before every sample all N ranks meet at a
   barrier and the k active ones start together while the others wait. After each round rank 0
   gathers the samples and (with ``--out``) rewrites the record, so a finished round of every step
   is on disk whatever happens next.

Ctrl-C on any rank: the running sample ends, the next barrier stops every rank, rank 0 writes the
finished rounds (``complete: false``) and all exit 130.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from sactool import records
from sactool.inputfile import read_input
from sactool.errors import ExitCode, Interrupted, TopologyError, UsageError
from sactool.fleet.mpi import Fleet, FleetError, FleetInterrupted
from sactool.fleet.record import activation_order, build_record, standard_result, sweep_steps
from sactool.fleet.daxslice import check_fits_slice, dax_pool_device, fleet_slices
from sactool.fleet.sweep import sweep_sizes

FLEET_TESTS = ("gather", "latency", "bandwidth", "loaded")

Writer = Callable[[dict], None]


def canonical_options(opts) -> dict[str, Any]:
    """Every option that changes what is measured (a trace by its content)."""
    d = asdict(opts)
    d.pop("protocol", None)
    if opts.trace:
        try:
            d["trace"] = "sha256:" + hashlib.sha256(read_input(opts.trace, what="trace")).hexdigest()
        except OSError as e:
            d["trace"] = f"unreadable: {e.strerror}"
    return d


def check_agreement(canon: list[dict[str, Any]]) -> None:
    """UsageError naming the first option and rank that differ from rank 0's."""
    for r, c in enumerate(canon[1:], start=1):
        for k in canon[0]:
            if c.get(k) != canon[0].get(k):
                raise UsageError(f"ranks disagree on the options: rank {r} has {k}={c.get(k)!r}, "
                                 f"rank 0 has {k}={canon[0].get(k)!r}",
                                 "give every rank the same sactool bench arguments")


def split_cpus(cpus: tuple[int, ...], local_rank: int, local_size: int) -> tuple[tuple[int, ...], bool]:
    """This rank's share of its machine's CPUs; (cpus, shared) — shared when ranks outnumber CPUs."""
    n = len(cpus)
    if n >= local_size:
        lo, hi = local_rank * n // local_size, (local_rank + 1) * n // local_size
        return tuple(cpus[lo:hi]), False
    return (cpus[local_rank % n],), True


class _Local:
    """What one rank holds: its placement, its measures, its samples of the running step."""

    def __init__(self):
        self.buf = None
        self.measures: list = []
        self.warnings: list[dict] = []
        self.info: dict[str, Any] = {}
        self.dax_slot = None           # devdax: this rank's RankSlot of the device


def _resolve(opts, reader) -> dict[str, Any]:
    """Stage 1 on every rank: the memory node here (or the devdax device and its facts) and the CPUs
    this process may use near it. A recorded topology is refused here for a node; for a devdax
    device only after the ranks' slices are planned (:func:`_prepare`), so the refusal shows them."""
    from sactool.bench import api
    from sactool.memory.nodes import check_memory_node, topology

    if len(opts.tests) != 1 or opts.tests[0] not in FLEET_TESTS:
        raise UsageError(f"a fleet bench runs one test, not {opts.command!r}",
                         f"use one of: {', '.join(FLEET_TESTS)} (each contention sweep measures one test)")
    topo = topology(reader)
    if opts.dax:
        from sactool.pool.targets import target_facts

        name = opts.dax.rsplit("/", 1)[-1]
        dev = next((d for d in topo.dax_devices if d.name == name), None)
        if dev is None or dev.mode != "devdax":
            from sactool.memory import map_devdax

            map_devdax(opts.dax, reader=reader)   # the single-host bench's errors: missing, system-ram, unbound
        if dev is None:
            raise TopologyError(f"{name} is not a DAX device here", "see 'sactool probe'")
        (target,) = target_facts(topo, reader, [name])
        if not target.capacity_bytes or dev.target_node is None:
            raise TopologyError(f"{name} reports no size or no target node", "see 'sactool probe'")
        res = {"topo": topo, "mem": dev.target_node, "dax": target, "cpu_node": target.cpu_node, "node_cpus": ()}
        if topo.live:
            res["cpu_node"], res["node_cpus"] = api.resolve_cpus(topo, dev.target_node, opts.cpus)
        return res
    if not topo.live:
        raise TopologyError(f"the topology comes from a recording ({topo.sysfs_root}), not this system",
                            "sactool bench measures the running machine: drop --sysfs-root")
    mem = opts.node if opts.node is not None else topo.verdict.pool_nodes[0]
    check_memory_node(topo, mem)
    cpu_node, node_cpus = api.resolve_cpus(topo, mem, opts.cpus)
    return {"topo": topo, "mem": mem, "cpu_node": cpu_node, "node_cpus": tuple(node_cpus), "dax": None}


def rank_cpus(mine: tuple[int, ...], same_machine: list[tuple[int, ...]], local_rank: int) -> tuple[tuple[int, ...], bool]:
    """This rank's CPUs. ``same_machine``: the CPU sets of all ranks on this machine, by local rank.
    Pairwise disjoint sets mean the launcher bound each rank (``mpirun`` without
    ``--oversubscribe`` binds to cores): keep them. Otherwise split the set among the local ranks."""
    sets = [set(c) for c in same_machine]
    if all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:]):
        return mine, False
    return split_cpus(mine, local_rank, len(same_machine))


def _prepare(fleet: Fleet, opts, reader, res: dict, cpus: tuple[int, ...], shared: bool) -> tuple[_Local, Any]:
    """Stage 2: threads, sizes, free memory for this machine's ranks, indices."""
    from sactool.bench import api, env
    from sactool.bench.protocol import PRESETS
    from sactool.host.machine import machine_block
    from sactool.memory.nodes import free_estimate

    topo, mem, cpu_node, node_cpus = res["topo"], res["mem"], res["cpu_node"], res["node_cpus"]
    loc = _Local()
    threads = opts.threads or (len(cpus),)
    if max(threads) > len(cpus):
        raise UsageError(f"{max(threads)} threads per rank but this rank has {len(cpus)} CPUs "
                         f"({fleet.local_size} ranks share node{cpu_node}'s {len(node_cpus)})",
                         "pass fewer --threads, or start fewer ranks per machine")
    rule = _buffer_rule(opts, topo, reader, mem, cpu_node, node_cpus, res, fleet.local_size)
    loc.warnings.extend(rule.warnings)
    size = rule.size_bytes
    llc = rule.cache.bytes if rule.cache else env.ASSUMED_LLC_BYTES
    api._validate(opts, size, llc)
    if res["dax"] is not None:
        loc.dax_slot = res["slice"]
        check_fits_slice(res["slice"], size, res["dax"].capacity_bytes)
    else:
        _check_fits_all(free_estimate(topo, reader, mem), size, fleet.local_size)
    if shared:
        loc.warnings.append(records.warning("cpus_shared", f"{fleet.local_size} ranks share the "
                             f"{len(node_cpus)} CPUs of node{cpu_node} on {fleet.machine}",
                             "figures with more active ranks than CPUs include CPU time-sharing "
                                     "(see on_cpu_fraction); use one rank per CPU"))
    kind = topo.node(mem).kind if res["dax"] is None else "devdax"
    stand_in = None
    if res["dax"] is None and (topo.verdict.stand_in or kind != "cxl"):
        stand_in = {"node": mem, "kind": kind, "stands_in_for": "cxl",
                    "reason": topo.verdict.reason if topo.verdict.stand_in else f"node{mem} is {kind}, not CXL memory"}
    gather_idx = api._prepare_gather(opts, size, llc) if opts.tests[0] == "gather" else []
    loc.info = {"rank": fleet.rank, "host": fleet.host, "machine": fleet.machine, "local_rank": fleet.local_rank,
                "memory_node": mem, "cpu_node": cpu_node, "cpus": list(cpus),
                "threads": list(threads), "size_bytes": size, "llc_bytes": llc, "buffer_rule": rule.to_data(),
                "stand_in": stand_in,
                "pool_device": (pool_device(topo, reader, mem, fleet.machine) if res["dax"] is None
                                else dax_pool_device(topo, reader, res["dax"], fleet.machine)),
                "machine_block": machine_block(reader)}
    if res["dax"] is not None:
        loc.info["dax_slice"] = dict(res["slice"], buffer_bytes=size)
    proto = opts.protocol or PRESETS[opts.preset]
    return loc, (topo, mem, cpus, threads, llc, size, gather_idx, proto)


def _buffer_rule(opts, topo, reader, mem: int, cpu_node: int, node_cpus, res: dict, ranks_here: int):
    """One rank's buffer (:mod:`sactool.bench.sizing`): ``--size`` as given (warned inside or near the
    cache), else 8x the last-level cache of the node's CPUs, at least the preset's size, cut to this
    machine's ranks' share of the node's free memory (a DAX slice: its size)."""
    from sactool.bench import api, sizing
    from sactool.memory.nodes import free_estimate

    cache = sizing.last_level_cache(reader, node_cpus)
    where = f"node{cpu_node}'s CPUs"
    if res["dax"] is not None:
        room = res["slice"].get("size_bytes")
    else:
        free = free_estimate(topo, reader, mem).room_bytes
        room = None if free is None else free // max(1, ranks_here)
    if opts.size_bytes:
        return sizing.check_given(opts.size_bytes, cache, room, where=where, refuse_in_cache=False, code="in_cache",
                                  option="--size", what="memory")
    return sizing.derive(cache, room, where=where, floor=api.PRESET_SIZES.get(opts.preset, 1 << 30), code="in_cache",
                         option="--size")


def _check_fits_all(free, size: int, ranks_here: int) -> None:
    """All of this machine's ranks' buffers must fit its node; the hint gives the per-rank --size."""
    from sactool.errors import CapacityError
    from sactool.memory import nodes
    from sactool.units import format_bytes

    try:
        nodes.check_fits(free, size * ranks_here, what=f"{ranks_here} buffers (one per rank on this machine)")
    except CapacityError as e:
        if ranks_here == 1 or free.bytes is None:
            raise
        per = (free.room_bytes or 0) // ranks_here   # the check's own rule (memory.nodes: CPU-less nodes keep 3 %)
        raise CapacityError(e.message, f"use --size {format_bytes(per).replace(' ', '')} or less (per rank), or fewer ranks "
                                       "per machine") from None


def pool_device(topo, reader, mem: int, machine: str) -> dict[str, Any]:
    """What physical memory node ``mem`` is, so hosts sharing it can be told: the serials of the CXL
    memdevs behind it, or — for DRAM standing in — this machine (boot id) and node."""
    from sactool.fleet.poolmap import norm_serial
    from sactool.memory.nodes import free_estimate

    node = topo.node(mem)
    free = free_estimate(topo, reader, mem)
    serials = sorted({s for s in (norm_serial(m.serial) for m in topo.memdevs_of_node(mem)) if s})
    if serials:
        return {"kind": "cxl", "key": "cxl:" + "+".join(serials), "memdev_serials": serials,
                "node": mem, "capacity_bytes": node.mem_total_bytes, "free_bytes": free.bytes,
                "capacity_source": f"node{mem}/meminfo MemTotal"}
    boot = reader.str("proc/sys/kernel/random/boot_id") or "unknown-boot"
    return {"kind": node.kind, "key": f"{node.kind}:{machine}:{boot}:node{mem}", "memdev_serials": [],
            "node": mem, "capacity_bytes": node.mem_total_bytes, "free_bytes": free.bytes,
            "capacity_source": f"node{mem}/meminfo MemTotal; free: {free.source}"}


def _place(loc: _Local, prep, opts) -> None:
    from sactool.bench.api import _buffer_warnings
    from sactool.memory import allocate

    topo, mem, cpus, threads, llc, size, gather_idx, proto = prep
    if loc.dax_slot is not None:     # this rank's own slice of the device, as the plug-in maps a rank's pool
        from sactool.memory import map_devdax
        from sactool.memory.placed import PAGE_SIZE, prefault

        loc.buf = map_devdax(opts.dax, size, offset_bytes=loc.dax_slot["offset_bytes"])
        prefault(loc.buf.mmap, loc.buf.size_bytes, PAGE_SIZE, len(cpus), cpus)
        loc.buf.verify(4096)
    else:
        loc.buf = allocate(size, node=mem, hugepages=opts.hugepages, prefault_threads=len(cpus), prefault_cpus=cpus,
                           topo=topo)
    bdesc = loc.buf.describe()
    loc.info["buffer"] = bdesc
    loc.warnings.extend(_buffer_warnings(bdesc, opts, mem, size, llc))
    loc.measures = build_measures(loc.buf, opts, list(cpus), threads, gather_idx, loc.warnings)


def build_measures(buf, opts, cpus: list[int], threads, gather_idx, warnings: list) -> list:
    """The configurations of the one test, built as ``sactool bench`` builds them."""
    from sactool.bench import suite

    test = opts.tests[0]
    if test == "bandwidth":
        words = buf.array("uint64")
        return [suite.sequential(words, cpus, t, op) for op in ("read", "write", "copy") for t in threads]
    if test == "gather":
        src = buf.array("uint8")
        return [suite.gather(src, cpus, t, rb, opts.topk, d, idx, opts.pattern, seed=opts.seed)
                for rb, idx in gather_idx for d in (opts.prefetch or (suite.default_prefetch(rb),)) for t in threads]
    words = buf.array("uint64")
    half = words.size // suite.WPL // 2
    if test == "latency":
        pl = suite.build_chain(words, 0, half, page_local=True, seed=opts.seed)
        rnd = suite.build_chain(words, half, half, page_local=False, seed=opts.seed + 1)
        return [suite.latency(words, pl, cpus[0], "page_local"), suite.latency(words, rnd, cpus[0], "random")]
    rnd = suite.build_chain(words, half, half, page_local=False, seed=opts.seed + 1)
    if len(cpus) < 2:
        warnings.append(records.warning("loaded_needs_cpus", "loaded latency needs >= 2 CPUs per rank (one "
                         "chaser, the rest readers): this rank chases only; the load comes from the other ranks",
                         "give each rank at least two CPUs (fewer ranks per machine, or --cpus)"))
    return [suite.loaded(words, rnd, cpus, 0 if len(cpus) > 1 else None)]


def _sample(m) -> dict[str, Any]:
    """One timed sample of measure ``m`` at its agreed repetitions."""
    n_cpu, n_extra = len(m.cpu), len(m.extra)
    t0 = time.perf_counter_ns()
    work = m.cfg.run(m.cfg.reps)
    secs = (time.perf_counter_ns() - t0) / 1e9
    s: dict[str, Any] = {"seconds": secs, "work": float(work)}
    if len(m.cpu) > n_cpu:
        s["thread_cpu_seconds"] = list(m.cpu[-1])
    if len(m.extra) > n_extra:
        s["extra"] = float(m.extra[-1])
    return s


def _params(m) -> dict[str, Any]:
    """A configuration's parameters without this rank's CPU ids (those are per rank)."""
    out = {k: v for k, v in m.params.items() if k not in ("cpus", "reader_cpus", "chaser_cpu")}
    if m.test in ("read", "write", "copy"):
        out["op"] = m.test
    return out


def run_fleet_bench(fleet: Fleet, opts, *, reader=None, write: Writer | None = None,
                    progress: Callable[[str, int, int], None] | None = None,
                    notify: Callable[[str], None] | None = None) -> dict | None:
    """Run the sweep; rank 0 returns the record (``write`` is called with it after every finished
    step and at the end), other ranks None. Raises FleetError / Interrupted on every rank alike.
    Between the checks and the placement every machine's measurement lock is taken for its ranks
    (:mod:`sactool.fleet.lock`; ``notify``: rank 0's line saying for whom the job waits) and held until
    the buffers are unmapped."""
    from sactool.fleet.lock import HeldLocks, hold_machines
    from sactool.host.sysfs import SysfsReader

    reader = reader or SysfsReader()
    canon = fleet.agree(lambda: canonical_options(opts))
    try:
        check_agreement(canon)
    except UsageError as e:
        raise fleet.everywhere(e) from None
    state: dict[str, Any] = {"steps": [], "complete": False, "ranks": None, "measured": None}
    loc: _Local | None = None
    held: HeldLocks | None = None
    try:
        with fleet.signals():
            loc, prep = _prepare_local(fleet, opts, reader)
            held = hold_machines(fleet, wait=opts.wait, what=f"'sactool bench {opts.command}' under mpirun",
                                 notify=notify if fleet.is_root else None)
            loc.info["measurement_lock"] = held.block
            state["measured"] = {"start_utc": _utc_us(), "end_utc": None}

            def placed(loc: _Local = loc) -> dict[str, Any]:
                _place(loc, prep, opts)
                return dict(loc.info, warnings=loc.warnings)

            state["ranks"] = fleet.agree(placed)
            keys = fleet.agree(lambda: [m.cfg.key for m in loc.measures])
            if any(k != keys[0] for k in keys):
                raise fleet.everywhere(FleetError("ranks built different configurations",
                                                  "give every rank the same options"))
            _sweep(fleet, opts, loc, prep[-1], state, write, progress)
            state["complete"] = True
    except FleetInterrupted as e:
        _finish(fleet, opts, loc, state, write)
        if fleet.is_root:
            err = Interrupted(("terminated: " if e.exit_code == ExitCode.TERMINATED else "interrupted: ")
                              + _kept(state, write), "rerun to complete the sweep")
            err.exit_code = e.exit_code
            raise err from None
        raise
    except FleetError as e:
        if state["ranks"] is not None:
            _finish(fleet, opts, loc, state, write)
        if e.local:  # this rank gave up waiting: the others may hang, so end the job (after saying why)
            import sys

            from sactool.textsafe import printable

            sys.stderr.write(printable(f"error: {e.message}\nhint: {e.hint}\n"))
            sys.stderr.flush()
            fleet.abort(int(e.exit_code))
        raise
    finally:
        try:
            if loc is not None and loc.buf is not None:
                from sactool.memory.placed import close_after

                loc.measures = []   # their closures hold views of the buffer: drop them, then unmap it
                close_after(loc.buf)
        finally:
            if held is not None:
                held.release()   # after the buffer is unmapped: a waiting bench then finds the memory free
    return _finish(fleet, opts, loc, state, write)


def _utc_us() -> str:
    """UTC now to the microsecond (``measured``: the job's locked window, on rank 0's clock)."""
    from sactool.bench.api import _utc_us as now

    return now()


def _prepare_local(fleet: Fleet, opts, reader):
    holder: dict[str, Any] = {}

    def resolve():
        holder["res"] = _resolve(opts, reader)
        t = holder["res"]["dax"]
        return (fleet.machine, fleet.local_rank, holder["res"]["node_cpus"],
                None if t is None else (t.name, t.capacity_bytes, t.align_bytes))

    seen = fleet.agree(resolve)
    mine = holder["res"]["node_cpus"]
    local = [c for m, _, c, _ in sorted((x for x in seen if x[0] == fleet.machine), key=lambda x: x[1])]
    cpus, shared = rank_cpus(mine, local, fleet.local_rank)

    def prep():
        res = holder["res"]
        if res["dax"] is not None:
            slices = fleet_slices(seen)
            res["slice"] = slices[fleet.rank]
            if not res["topo"].live:
                raise TopologyError(
                    f"the topology comes from a recording ({res['topo'].sysfs_root}), not this system; the slices "
                    "the ranks would map: " + "; ".join(
                        f"rank {r} ({s['machine']}): {s['device']} [{s['offset_bytes']}, "
                        f"{s['offset_bytes'] + s['size_bytes']})" for r, s in enumerate(slices)),
                    "sactool bench measures the running machine: drop --sysfs-root")
        holder["loc"], holder["prep"] = _prepare(fleet, opts, reader, res, cpus, shared)
        return True

    fleet.agree(prep)
    return holder["loc"], holder["prep"]


def _kept(state: dict, write) -> str:
    n = state.get("rounds_done", 0)
    return (f"{n} finished round{'s' if n != 1 else ''} of every contention step kept"
            + ("" if write else " (no --out given)"))


def _sweep(fleet: Fleet, opts, loc: _Local, proto, state: dict, write, progress) -> None:
    """Calibrate every (active-rank count, configuration) unit, then run the rounds with the units
    interleaved in rotated order — 1, 2, 4 ranks × every configuration, then rotated by one — so
    drift on the machine hits every step of the curve alike (docs/sources.md, style §4). After every round rank 0
    gathers the samples and rewrites the record."""
    order = activation_order([r["host"] for r in state["ranks"]])
    units = [(k, m) for k in sweep_sizes(fleet.size) for m in loc.measures]
    reps: dict[tuple[int, str], int] = {}
    for k, m in units:  # calibrate together: the contended sample must still be long enough
        active = fleet.rank in order[:k]
        fleet.exchange()
        if active:
            _calibrate(fleet, m, proto)
        reps[(k, m.cfg.key)] = max(fleet.exchange(m.cfg.reps if active else 0))
    mine: dict[tuple[int, str], list] = {(k, m.cfg.key): [] for k, m in units}
    done, total = 0, proto.rounds * len(units)
    for r in range(proto.rounds):
        j = r % len(units)
        for k, m in units[j:] + units[:j]:
            m.cfg.reps = reps[(k, m.cfg.key)]
            fleet.exchange()  # the barrier every sample starts at (and where Ctrl-C stops all)
            if fleet.rank in order[:k]:
                try:
                    mine[(k, m.cfg.key)].append(_sample(m))
                except Exception as e:
                    raise fleet.fail(e) from e
            done += 1
            if progress and fleet.is_root:
                progress(f"{k} active rank{'s' if k > 1 else ''}: {m.cfg.key}", done, total)
        got = fleet.exchange({"samples": [[k, key, v] for (k, key), v in mine.items() if v],
                              "params": {m.cfg.key: _params(m) for m in loc.measures},
                              "tests": {m.cfg.key: m.test for m in loc.measures}})
        if fleet.is_root:
            state["results"] = [res for m in loc.measures
                                if (res := standard_result(m, mine[(1, m.cfg.key)], state["ranks"][0])) is not None]
            state["steps"] = sweep_steps(state["ranks"], order, got)
            state["rounds_done"] = r + 1
            state["measured"]["end_utc"] = _utc_us()
            if write:
                write(build_record(state, opts, proto, complete=False))


def _calibrate(fleet: Fleet, m, proto) -> None:
    from sactool.bench.protocol import _timed, calibrate

    clock = time.perf_counter_ns
    try:
        if m.cfg.first_call_seconds is None:
            m.cfg.first_call_seconds, _ = _timed(m.cfg, 1, clock)
        for _ in range(proto.warmup):
            _timed(m.cfg, 1, clock)
        calibrate(m.cfg, proto, clock)
    except Exception as e:
        raise fleet.fail(e) from e


def _finish(fleet: Fleet, opts, loc, state: dict, write) -> dict | None:
    if not fleet.is_root or state["ranks"] is None:
        return None
    from sactool.bench.protocol import PRESETS

    if state.get("measured") and not state["complete"]:   # stopped early (before the finally releases the lock)
        state["measured"]["end_utc"] = _utc_us()
    rec = build_record(state, opts, opts.protocol or PRESETS[opts.preset], state["complete"])
    if write:
        write(rec)
    return rec


__all__ = ["run_fleet_bench", "FLEET_TESTS", "canonical_options", "check_agreement", "activation_order",
           "split_cpus", "rank_cpus", "pool_device", "build_measures"]
