"""``run_bench()``: resolve nodes and CPUs, place and verify the buffer, measure, build the record.

Validation happens before anything expensive (docs/sources.md, style §10). Ctrl-C keeps every finished sample:
the record comes back with ``complete: false`` and the caller exits 130 after writing it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable

from sactool import records
from sactool.bench import record as R
from sactool.bench.catalog import CHAIN_TESTS, TESTS  # re-exported: bench.api.TESTS
from sactool.bench.protocol import PRESETS, Protocol
from sactool.bench.trust import ON_CPU_MIN  # the one cache-and-noise rule (re-exported here)
from sactool.errors import SactoolError, TopologyError, UsageError
from sactool.host.sysfs import SysfsReader, format_cpulist
from sactool.units import format_bytes, format_size_arg


PRESET_SIZES = {"fast": 512 << 20, "default": 1 << 30, "rigorous": 4 << 30}
"""Smallest default buffer per preset; the default is 8× the measuring CPUs' last-level cache where that
is larger (each half, one chase chain, ≥ 4× the cache) and what the node holds where it is less
(:func:`sactool.bench.sizing.derive`)."""


HIGH_RSD = 0.10
"""Relative stdev above which a result is flagged (policy: 10%, hyperfine warns on outliers similarly)."""


@dataclass(frozen=True)
class BenchOptions:
    """What to measure. ``node``: memory node (None: the pool node of ``sactool probe``);
    ``cpus``: CPU ids (None: the CPU node nearest the memory node); ``size_bytes``: buffer
    (None: by preset); ``threads``: thread counts for bandwidth/gather sweeps; ``record_bytes``,
    ``prefetch`` (records; None: per-size default), ``topk``, ``pattern``/``trace`` for gathers."""

    tests: tuple[str, ...] = TESTS
    node: int | None = None
    dax: str | None = None
    cpus: tuple[int, ...] | None = None
    size_bytes: int | None = None
    threads: tuple[int, ...] | None = None
    record_bytes: tuple[int, ...] | None = None
    topk: int = 2048
    prefetch: tuple[int, ...] | None = None
    pattern: str = "uniform"
    trace: str | None = None
    hugepages: str = "thp"
    preset: str = "default"
    seed: int = 1
    command: str = "all"
    protocol: Protocol | None = None
    size_floor_bytes: int | None = None     # smallest derived default (None: PRESET_SIZES of the preset)
    size_option: str = "--size"             # the option that sets size_bytes, for hints
    wait: bool = True                       # another sactool measurement running: wait for it (False: refuse)


Progress = Callable[[str, int, int], None]




def resolve_cpus(topo, mem_node: int, cpus: tuple[int, ...] | None) -> tuple[int, tuple[int, ...]]:
    """(cpu_node, cpus): given CPUs must be online and allowed; default: nearest CPU node's CPUs."""
    from sactool.memory.nodes import check_cpu_node

    allowed = os.sched_getaffinity(0)
    if cpus:
        bad = [c for c in cpus if c not in allowed]
        if bad:
            raise UsageError(f"CPU {bad[0]} is not available to this process (allowed: {format_cpulist(sorted(allowed))})",
                             "pick CPUs from 'sactool probe' that this process may run on")
        owner = next((n.id for n in topo.nodes if cpus[0] in n.cpus), None)
        return (owner if owner is not None else -1), tuple(cpus)
    if mem_node in topo.node_ids or any(d.target_node == mem_node for d in topo.dax_devices):
        cpu_node = topo.nearest_cpu_node(mem_node)  # a devdax target: its device's socket
    else:
        cpu_node = next(n.id for n in topo.nodes if n.has_cpu and n.cpus)
    node = check_cpu_node(topo, cpu_node)
    use = tuple(c for c in node.cpus if c in allowed)
    if not use:
        raise TopologyError(f"none of node{cpu_node}'s CPUs is available to this process",
                            "pass --cpus with CPUs this process may use")
    return cpu_node, use


