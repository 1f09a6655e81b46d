"""Split a shared pool among the hosts of a fleet bench record (``sactool tune --fleet``).

From the record (``sactool bench gather`` under ``mpirun``, see :mod:`sactool.fleet.bench`):

* **which hosts share which memory**: each rank recorded the physical identity of the node it
  measured (``pool_device.key``: the serials of the CXL memdevs behind it, or — for DRAM standing
  in — the machine's boot id and node). Hosts with the same key share that memory;
* **capacity per host**: the smallest free capacity any sharing host saw, divided equally among
  the hosts that share it (policy: an equal split; each host's tune then fits concurrency ×
  context into its share);
* **bandwidth per host when all fetch at once**: the sweep's step with the most active ranks (all
  N when the sweep finished); a host's figure is the sum of its ranks' measured gather bandwidth
  in that step, for the model's record size (another measured size is scaled by cache lines
  touched per record, as :func:`sactool.bench.gather_figure` does, and marked so).

Pure: reads the record, no MPI, no measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sactool import records
from sactool.errors import RecordError
from sactool.inputfile import read_input
from sactool.units import format_bytes, node_name, node_number

SHARE_RULE = "equal split: the smallest free capacity a sharing host saw, divided by the number of hosts sharing it"


@dataclass(frozen=True)
class HostShare:
    """One host's part of the pool and what it gets of the bandwidth when every rank fetches."""

    host: str
    ranks: tuple[int, ...]
    memory_node: int
    cpu_node: int | None
    cpus: int
    stand_in: bool
    device_key: str
    hosts_sharing: tuple[str, ...]
    device_capacity_bytes: int
    share_bytes: int
    bandwidth_bytes_per_s: float
    bandwidth_source: str             # measured | scaled
    bandwidth_detail: str
    aggregate_bytes_per_s: float
    active_ranks: int
    world_size: int
    record_bytes: int
    threads: int
    machine: dict[str, Any] = field(default_factory=dict)
    record_path: str | None = None
    record_digest: str | None = None
    flags: tuple[dict, ...] = ()      # this host's figures measured inside the cache or descheduled (bench.trust)

    def profile_block(self) -> dict[str, Any]:
        """The profile's ``fleet`` block: the share and where each figure came from."""
        return {
            "host": self.host, "ranks": list(self.ranks), "record": self.record_path, "digest": self.record_digest,
            "memory_node": f"node{self.memory_node}", "device": self.device_key,
            "hosts_sharing": list(self.hosts_sharing), "device_capacity_bytes": self.device_capacity_bytes,
            "share_bytes": self.share_bytes, "share_rule": SHARE_RULE,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s, "bandwidth_source": self.bandwidth_source,
            "bandwidth_detail": self.bandwidth_detail, "aggregate_bytes_per_s": self.aggregate_bytes_per_s,
            "active_ranks": self.active_ranks, "world_size": self.world_size, "record_bytes": self.record_bytes,
        }


def _node(v: Any) -> int:
    """A node of the record (a number; ``"node2"`` in bench records of schema 1, upgraded on loading)."""
    n = node_number(v)
    if n is None:
        raise ValueError(f"not a NUMA node: {v!r}")
    return n


