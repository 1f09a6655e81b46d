"""How full each pool target is: a NUMA node's ``meminfo`` (sysfs-devices-node: ``Node N MemTotal``,
``MemFree``, ``MemUsed``, in kB), a DAX device's ``size`` (sysfs-bus-dax) with the rank plan's slices
on it — and, for both, the bytes the watched ranks' pools hold there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class TargetUse:
    """One pool target: ``total_bytes``/``free_bytes`` (numa: the node's meminfo; devdax: the device
    size, free = size − the planned slices), ``pool_bytes`` (present pages of the watched ranks' pools
    on it; devdax: their mapped bytes), ``planned_bytes`` (the rank plan's slices or shares), ``ranks``."""

    target: str
    kind: str
    node: int | None
    total_bytes: int | None
    free_bytes: int | None
    pool_bytes: int
    planned_bytes: int | None
    ranks: tuple[int, ...]
    detail: str = ""

    def to_data(self) -> dict[str, Any]:
        return {"target": self.target, "kind": self.kind, "node": self.node, "total_bytes": self.total_bytes,
                "free_bytes": self.free_bytes, "pool_bytes": self.pool_bytes, "planned_bytes": self.planned_bytes,
                "ranks": list(self.ranks), "detail": self.detail}


def occupancy(reader: Any, plan: Sequence[Any], placements: Sequence[Any]) -> list[TargetUse]:
    """One row per target of the plan (in plan order)."""
    out: list[TargetUse] = []
    targets: dict[str, list[Any]] = {}
    for row in plan:
        targets.setdefault(row.target, []).append(row)
    by_rank = {p.rank: p for p in placements}
    for name, rows in targets.items():
        ranks = tuple(r.rank for r in rows)
        sizes = [r.size_bytes for r in rows]
        planned = sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None
        node = rows[0].node
        if rows[0].mode == "devdax":
            rel = f"sys/bus/dax/devices/{name}/size"
            size = reader.int(rel)
            pool = sum(by_rank[r].mapped_bytes for r in ranks if r in by_rank)
            free = size - planned if size is not None and planned is not None else None
            out.append(TargetUse(name, "devdax", None, size, free, pool, planned, ranks,
                                 "" if size is not None else f"/{rel}: {reader.why(rel)}"))
            continue
        rel = f"sys/devices/system/node/node{node}/meminfo"
        kv = reader.kv(rel) or {}
        pool = sum(by_rank[r].node_bytes.get(node, 0) for r in ranks if r in by_rank)
        out.append(TargetUse(name, "numa", node, kv.get("MemTotal"), kv.get("MemFree"), pool, planned, ranks,
                             "" if kv else f"/{rel}: {reader.why(rel)}"))
    return out


__all__ = ["TargetUse", "occupancy"]