CHAIN_PAGE_BYTES = 4096
"""The page-local chain visits whole 4 KiB pages (bench/suite.py ``PAGE``)."""
MIN_CHAIN_BUFFER_BYTES = 2 * CHAIN_PAGE_BYTES
"""Two chains of at least one page each."""


def _validate(opts: BenchOptions, size: int, llc: int) -> None:
    bad = [t for t in opts.tests if t not in TESTS]
    if bad:
        raise UsageError(f"unknown test {bad[0]!r}", f"use one of: {', '.join(TESTS)}, all")
    if opts.preset not in PRESETS:
        raise UsageError(f"unknown preset {opts.preset!r}", f"use one of: {', '.join(PRESETS)}")
    chained = [t for t in opts.tests if t in CHAIN_TESTS]
    if chained and size < MIN_CHAIN_BUFFER_BYTES:
        raise UsageError(f"a {size}-byte buffer is too small for the {'/'.join(chained)} test: its two pointer-chase "
                         f"chains (page-local and random) need at least one whole {CHAIN_PAGE_BYTES // 1024} KiB "
                         "page each",
                         f"use --size of at least {MIN_CHAIN_BUFFER_BYTES // 1024}KiB (for memory rather than cache "
                         "latency: at least 8x the last-level cache)")
    for r in opts.record_bytes or ():
        if r <= 0:
            raise UsageError(f"record size {r} must be positive", "e.g. --record-bytes 656")
        if r > size:
            raise UsageError(f"record size {r} B is larger than the buffer ({format_bytes(size)})", "use a larger --size")
        if opts.topk > size // r:
            raise UsageError(f"top-k {opts.topk} is larger than the {size // r} records of {r} B in the buffer",
                             "use a smaller --topk or a larger --size")
    if "convert" in opts.tests:
        for r in opts.record_bytes or ():
            if r % 8:
                raise UsageError(f"convert needs records of whole 8-byte words, got {r} B", "e.g. --record-bytes 1152")
    if opts.topk <= 0:
        raise UsageError(f"top-k {opts.topk} must be positive", "e.g. --topk 2048")
    for d in opts.prefetch or ():
        if d < 0:
            raise UsageError(f"prefetch distance {d} must be >= 0", "0 turns software prefetch off")
    for t in opts.threads or ():
        if t <= 0:
            raise UsageError(f"thread count {t} must be positive", "e.g. --threads 1,2")


def _thread_sweep(opts: BenchOptions, ncpu: int) -> list[int]:
    if opts.threads:
        bad = [t for t in opts.threads if t > ncpu]
        if bad:
            raise UsageError(f"{bad[0]} threads requested but only {ncpu} CPUs are in use",
                             "pass --cpus with more CPUs or fewer --threads")
        return sorted(set(opts.threads))
    seq = sorted({1, ncpu} | {2 ** k for k in range(1, 8) if 2 ** k < ncpu})
    return seq if ncpu > 4 else list(range(1, ncpu + 1))


def run_bench(opts: BenchOptions, *, reader: SysfsReader | None = None, progress: Progress | None = None,
              clock=None, notify: Callable[[str], None] | None = None) -> R.BenchRecord:
    """Measure on one (memory node, CPU set) pair and return the record (see :mod:`.record`).

    Stages: the memory node and CPUs; checks of the input and of the buffer's fit (before anything
    expensive); warnings about the memory and CPUs; gather indices (:func:`prepare`); the machine-wide
    measurement lock (:mod:`sactool.bench.lock`: wait for another sactool measurement, saying so through
    ``notify``, or refuse with ``opts.wait`` False); place, verify and measure; per-result warnings; the
    record (:func:`finish`)."""
    from sactool.bench.lock import measurement_lock

    p = prepare(opts, reader)
    results: list[dict] = []
    warnings = list(p.warnings)
    with measurement_lock(wait=opts.wait, notify=notify, what=f"'sactool bench {opts.command}'") as lock:
        busy_warning(p, warnings)
        if progress:
            progress(f"placing {format_bytes(p.size)} on " + (f"{p.dax['name']} (target node{p.mem})" if p.dax
                                                                 else f"node{p.mem}"), 0, 1)
        window = {"start_utc": _utc_us()}
        bdesc, complete = _place_and_measure(opts, p.topo, p.reader, p.mem, p.size, p.llc, p.proto, p.cpus, p.threads,
                                             p.gather_idx, results, warnings, progress, clock)
        window["end_utc"] = _utc_us()
    return finish(p, results, warnings, bdesc, complete, lock.to_data(), window)


