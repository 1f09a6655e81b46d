"""Where the pool is and how fast it gathers: pool targets from the topology, gather figures from a
bench record (``--bench``) or from short measurements tune runs itself, interleaved over targets.

On a machine without CXL the topology's verdict names a DRAM node that stands in; the figures
measured on it describe DRAM, and everything downstream says so (``stand_in``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sactool.errors import RecordError, TopologyError
from sactool.hisparse.capacity import PoolTarget


@dataclass(frozen=True)
class PoolInfo:
    mode: str                          # numa | devdax
    targets: tuple[PoolTarget, ...]
    stand_in: bool
    reason: str
    cpu_node: int | None               # the first target's CPU node (each target has its own: targets[i].cpu_node)
    cpus_near: int                     # CPUs available to prefault every target from its own CPU node
                                       # (the fewest any target's CPU node has)


def pool_info(topo, reader=None) -> PoolInfo:
    """Pool targets from ``sactool.topology.probe()``: the verdict's pool nodes (capacity = free
    memory, with the free-memory rule of :mod:`sactool.memory.nodes` on a live system), else DAX
    devices in devdax mode (capacity = their size)."""
    nodes = tuple(topo.verdict.pool_nodes)
    if nodes:
        targets = []
        for nid in nodes:
            n = topo.node(nid)
            cap, src = n.mem_free_bytes, f"node{nid}/meminfo MemFree"
            if topo.live and reader is not None:
                from sactool.memory.nodes import free_estimate

                f = free_estimate(topo, reader, nid)
                if f.bytes is not None:
                    cap, src = f.bytes, f.source
            if not cap:
                raise TopologyError(f"node{nid} reports no free memory", "check 'sactool probe'")
            cpu = topo.verdict.cpu_node_of(nid)
            targets.append(PoolTarget(f"node{nid}", nid, int(cap), src,
                                      cpu if cpu is not None else topo.nearest_cpu_node(nid)))
        return PoolInfo("numa", tuple(targets), bool(topo.verdict.stand_in), topo.verdict.reason,
                        targets[0].cpu_node, _cpus_near(topo, targets))
    dax = [d for d in topo.dax_devices if d.mode == "devdax" and d.size_bytes]
    if dax:
        targets = [PoolTarget(d.name, d.target_node, int(d.size_bytes), f"{d.name}/size",
                              topo.dax_locality(d.name).cpu_node) for d in dax]
        return PoolInfo("devdax", tuple(targets), False, "devdax devices hold the pool", targets[0].cpu_node,
                        _cpus_near(topo, targets))
    raise TopologyError("no pool memory found: no CXL node, no stand-in node, no devdax device",
                        "run 'sactool probe' to see why")


def _cpus_near(topo, targets) -> int:
    """CPUs each target can be prefaulted with from its own CPU node: the fewest any of them has."""
    counts = [len(topo.node(t.cpu_node).cpus) for t in targets if t.cpu_node is not None]
    return min(counts) if counts else 1


@dataclass(frozen=True)
class GatherInputs:
    """``rounds[i][target]``: gather bandwidth (B/s) of round i; ``info``: the profile's bench block."""

    rounds: tuple[dict[str, float], ...]
    info: dict[str, Any]
    warnings: tuple[dict[str, str], ...]


def _warn(code: str, message: str, hint: str = "") -> dict[str, str]:
    return {"code": code, "message": message, "hint": hint}