def host_file_name(host: str) -> str:
    """A host label as a file name: characters outside ``[A-Za-z0-9._-]`` become ``_``; never
    ``.``/``..`` or empty."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", host).strip(".") or "host"
    return name


def _ranks_label(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"sum of ranks {', '.join(map(str, ranks))}"


def _lines(r: int) -> float:
    from sactool.bench.record import lines_touched

    return lines_touched(r)


def plan(data: dict[str, Any], record_bytes: int, *, path: str | None = None,
         digest: str | None = None) -> tuple[list[HostShare], list[dict[str, str]]]:
    """Every host's share from a fleet bench record's data; (shares, warnings)."""
    fl = data.get("fleet")
    src = f"fleet record {path}" if path else "fleet record"
    if not isinstance(fl, dict) or not fl.get("sweep") or not fl.get("hosts"):
        raise RecordError(f"{src} has no fleet sweep", "measure one: mpirun -n N sactool bench gather --out FILE")
    gathers = [s for s in fl["sweep"] if s.get("test") == "gather"]
    if not gathers:
        raise RecordError(f"{src} holds a {fl['sweep'][0].get('test')} sweep; tune needs gather figures",
                          "measure with: mpirun -n N sactool bench gather --out FILE")
    warnings: list[dict[str, str]] = []
    if data.get("complete") is False:   # an interrupted sweep: figures of the rounds that finished
        done, rounds = fl.get("rounds_done"), (data.get("protocol") or {}).get("rounds")
        warnings.append(records.warning(
            "fleet_incomplete", f"{src} is an interrupted sweep (complete: false"
            + (f", {done} of {rounds} rounds" if done is not None and rounds else "") + "): its figures come "
            "from the rounds that finished", "rerun the fleet bench to the end for the full protocol"))
    top = max(s["active_ranks"] for s in gathers)
    world = int(fl.get("world_size") or top)
    if top < world:
        warnings.append(records.warning("fleet_partial", f"{src}: the sweep stopped at {top} of {world} active "
                         "ranks; bandwidths are those of that step, not of every rank fetching at once",
                         "rerun the fleet bench to completion"))
    steps = [s for s in gathers if s["active_ranks"] == top]
    sizes = {int(s["params"]["record_bytes"]): s for s in sorted(steps, key=lambda s: s["aggregate_bytes_per_s"])}
    if record_bytes in sizes:
        step, scale, how = sizes[record_bytes], 1.0, "measured"
    else:  # nearest measured size by lines touched; time per cache line taken as equal
        near = min(sizes, key=lambda r: (abs(_lines(r) - _lines(record_bytes)), r))
        step = sizes[near]
        scale = (record_bytes / _lines(record_bytes)) / (near / _lines(near))
        how = "scaled"
        warnings.append(records.warning("fleet_record_size", f"{src} measured no {record_bytes} B gathers; "
                         f"scaled from {near} B by cache lines touched per record",
                         f"bench -r {record_bytes} for a measured figure"))
    ranks = {r["rank"]: r for r in fl.get("ranks", [])}
    from sactool.bench.trust import fleet_step_flags

    flags = fleet_step_flags(step, ranks, where=src)
    per_host: dict[str, float] = {}
    for r in step["per_rank"]:
        per_host[r["host"]] = per_host.get(r["host"], 0.0) + r["bandwidth_bytes_per_s"] * scale
    dax = [h["host"] for h in fl["hosts"] if h["pool_device"].get("kind") == "devdax"]
    if dax:    # tune --fleet splits a NUMA node's capacity; a devdax device is no node to plan
        raise RecordError(f"{src} measured devdax devices (hosts {', '.join(dax)}); tune --fleet plans a shared NUMA "
                          "pool", "on each host: sactool tune --bench with a record of that host's devdax device")
    by_key: dict[str, list[dict]] = {}
    for h in fl["hosts"]:
        by_key.setdefault(h["pool_device"]["key"], []).append(h)
    shares = []
    for h in fl["hosts"]:
        group = by_key[h["pool_device"]["key"]]
        caps = [g["pool_device"].get("free_bytes") or g["pool_device"].get("capacity_bytes") for g in group]
        if not all(caps):
            raise RecordError(f"{src}: host {h['host']} recorded no capacity for {node_name(h['memory_node'])}",
                              "re-create the record with this sactool")
        cap = int(min(caps))
        if h["host"] not in per_host:
            warnings.append(records.warning("fleet_host_idle", f"host {h['host']} had no active rank in the "
                             f"{top}-rank step: its bandwidth share is unknown", "rerun to completion"))
            continue
        r0 = ranks.get(h["ranks"][0], {})
        shares.append(HostShare(
            host=h["host"], ranks=tuple(h["ranks"]), memory_node=_node(h["memory_node"]),
            cpu_node=node_number(r0.get("cpu_node")), cpus=len(r0.get("cpus") or ()) or 1,
            stand_in=bool(h.get("stand_in")), device_key=h["pool_device"]["key"],
            hosts_sharing=tuple(g["host"] for g in group), device_capacity_bytes=cap, share_bytes=cap // len(group),
            bandwidth_bytes_per_s=per_host[h["host"]], bandwidth_source=how,
            bandwidth_detail=(_ranks_label([r["rank"] for r in step["per_rank"] if r["host"] == h["host"]])
                              + f" in the {top}-rank step of {step['config']} (median of {step['aggregate_stats']['n']} "
                              f"samples each, all {top} ranks fetching at once)"
                              + (f", scaled from {step['params']['record_bytes']} B to {record_bytes} B" if scale != 1
                                 else "")),
            aggregate_bytes_per_s=step["aggregate_bytes_per_s"] * scale, active_ranks=top, world_size=world,
            record_bytes=record_bytes, threads=int(step["params"].get("threads") or 1),
            machine=dict(r0.get("machine_block") or data.get("machine") or {}), record_path=path, record_digest=digest,
            flags=tuple(flags.get(h["host"], ()))))
    return shares, warnings


def pool_source(share: HostShare):
    """The :class:`sactool.tune.pool.PoolSource` tune receives for this host: one pool target
    holding the share, gathering at the host's all-at-once bandwidth."""
    from sactool.pool.discover import PoolInfo
    from sactool.pool.targets import Target
    from sactool.tune.pool import GatherInputs, PoolSource

    name = f"node{share.memory_node}"
    others = [h for h in share.hosts_sharing if h != share.host]
    reason = (f"fleet record: {share.host} measured {name}"
              + (f", shared with {', '.join(others)}" if others else ", shared with no other host")
              + (" (a DRAM node standing in for CXL)" if share.stand_in else ""))
    target = Target(name, "numa", share.share_bytes,
                    f"fleet share: 1/{len(share.hosts_sharing)} of {format_bytes(share.device_capacity_bytes)} "
                    f"({SHARE_RULE})", cpu_node=share.cpu_node, node=share.memory_node)
    pool = PoolInfo("numa", (target,), share.stand_in, reason, share.cpu_node, share.cpus)
    info = {"source": "fleet", "path": share.record_path, "digest": share.record_digest, "memory_node": name,
            "stand_in": share.stand_in, "record_bytes": share.record_bytes, "threads": share.threads,
            "bandwidth_bytes_per_s": share.bandwidth_bytes_per_s,
            "ns_per_record": 1e9 * share.record_bytes / share.bandwidth_bytes_per_s,
            "figure_source": share.bandwidth_source, "detail": share.bandwidth_detail,
            "figure_flags": [dict(w) for w in share.flags]}
    gather = GatherInputs(({name: share.bandwidth_bytes_per_s},), info, tuple(share.flags))
    return PoolSource(share.machine, pool, gather, share.profile_block(), share.record_path)


def load_plan(path, record_bytes: int):
    """Load a fleet bench record and plan its split; (shares, warnings, record data)."""
    from sactool.bench.record import load_bench
    from sactool.records import digest

    rec = load_bench(path)
    return (*plan(rec.data, record_bytes, path=str(path), digest=digest(read_input(path, what="fleet record"))), rec.data)


__all__ = ["HostShare", "plan", "load_plan", "pool_source", "host_file_name", "SHARE_RULE"]