@dataclass
class Prepared:
    """What :func:`run_bench` settles before the lock, for :func:`finish` and for measurements that reuse a
    placed buffer (:mod:`sactool.bench.quick`): the machine, the memory node and CPUs, the buffer rule
    and size, protocol, thread sweep, gather indices, and the warnings known before measuring."""

    opts: BenchOptions
    reader: SysfsReader
    topo: Any
    mem: int
    cpu_node: int
    cpus: tuple[int, ...]
    rule: Any               # sizing.BufferRule
    size: int
    llc: int
    proto: Protocol
    threads: list[int]
    stand_in: dict | None
    gather_idx: list
    dax: dict | None
    warnings: list[dict]


def prepare(opts: BenchOptions, reader: SysfsReader | None = None) -> Prepared:
    """Everything before the lock: nodes, CPUs, the buffer rule, the checks (the buffer must fit the
    node's free memory now), the stand-in note and the gather indices."""
    from sactool.bench import env
    from sactool.memory.nodes import topology

    reader = reader or SysfsReader()
    topo = topology(reader)
    if not topo.live:
        plan = _recording_plan(opts, topo, reader)
        raise TopologyError(f"the topology comes from a recording ({topo.sysfs_root}), not this system"
                            + (f"; {plan}" if plan else ""),
                            "sactool bench measures the running machine: drop --sysfs-root")
    mem = _memory_node(opts, topo, reader)
    cpu_node, cpus = resolve_cpus(topo, mem, opts.cpus)
    warnings: list[dict] = []
    rule = buffer_rule(opts, topo, reader, mem, cpu_node, cpus)
    warnings.extend(rule.warnings)
    size = rule.size_bytes
    llc = rule.cache.bytes if rule.cache else env.ASSUMED_LLC_BYTES
    _validate(opts, size, llc)
    proto = opts.protocol or PRESETS[opts.preset]
    threads = _thread_sweep(opts, len(cpus))
    if not opts.dax:  # refuse a buffer that cannot fit before building indices and chains
        from sactool.memory.nodes import check_fits, free_estimate

        check_fits(free_estimate(topo, reader, mem), size, option=opts.size_option)
    stand_in = _stand_in(opts, topo, mem, warnings)
    gather_idx = _prepare_gather(opts, size, llc) if "gather" in opts.tests else []
    return Prepared(opts, reader, topo, mem, cpu_node, cpus, rule, size, llc, proto, threads, stand_in, gather_idx,
                    _dax_block(opts, topo, mem), warnings)


def busy_warning(p: Prepared, warnings: list[dict]) -> None:
    """``cpus_busy`` when the measuring CPUs were over a quarter busy just before measuring."""
    from sactool.bench import env

    busy = env.busy_fraction(p.reader, p.cpus)
    if busy is not None and busy > 0.25:
        warnings.append(records.warning("cpus_busy", f"CPUs {format_cpulist(p.cpus)} were {busy:.0%} busy before "
                                        "measuring", "other work shares these CPUs: expect noise; rerun when the "
                                        "machine is idle"))


