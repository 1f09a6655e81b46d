"""``mpirun … sactool probe``: every rank probes its host, rank 0 writes one fleet record.

The record (``kind: fleet_topology``, schema 1): the header, ``world_size``, ``hosts`` (host name,
its ranks, the machine MPI reports, and the per-host topology record exactly as ``sactool probe
--format json`` writes it) and the ``pool_map`` (:mod:`sactool.fleet.poolmap`).

Ranks on one machine reading the same root are one host. Each rank may read its own
``--sysfs-root`` (MPMD: ``mpirun -n 1 sactool probe --sysfs-root A : -n 1 sactool probe
--sysfs-root B``), which is how recorded machines stand in for the hosts of a fleet.
"""

from __future__ import annotations

import os
from typing import Any

from sactool import records
from sactool.errors import RecordError
from sactool.fleet.mpi import HOST_ENV, Fleet
from sactool.fleet.poolmap import pool_map

KIND = "fleet_topology"
SCHEMA_VERSION = 3
"""Version of the ``fleet_topology`` record (``sactool probe`` under MPI); its history:

1 — the first format.
2 — NUMA nodes are numbers: ``pool_map.memdevs[].hosts[].nodes`` and each host's ``machine.numa_nodes[].node`` (1 wrote ``"node2"``).
3 — each host's topology record is schema 4 (a ``health`` block per memdev)."""


def _upgrade_1_to_2(rec: dict[str, Any]) -> dict[str, Any]:
    from sactool.host.machine import upgrade_machine
    from sactool.units import node_number

    for h in rec.get("hosts") or ():
        if isinstance(h, dict) and isinstance(h.get("topology"), dict):
            h["topology"] = {**h["topology"], "machine": upgrade_machine(h["topology"].get("machine"))}
    pmap = rec.get("pool_map")
    for dev in (pmap.get("memdevs") or ()) if isinstance(pmap, dict) else ():
        for e in (dev.get("hosts") or ()) if isinstance(dev, dict) else ():
            if isinstance(e, dict) and isinstance(e.get("nodes"), list):
                e["nodes"] = [n if node_number(n) is None else node_number(n) for n in e["nodes"]]
    return rec


def _upgrade_2_to_3(rec: dict[str, Any]) -> dict[str, Any]:
    from sactool.topology.records import upgrade_topology_3_to_4

    for h in rec.get("hosts") or ():
        if isinstance(h, dict) and isinstance(h.get("topology"), dict) and h["topology"].get("schema_version") == 3:
            h["topology"] = upgrade_topology_3_to_4(h["topology"])
    return rec


UPGRADES: dict[int, Any] = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}


def rank_entry(fleet: Fleet, topo_data: dict[str, Any]) -> dict[str, Any]:
    """What one rank contributes: its labels and its topology record."""
    label = os.environ.get(HOST_ENV)
    source = "environment SACTOOL_FLEET_HOST" if label else None
    if not label and not topo_data.get("live"):
        label = (topo_data.get("machine") or {}).get("hostname")
        source = "the recording's hostname" if label else None
        if not label and topo_data.get("sysfs_root"):
            label = os.path.basename(os.path.normpath(str(topo_data["sysfs_root"]))) or None
            source = "the recording's directory name" if label else None
    if not label:
        label, source = fleet.host, "hostname"
    return {"rank": fleet.rank, "host": label, "host_source": source, "machine": fleet.machine,
            "live": bool(topo_data.get("live")), "sysfs_root": topo_data.get("sysfs_root"), "topology": topo_data}


def group_hosts(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Ranks → hosts. Same label and same source (machine + root) = one host. A label used for
    different sources gets ``/rank<N>`` appended (and a warning): two recordings read on one machine
    are two hosts, whatever the hostname says."""
    warnings: list[dict[str, str]] = []
    by_label: dict[str, dict[tuple, list[dict]]] = {}
    for e in entries:
        by_label.setdefault(e["host"], {}).setdefault((e["machine"], e["sysfs_root"]), []).append(e)
    hosts = []
    for label, sources in by_label.items():
        if len(sources) > 1:
            warnings.append(records.warning("host_name_ambiguous",
                                             f"{len(sources)} different topologies come from ranks called {label!r}; "
                                        f"they are reported as {label}/rank<first rank>",
                             f"set {HOST_ENV} per rank to name the hosts"))
        for group in sources.values():
            name = label if len(sources) == 1 else f"{label}/rank{group[0]['rank']}"
            first = group[0]
            hosts.append({"host": name, "ranks": [g["rank"] for g in group], "host_source": first["host_source"],
                          "machine": first["machine"], "live": first["live"], "sysfs_root": first["sysfs_root"],
                          "topology": first["topology"]})
    return hosts, warnings


def fleet_probe(fleet: Fleet, reader=None) -> dict[str, Any] | None:
    """Probe on every rank (an error on any rank stops all); rank 0 returns the fleet record,
    other ranks None."""
    from sactool.topology import probe

    entries = fleet.agree(lambda: rank_entry(fleet, probe(reader).to_data()))
    if not fleet.is_root:
        return None
    return build_record(entries, fleet.size)


def build_record(entries: list[dict[str, Any]], world_size: int) -> dict[str, Any]:
    hosts, warnings = group_hosts(entries)
    pmap = pool_map([(h["host"], h["topology"]) for h in hosts])
    data = records.header(KIND, SCHEMA_VERSION)
    data.update({"world_size": world_size, "hosts": hosts, "pool_map": pmap,
                 "warnings": warnings + pmap["warnings"]})
    return data


def load_fleet_topology(path) -> dict[str, Any]:
    """Load a fleet probe record (older schemas upgraded, newer refused)."""
    data = records.load_structured(path, what="fleet record")
    data = records.upgrade(data, kind=KIND, current=SCHEMA_VERSION, steps=UPGRADES, source=f"fleet record {path}")
    if not isinstance(data.get("hosts"), list) or not isinstance(data.get("pool_map"), dict):
        raise RecordError(f"fleet record {path} has no hosts/pool_map", "re-create it with mpirun … sactool probe")
    return data


__all__ = ["fleet_probe", "build_record", "group_hosts", "rank_entry", "load_fleet_topology", "KIND"]
