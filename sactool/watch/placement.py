"""Where each rank's pool really is, against the plan.

The pool of a rank is found among its process's mappings (:mod:`sactool.watch.procmaps`):

* **devdax**: the mappings of ``/dev/<device>`` (or of the file standing in for it,
  ``$SACTOOL_DEVDAX_STANDIN``); the mapped byte range of the device (maps' offset) must lie inside
  the rank's slice, and the device must be the rank's.
* **numa**: the anonymous mappings that carry a memory policy set with mbind(2) (the plug-in's
  placement; numa_maps shows ``bind:N``); their present pages per node. Pages on a node other than
  the plan's are off plan. Where no mapping carries a policy, the plug-in did not place this
  process's pool (the engine's own allocator ran, or the hook was never called): the largest
  anonymous mapping is shown as the likely pool, every page of it counted off plan unless it lies on
  the plan's node — and the status says it was not placed by sactool either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from sactool.watch.plan import PlanRow
from sactool.watch.procmaps import Vma

PLACING = ("bind", "prefer", "interleave", "weighted interleave", "prefer (many)")
"""numa_maps policy words that put memory on named nodes (mm/mempolicy.c ``policy_modes``; ``default``
and ``local`` name no node); a ``=static``/``=relative`` flag may follow the word."""

STATUSES = ("on_plan", "off_plan", "not_placed", "not_found", "unreadable")


@dataclass(frozen=True)
class RankPlacement:
    """One rank's pool as found. ``status``: on_plan | off_plan (pages or slice off the plan) |
    not_placed (no mapping with a memory policy: not sactool's placement) | not_found (no pool mapping)
    | unreadable (the process's maps could not be read: ``detail`` says why)."""

    rank: int
    pid: int | None
    plan: PlanRow
    status: str
    mapped_bytes: int = 0
    present_bytes: int = 0
    node_bytes: dict[int, int] = field(default_factory=dict)
    on_plan_bytes: int = 0
    off_plan_bytes: int = 0
    policy: str = ""
    mappings: int = 0
    device: str | None = None
    offset_bytes: int | None = None
    detail: str = ""

    def to_data(self) -> dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "plan": self.plan.to_data(), "status": self.status,
                "mapped_bytes": self.mapped_bytes, "present_bytes": self.present_bytes,
                "node_bytes": {str(k): v for k, v in sorted(self.node_bytes.items())},
                "on_plan_bytes": self.on_plan_bytes, "off_plan_bytes": self.off_plan_bytes,
                "policy": self.policy, "mappings": self.mappings, "device": self.device,
                "offset_bytes": self.offset_bytes, "detail": self.detail}


def _standins() -> dict[str, str]:
    """Device → stand-in file (``$SACTOOL_DEVDAX_STANDIN``, the plug-in's own variable)."""
    import json

    raw = os.environ.get("SACTOOL_DEVDAX_STANDIN", "")
    try:
        data = json.loads(raw) if raw else {}
        return {str(k): os.path.realpath(str(v["path"])) for k, v in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def _devdax(row: PlanRow, pid: int, vmas: list[Vma]) -> RankPlacement:
    stand = _standins()
    paths = {f"/dev/{row.target}": row.target}
    if row.target in stand:
        paths[stand[row.target]] = row.target
    other = [v for v in vmas if v.path.startswith("/dev/dax") and v.path not in paths]
    mine = [v for v in vmas if v.path in paths]
    if not mine:
        if other:
            dev = other[0].path
            size = sum(v.size_bytes for v in other)
            return RankPlacement(row.rank, pid, row, "off_plan", size, device=dev[5:], offset_bytes=other[0].offset,
                                 off_plan_bytes=size, mappings=len(other),
                                 detail=f"maps {dev}, the plan gives rank {row.rank} {row.target}")
        return RankPlacement(row.rank, pid, row, "not_found", detail=f"no mapping of /dev/{row.target}"
                             + (f" or of its stand-in {stand[row.target]}" if row.target in stand else ""))
    lo, hi = min(v.offset for v in mine), max(v.offset + v.size_bytes for v in mine)
    size = sum(v.size_bytes for v in mine)
    if row.offset_bytes is None or row.size_bytes is None:
        return RankPlacement(row.rank, pid, row, "on_plan", size, device=row.target, offset_bytes=lo,
                             mappings=len(mine), on_plan_bytes=size,
                             detail=f"maps bytes [{lo}, {hi}) of {row.target}; slice unknown here (no device size)")
    s0, s1 = row.offset_bytes, row.offset_bytes + row.size_bytes
    inside = sum(max(0, min(v.offset + v.size_bytes, s1) - max(v.offset, s0)) for v in mine)
    status = "on_plan" if inside == size else "off_plan"
    return RankPlacement(row.rank, pid, row, status, size, device=row.target, offset_bytes=lo, mappings=len(mine),
                         on_plan_bytes=inside, off_plan_bytes=size - inside,
                         detail=f"maps bytes [{lo}, {hi}) of {row.target}; its slice is [{s0}, {s1})")


def _numa(row: PlanRow, pid: int, vmas: list[Vma]) -> RankPlacement:
    anon = [v for v in vmas if v.anonymous]
    placed = [v for v in anon if v.policy.split(":", 1)[0].split("=", 1)[0] in PLACING]
    status_if_ok, detail = "on_plan", ""
    if not placed:
        if not anon:
            return RankPlacement(row.rank, pid, row, "not_found", detail="no anonymous mapping")
        big = max(anon, key=lambda v: v.size_bytes)
        placed = [big]
        status_if_ok = "not_placed"
        detail = (f"no mapping carries a memory policy: sactool did not place this pool (the engine's own "
                  f"allocator, or the hook was not called); the largest anonymous mapping "
                  f"({big.size_bytes} bytes at {big.start:#x}) is taken as the pool")
    node_bytes: dict[int, int] = {}
    for v in placed:
        for n, b in v.node_bytes.items():
            node_bytes[n] = node_bytes.get(n, 0) + b
    want = row.node
    on = node_bytes.get(want, 0) if want is not None else 0
    present = sum(node_bytes.values())
    off = present - on
    policies = sorted({v.policy for v in placed})
    if status_if_ok == "on_plan" and want is not None:
        from sactool.units import expand_int_list

        def names(p: str) -> list[int]:
            try:
                return expand_int_list(p.rsplit(":", 1)[-1])
            except ValueError:
                return []

        wrong = [p for p in policies if want not in names(p)]
        if wrong:
            detail = f"policy {', '.join(wrong)} does not name node{want}"
    if status_if_ok == "not_placed":
        status = "not_placed"
    else:
        status = "on_plan" if off == 0 and not detail else "off_plan"
    return RankPlacement(row.rank, pid, row, status, sum(v.size_bytes for v in placed), present, node_bytes, on, off,
                         ", ".join(policies), len(placed), detail=detail)


def evaluate(row: PlanRow, pid: int | None, vmas: list[Vma], why: str) -> RankPlacement:
    """The placement of ``row``'s pool in process ``pid`` (``vmas``: its mappings, ``why``: a read problem)."""
    if pid is None:
        return RankPlacement(row.rank, None, row, "not_found", detail="no process of this rank was found")
    if not vmas:
        return RankPlacement(row.rank, pid, row, "unreadable", detail=why or "no mappings")
    out = _devdax(row, pid, vmas) if row.mode == "devdax" else _numa(row, pid, vmas)
    if why:
        import dataclasses

        out = dataclasses.replace(out, detail="; ".join(x for x in (out.detail, why) if x))
    return out


def warnings_of(rows: list[RankPlacement]) -> list[dict[str, str]]:
    """One warning per rank whose pool is not where the plan puts it, with the rank and the amount."""
    from sactool.records import warning
    from sactool.units import format_bytes

    out = []
    for p in rows:
        if p.status == "off_plan":
            where = ", ".join(f"node{n}: {format_bytes(b)}" for n, b in sorted(p.node_bytes.items()) if n != p.plan.node)
            out.append(warning("pool_off_plan", f"rank {p.rank} (pid {p.pid}): {format_bytes(p.off_plan_bytes)} of its "
                               f"pool is off plan ({p.plan.target})" + (f" [{where}]" if where else "")
                               + (f"; {p.detail}" if p.detail else ""),
                               "restart the rank with the sactool_cxl plug-in enabled (SGLANG_PLUGINS / "
                               "VLLM_PLUGINS), and check its log line 'sactool_cxl: rank …'"))
        elif p.status == "not_placed":
            out.append(warning("pool_not_placed", f"rank {p.rank} (pid {p.pid}): {p.detail}"
                               + (f"; {format_bytes(p.off_plan_bytes)} off {p.plan.target}" if p.off_plan_bytes else ""),
                               "is the sactool_cxl plug-in enabled in this engine? (sactool serve sets it)"))
        elif p.status in ("not_found", "unreadable") and p.pid is not None:
            out.append(warning(f"pool_{p.status}", f"rank {p.rank} (pid {p.pid}): {p.detail}",
                               "run watch as the engine's user or as root (numa_maps needs ptrace access)"
                               if p.status == "unreadable" else None))
    return out


__all__ = ["RankPlacement", "STATUSES", "evaluate", "warnings_of"]