def finish(p: Prepared, results: list[dict], warnings: list[dict], bdesc: dict, complete: bool, lock: dict | None,
           window: dict) -> R.BenchRecord:
    """The record of a measurement on ``p``: per-result warnings, ``interrupted`` when cut short, every block."""
    opts, rule = p.opts, p.rule
    _result_warnings(results, p.mem, p.cpu_node, warnings,
                     llc=rule.cache.bytes if rule.cache and not rule.warnings else None)
    if not complete:
        warnings.append(records.warning("interrupted", "interrupted: finished samples are kept", "rerun to complete"))
    from sactool.host.machine import machine_block

    data = records.header(R.KIND, R.SCHEMA_VERSION)
    data.update({
        "machine": machine_block(p.reader), "command": opts.command, "tests": list(opts.tests),
        "protocol": p.proto.to_data(), "memory_node": p.mem, "dax_device": p.dax,
        "cpu_node": p.cpu_node if p.cpu_node >= 0 else None, "cpus": list(p.cpus), "stand_in": p.stand_in,
        "llc_bytes": p.llc, "buffer_rule": rule.to_data(), "buffer": bdesc, "results": results, "warnings": warnings,
        "complete": complete, "measurement_lock": lock, "measured": window,
    })
    return R.from_data(data)


def _utc_us() -> str:
    """UTC now to the microsecond (``measured``: when the locked measurement began and ended)."""
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def buffer_rule(opts: BenchOptions, topo, reader: SysfsReader, mem: int, cpu_node: int, cpus):
    """The buffer's size and why (:mod:`sactool.bench.sizing`): ``--size`` as given (warned inside or near
    the measuring CPUs' last-level cache: bench may measure a cache on purpose), else derived from that
    cache and node ``mem``'s free memory (a devdax device: its size)."""
    from sactool.bench import sizing

    cache = sizing.last_level_cache(reader, cpus)
    where = f"node{cpu_node}'s CPUs" if cpu_node >= 0 else f"CPUs {format_cpulist(cpus)}"
    room = None
    if opts.dax:
        dev = next((d for d in topo.dax_devices if d.name == opts.dax.rsplit("/", 1)[-1]), None)
        room = dev.size_bytes if dev is not None else None
    else:
        from sactool.memory.nodes import free_estimate

        room = free_estimate(topo, reader, mem).room_bytes
        proc, _ = sizing.process_room(reader)
        if proc is not None:
            room = proc if room is None else min(room, proc)
    if opts.size_bytes:
        return sizing.check_given(opts.size_bytes, cache, room, where=where, refuse_in_cache=False, code="in_cache",
                                  option=opts.size_option, what="memory")
    floor = opts.size_floor_bytes or PRESET_SIZES.get(opts.preset, 1 << 30)
    rule = sizing.derive(cache, room, where=where, floor=floor, code="in_cache", option=opts.size_option)
    if rule.warnings and cache is not None and room is not None:
        w = dict(rule.warnings[0], hint=_what_clears(topo, reader, mem, opts, max(floor, sizing.wanted(cache))))
        rule = replace(rule, warnings=(w,) + rule.warnings[1:])
    return rule


def _what_clears(topo, reader: SysfsReader, mem: int, opts: BenchOptions, want: int) -> str:
    """The hint of a default buffer the node cannot hold at the cache multiple: the nodes of the same kind
    that hold it (``--node N``), else what would make this one hold it; the figure measured here is
    kept, flagged with the cache's share."""
    from sactool.bench.sizing import CACHE_MULTIPLE
    from sactool.memory.nodes import free_estimate

    kind = topo.node(mem).kind if mem in topo.node_ids else None
    fits = []
    for n in topo.nodes:
        if n.id == mem or not n.mem_total_bytes or n.kind != kind:
            continue
        try:
            room = free_estimate(topo, reader, n.id).room_bytes
        except SactoolError:
            continue
        if room is not None and room >= want:
            fits.append(f"node{n.id}")
    if fits and not opts.dax:
        return (f"{', '.join(fits)} ({kind} memory too) hold{'s' if len(fits) == 1 else ''} {format_bytes(want)} "
                f"({CACHE_MULTIPLE}x the cache): --node {fits[0][4:]}; measured here, the figure stays flagged with the "
                "cache's share")
    grow = ("a larger device or region (interleave more CXL devices into one region: cxl create-region -w N)"
            if kind == "cxl" or opts.dax else f"free memory on node{mem}")
    return (f"{grow} holding {format_bytes(want)} ({CACHE_MULTIPLE}x the cache) clears it; measured as it is, the "
            "figure stays flagged with the cache's share")