def from_bench(path, record_bytes: int, pool: PoolInfo, machine: dict, *, strict: bool) -> GatherInputs:
    """Gather figures from a ``sactool bench`` record. A record from another machine or another
    memory node warns, or is refused with ``strict``."""
    from pathlib import Path

    from sactool.bench import gather_figure, load_bench
    from sactool.records import digest

    rec = load_bench(path)
    warnings = []
    theirs = (rec.data.get("machine") or {})
    for key in ("hostname", "cpu_model"):
        if theirs.get(key) and machine.get(key) and theirs[key] != machine[key]:
            msg = f"bench record {path} was measured on {key} {theirs[key]!r}, this is {machine[key]!r}"
            if strict:
                raise RecordError(msg, "measure here with 'sactool bench', or drop --strict to use it anyway")
            warnings.append(_warn("bench_other_machine", msg, "figures from another machine may not hold here"))
            break
    names = [t.name for t in pool.targets]
    node_targets = {t.node: t.name for t in pool.targets if t.node is not None}
    if rec.memory_node not in node_targets:
        msg = (f"bench record {path} measured node{rec.memory_node}, not the pool "
               f"({', '.join(names)})")
        if strict:
            raise RecordError(msg, "bench the pool node: sactool bench --node <pool node>")
        warnings.append(_warn("bench_other_node", msg, "its figure is used for every pool target"))
    fig = gather_figure(rec, record_bytes)
    if len(names) > 1:
        warnings.append(_warn("bench_one_node", f"one bench record for {len(names)} pool targets: "
                              f"node{rec.memory_node}'s figure is used for all of them",
                              "bench each pool node to compare placements on measured figures"))
    rnd = {n: fig.bandwidth_bytes_per_s for n in names}
    info = {"source": "file", "path": str(path), "digest": digest(Path(path).read_bytes()),
            "memory_node": f"node{rec.memory_node}" if rec.memory_node is not None else None,
            "stand_in": bool(rec.stand_in) or pool.stand_in, "record_bytes": record_bytes,
            "threads": fig.threads, "bandwidth_bytes_per_s": fig.bandwidth_bytes_per_s,
            "ns_per_record": fig.ns_per_record, "figure_source": fig.source, "detail": fig.detail}
    return GatherInputs((rnd,), info, tuple(warnings))


def measure_rounds(pool: PoolInfo, record_bytes: int, top_k: int, rounds: int, *, seconds: float,
                   done: Sequence[dict], on_point: Callable[[dict], None],
                   progress: Callable[[str, int, int], None] | None = None) -> GatherInputs:
    """``rounds`` short gather measurements on every pool node, interleaved (A B A B …) so drift
    hits every target alike. ``done``: points from an earlier run (``--resume``)."""
    from sactool.bench import gather_figure, run_quick_gather

    if pool.mode != "numa":
        raise TopologyError("tune cannot measure a devdax pool itself",
                            "run 'sactool bench' on the DAX device and pass --bench FILE")
    have = {(p["round"], p["target"]): p for p in done}
    total, n = rounds * len(pool.targets), 0
    out: list[dict[str, float]] = []
    last: dict = {}
    for r in range(rounds):
        rnd = {}
        for t in pool.targets:
            p = have.get((r, t.name))
            if p is None:
                rec = run_quick_gather(t.node, record_bytes, top_k, seconds=seconds)
                fig = gather_figure(rec, record_bytes)
                p = {"kind": "gather", "round": r, "target": t.name, "bandwidth_bytes_per_s": fig.bandwidth_bytes_per_s,
                     "ns_per_record": fig.ns_per_record, "threads": fig.threads, "source": fig.source,
                     "detail": fig.detail}
                on_point(p)
            rnd[t.name] = float(p["bandwidth_bytes_per_s"])
            last = p
            n += 1
            if progress:
                progress("gather", n, total)
        out.append(rnd)
    bws = [v for rnd in out for v in rnd.values()]
    info = {"source": "quick", "path": None, "digest": None,
            "memory_node": ", ".join(t.name for t in pool.targets), "stand_in": pool.stand_in,
            "record_bytes": record_bytes, "threads": last.get("threads"), "rounds": rounds,
            "bandwidth_bytes_per_s": sorted(bws)[len(bws) // 2],
            "bandwidth_samples_bytes_per_s": bws, "figure_source": last.get("source"),
            "detail": (last.get("detail") or "") + f"; {rounds} rounds interleaved over targets"}
    return GatherInputs(tuple(out), info, ())