def plan_bench(opts: BenchOptions, *, reader: SysfsReader | None = None) -> dict:
    """What ``run_bench`` would measure, sized and judged without measuring (``sactool bench --dry-run``):
    on this machine or on a recording (``--sysfs-root``). No lock is taken and nothing is placed.

    Returns ``{live, memory_node, cpu_node, cpus, tests, threads, buffer_rule, gather, warnings, text}``:
    the buffer rule (:mod:`sactool.bench.sizing`) and, per gather record size, the planned working set
    (``footprint_bytes``: the buffer's whole records, which the generated index stream reaches), its
    multiple of the measuring CPUs' last-level cache and whether it clears the trust rule
    (:data:`sactool.bench.sizing.CACHE_MULTIPLE`); where it cannot, the warning's hint names what will."""
    from sactool.bench.sizing import CACHE_MULTIPLE
    from sactool.bench.suite import DEFAULT_RECORDS
    from sactool.memory.nodes import topology

    reader = reader or SysfsReader()
    topo = topology(reader)
    if opts.dax:
        dev = next((d for d in topo.dax_devices if d.name == opts.dax.rsplit("/", 1)[-1]), None)
        if dev is None or dev.target_node is None:
            raise TopologyError(f"{opts.dax} is not a devdax device with a target node here", "see 'sactool probe'")
        mem = dev.target_node
    else:
        mem = opts.node if opts.node is not None else topo.verdict.pool_nodes[0]
        if mem not in topo.node_ids or not topo.node(mem).mem_total_bytes:
            raise TopologyError(f"node{mem} has no memory" + ("" if topo.live else " on the recorded machine"),
                                "pick a node with memory (see 'sactool probe')")
    if topo.live:
        cpu_node, cpus = resolve_cpus(topo, mem, opts.cpus)
    else:    # this process's CPU affinity says nothing about a recorded machine
        near = topo.dax_locality(opts.dax.rsplit("/", 1)[-1]).cpu_node if opts.dax else None
        cpu_node = near if near is not None else topo.nearest_cpu_node(mem)
        cpus = tuple(opts.cpus or topo.node(cpu_node).cpus)
    rule = buffer_rule(opts, topo, reader, mem, cpu_node, cpus)
    warnings = [dict(w) for w in rule.warnings]
    llc = rule.cache.bytes if rule.cache else None
    gathers = []
    if "gather" in opts.tests:
        for rb in opts.record_bytes or DEFAULT_RECORDS:
            n = rule.size_bytes // rb
            fp = n * rb
            multiple = fp / llc if llc else None
            gathers.append({"record_bytes": rb, "records": n, "footprint_bytes": fp,
                            "cache_multiple": None if multiple is None else round(multiple, 2),
                            "clears_rule": None if multiple is None else multiple >= CACHE_MULTIPLE})
    if llc and any(g["clears_rule"] is False for g in gathers) and not rule.warnings:
        from sactool.records import warning

        low = min(g["footprint_bytes"] for g in gathers)
        warnings.append(warning("in_cache", f"the planned gathers' working sets ({format_bytes(low)} and up) are under "
                                f"{CACHE_MULTIPLE}x the {format_bytes(llc)} last-level cache",
                                f"drop {opts.size_option}: the default is sized from the machine"))
    # a devdax device's memory is no node (its target_node is where it would go once onlined): name the device
    where = (f"DAX device {opts.dax.rsplit('/', 1)[-1]} (devdax, {format_bytes(dev.size_bytes or 0)})"
             if opts.dax and dev is not None else f"memory node{mem}")
    threads = _thread_sweep(opts, len(cpus))
    text = (f"{where} from CPUs {format_cpulist(cpus)} (node{cpu_node}): {'/'.join(opts.tests)} with "
            f"{', '.join(map(str, threads))} thread{'s' if threads != [1] else ''} over a buffer of {rule.rule}")
    if gathers and llc:
        g = gathers[0]
        text += (f"; gather working set {format_bytes(g['footprint_bytes'])} ({g['cache_multiple']:g}x the cache, "
                 + ("clears" if g["clears_rule"] else "under") + f" the {CACHE_MULTIPLE}x rule)")
    return {"live": topo.live, "memory_node": mem, "cpu_node": cpu_node, "cpus": list(cpus), "tests": list(opts.tests),
            "threads": _thread_sweep(opts, len(cpus)), "buffer_rule": rule.to_data(), "gather": gathers,
            "warnings": warnings, "text": text}


def _recording_plan(opts: BenchOptions, topo, reader: SysfsReader) -> str:
    """What bench would do on the machine a recording shows (:func:`plan_bench`) — or why it could not there
    (a node or DAX device the recording does not have) — as a clause of the refusal; "" where the recording
    does not tell."""
    if opts.dax:
        name = opts.dax.rsplit("/", 1)[-1]
        dev = next((d for d in topo.dax_devices if d.name == name), None)
        if dev is None:
            return f"there DAX device {name} does not exist (DAX devices: {', '.join(d.name for d in topo.dax_devices) or 'none'})"
        if dev.mode != "devdax":
            return (f"there {name} is in {dev.mode or 'no'} mode, not devdax"
                    + (f" (its memory is node{dev.target_node})" if dev.mode == "system-ram" else ""))
    elif opts.node is not None and opts.node not in topo.node_ids:
        return f"there node{opts.node} does not exist (NUMA nodes: {', '.join(f'node{n}' for n in topo.node_ids)})"
    try:
        return "there bench would measure " + plan_bench(opts, reader=reader)["text"]
    except (StopIteration, IndexError, KeyError, ValueError, TypeError, SactoolError):
        return ""


def _memory_node(opts: BenchOptions, topo, reader: SysfsReader) -> int:
    """The node measured: the devdax device's target node, ``--node``, or probe's pool node."""
    from sactool.memory.nodes import check_memory_node

    if opts.dax:
        dev = next((d for d in topo.dax_devices if d.name == opts.dax.rsplit("/", 1)[-1]), None)
        if dev is None or dev.mode != "devdax" or dev.target_node is None:
            from sactool.memory import map_devdax

            map_devdax(opts.dax, reader=reader)  # raises the precise error (missing, system-ram, …)
            raise TopologyError(f"{opts.dax} has no target node", "see 'sactool probe'")
        return dev.target_node
    mem = opts.node if opts.node is not None else topo.verdict.pool_nodes[0]
    check_memory_node(topo, mem)
    return mem


def _dax_block(opts: BenchOptions, topo, mem: int) -> dict | None:
    """The record's ``dax_device`` block for ``--node daxX.Y``: the device measured, its target node
    (``memory_node`` holds the same number) and whether that node is online — in devdax mode it is not:
    the memory is the device's, reached through its mapping."""
    if not opts.dax:
        return None
    name = opts.dax.rsplit("/", 1)[-1]
    dev = next((d for d in topo.dax_devices if d.name == name), None)
    return {"name": name, "path": opts.dax if opts.dax.startswith("/") else f"/dev/{name}", "target_node": mem,
            "target_node_online": mem in topo.node_ids, "region": dev.region if dev else None,
            "align_bytes": dev.align_bytes if dev else None}


def _stand_in(opts: BenchOptions, topo, mem: int, warnings: list[dict]) -> dict | None:
    """The record's ``stand_in`` block (and its warning) when node ``mem`` is not CXL memory."""
    kind = topo.node(mem).kind if mem in topo.node_ids else "devdax"
    if opts.dax or not (topo.verdict.stand_in or kind != "cxl"):
        return None
    warnings.append(records.warning("stand_in", f"node{mem} is {kind} memory standing in for CXL",
                                    "figures describe this memory, not a CXL device"))
    return {"node": mem, "kind": kind, "stands_in_for": "cxl",
            "reason": topo.verdict.reason if topo.verdict.stand_in else f"node{mem} is {kind}, not CXL memory"}


def _place_and_measure(opts: BenchOptions, topo, reader: SysfsReader, mem: int, size: int, llc: int, proto,
                       cpus: tuple[int, ...], threads: list[int], gather_idx: list, results: list[dict],
                       warnings: list[dict], progress, clock) -> tuple[dict, bool]:
    """Place the buffer (devdax mapping or node allocation), verify it, run the tests into
    ``results``; (buffer description, complete). Ctrl-C while placing or measuring keeps what finished."""
    bdesc: dict = {}
    buf = None
    complete = True
    try:
        if opts.dax:
            from sactool.memory import map_devdax
            from sactool.memory.placed import PAGE_SIZE, prefault

            buf = map_devdax(opts.dax, size, reader=reader)
            prefault(buf.mmap, buf.size_bytes, PAGE_SIZE, len(cpus), cpus)
            buf.verify(4096)
        else:
            from sactool.memory import allocate

            buf = allocate(size, node=mem, hugepages=opts.hugepages, prefault_threads=len(cpus),
                           prefault_cpus=cpus, topo=topo, reader=reader)
    except KeyboardInterrupt:
        complete = False
    if buf is not None:
        try:
            bdesc = buf.describe()
            warnings.extend(_buffer_warnings(bdesc, opts, mem, size, llc))
            from sactool.bench import runner

            complete = runner.measure_all(buf, opts, proto, cpus, threads, llc, gather_idx, results, warnings,
                                          progress=progress, clock=clock, reader=reader if clock is None else None)
        finally:
            from sactool.memory.placed import close_after

            close_after(buf, interrupted=not complete)
    return bdesc, complete


def _result_warnings(results: list[dict], mem: int, cpu_node: int, warnings: list[dict], *,
                     llc: int | None = None) -> None:
    """Name each result's nodes; flag results whose threads were descheduled or whose spread is high, and
    (``llc``: the cache, where the buffer itself was not already warned) gathers whose index stream's working
    set is under 8x the cache (a small trace over a large buffer)."""
    from sactool.bench.trust import flags

    for r in results:
        r["memory_node"], r["cpu_node"] = mem, (cpu_node if cpu_node >= 0 else None)
        if llc and r.get("test") == "gather":
            warnings.extend(w for w in flags(r, llc_bytes=llc, buffer_bytes=None) if w["code"] == "in_cache")
        from sactool.bench.disturb import shared_warning

        shared = shared_warning(r)
        if shared:
            warnings.append(shared)
        oc = r.get("on_cpu_fraction")
        if oc is not None and oc < ON_CPU_MIN:
            from sactool.bench.trust import descheduled_effect

            warnings.append(records.warning("descheduled", f"{r['key']}: its threads ran {oc:.0%} of the sample time "
                                  f"(other processes had the CPUs): {descheduled_effect(r)}",
                                  "on_cpu_samples show the figures on-CPU time gives; rerun when idle"))
        s = r.get("stats")
        if s and s["n"] >= 3 and s["mean"] and s["stdev"] / s["mean"] > HIGH_RSD:
            warnings.append(records.warning("high_variance", f"{r['key']}: relative stdev {s['stdev'] / s['mean']:.0%}",
                                  "the host is noisy: use --preset rigorous or rerun when idle"))


def _buffer_warnings(bdesc: dict, opts: BenchOptions, mem: int, size: int, llc: int) -> list[dict]:
    out = []
    mapping = bdesc.get("mapping")
    if mapping is not None:   # device-DAX: placement is the mapping itself (/proc/self/maps)
        if not mapping.get("verified"):
            out.append(records.warning("placement_unverified",
                             f"the buffer is not mapped as asked from {mapping.get('expected_path') or opts.dax}: "
                             f"{mapping.get('reason')}", "check the device with 'daxctl list' and its align"))
    elif bdesc["verified_fraction"] is not None and bdesc["verified_fraction"] < 0.999:
        out.append(records.warning("placement_unverified",
                         f"only {bdesc['verified_fraction']:.1%} of the buffer's pages are on node{mem}",
                         "the node may be short of free memory; try a smaller --size"))
    if opts.hugepages == "thp" and not opts.dax and (bdesc["hugepage_fraction"] or 0) < 0.9:
        out.append(records.warning("thp_not_granted", f"only {bdesc['hugepage_fraction'] or 0:.0%} of the buffer got "
                         "transparent huge pages", "random access also misses the TLB: latency and gathers read "
                         "slower (check /sys/kernel/mm/transparent_hugepage/enabled)"))
    if size // 2 < 4 * llc and any(t in opts.tests for t in ("latency", "mlp", "loaded")):
        out.append(records.warning("small_buffer", f"each chase chain covers {format_bytes(size // 2)} (half the "
                         f"buffer), less than 4× the {format_bytes(llc)} last-level cache",
                         f"use --size {format_size_arg(8 * llc)} or more (8× the LLC)"))
    return out


def _prepare_gather(opts: BenchOptions, size: int, llc: int) -> list:
    """(record_bytes, indices) pairs, made before the buffer so bad input fails fast."""
    from sactool.bench import indices
    from sactool.bench.suite import DEFAULT_RECORDS

    out = []
    for rb in opts.record_bytes or DEFAULT_RECORDS:
        recs = size // rb
        if opts.topk > recs:
            raise UsageError(f"top-k {opts.topk} is larger than the {recs} records of {rb} B in the buffer",
                             "use a smaller --topk or a larger --size")
        steps = indices.pass_steps(rb, opts.topk)
        out.append((rb, indices.make(opts.pattern, recs, opts.topk, steps, seed=opts.seed + rb, trace=opts.trace)))
    return out


def run_matrix(opts: BenchOptions, *, reader: SysfsReader | None = None, progress: Progress | None = None,
               clock=None, notify: Callable[[str], None] | None = None) -> R.BenchRecord:
    """CPU-node × memory-node matrix (MLC's ``--latency_matrix``/``--bandwidth_matrix``): every node
    with memory, measured from the CPUs of every node with CPUs. One record; each result names
    its pair; the top level names the pool node."""
    from sactool.memory.nodes import topology

    reader = reader or SysfsReader()
    topo = topology(reader)
    if not topo.live:
        raise TopologyError(f"the topology comes from a recording ({topo.sysfs_root}), not this system",
                            "sactool bench measures the running machine: drop --sysfs-root")
    mems = [n.id for n in topo.nodes if n.has_memory is not False and n.mem_total_bytes]
    cpu_nodes = [n.id for n in topo.nodes if n.has_cpu and n.cpus]
    allowed = os.sched_getaffinity(0)
    parts: list[R.BenchRecord] = []
    for mem in mems:
        for cn in cpu_nodes:
            cpus = tuple(c for c in topo.node(cn).cpus if c in allowed)
            if not cpus:
                continue
            rec = run_bench(replace(opts, node=mem, cpus=cpus), reader=reader, progress=progress, clock=clock,
                            notify=notify)
            parts.append(rec)
            if not rec.complete:
                break
        if parts and not parts[-1].complete:
            break
    if not parts:
        raise TopologyError("no (CPU node, memory node) pair can be measured", "check 'sactool probe'")
    pool = topo.verdict.pool_nodes[0]
    first = next((p for p in parts if p.memory_node == pool), parts[0])
    data = dict(first.data)
    seen: set = set()
    warnings = []
    for p in parts:
        for w in p.warnings:
            if (w["code"], w["message"]) not in seen:
                seen.add((w["code"], w["message"]))
                warnings.append(w)
    data.update({"command": opts.command, "matrix": True,
                 "pairs": [{"memory_node": p.data["memory_node"], "cpu_node": p.data["cpu_node"],
                            "cpus": list(p.cpus), "buffer": p.buffer, "complete": p.complete} for p in parts],
                 "results": [r for p in parts for r in p.results], "warnings": warnings,
                 "complete": all(p.complete for p in parts)})
    return R.from_data(data)
