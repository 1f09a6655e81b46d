"""``serve``'s pool health check: the devices behind the pool targets, as the kernel reports them now.

A device whose media is degraded (Get Health Info: media status not normal, or maintenance needed /
performance degraded / replacement needed), or a known poisoned range inside a rank's planned devdax
slice, makes a strict profile (``pool.strict``) refuse to launch (exit 3: the hardware is not usable as
planned) and any other profile warn, before the engine starts. The devdax slices are carved around the
poison the pool check read (:func:`sactool.pool.rankplan.carve`), so a poisoned planned slice here means
a record that appeared after that read. Poison on a NUMA target is a warning only: the kernel places
that memory page by page (and offlines a poisoned page itself).
"""

from __future__ import annotations

from typing import Any

from sactool.errors import TopologyError
from sactool.host.sysfs import SysfsReader
from sactool.topology.health import MemdevHealth, locate


def _memdevs(topo: Any, target: str) -> tuple[str, ...]:
    if target.startswith("dax"):
        return tuple(m.name for m in topo.memdevs_of_dax(target))
    if target.startswith("node") and target[4:].isdigit():
        return tuple(m.name for m in topo.memdevs_of_node(int(target[4:])))
    return ()


def check_health(profile: Any, reader: SysfsReader, plan: Any) -> list[str]:
    """Lines for the dry-run's checks; TopologyError for a strict profile on a degraded or poisoned pool.
    ``plan``: the rank plan (its ``slots``: rank, target, offset_bytes, size_bytes)."""
    from sactool.topology import probe

    topo = probe(reader, poison=True)
    by_name: dict[str, MemdevHealth] = {h.memdev: h for h in topo.health}
    targets = sorted({s.target for s in plan.slots})
    carved = {n for n, _ in getattr(plan, "carved", ())}
    lines: list[str] = []
    refuse: list[str] = []
    for t in targets:
        devs = _memdevs(topo, t)
        if not devs:
            continue
        for d in devs:
            h = by_name.get(d)
            if h is None:
                continue
            media = ("media health unknown: " + h.media_reason) if h.media is None else (
                f"media {h.media.media_status}" + (f" ({', '.join(h.media.health_status)})" if h.media.health_status else "")
                + f", from the {h.media.source}")
            poison = ("poison list not read: " + h.poison_reason) if h.poison is None else f"{len(h.poison)} poisoned range(s)"
            lines.append(f"health {t} ← {d}: {media}; {poison}; errors handled {h.error_mode}")
            if h.degraded:
                refuse.append(f"{d} behind {t} reports media {h.media.media_status if h.media else '?'}"
                              + (f" ({', '.join(h.media.health_status)})" if h.media and h.media.health_status else ""))
            for p in locate(h.poison or (), plan.slots):
                if p.rank is not None:
                    refuse.append(f"poison in rank {p.rank}'s slice of {p.pool_target} at pool offset "
                                  f"{p.pool_offset_bytes:#x} ({p.where()})")
                elif t.startswith("node") and p.node is not None:
                    lines.append(f"warning: poison on {t}: {p.where()} (the kernel offlines a poisoned page)")
                elif t in carved:
                    lines.append(f"poison skipped: the slices of {t} are carved around it: {p.where()}")
                else:
                    lines.append(f"poison outside every planned slice: {p.where()}")
    if refuse and profile.pool.strict:
        raise TopologyError("the pool is not healthy as planned: " + "; ".join(refuse),
                            "run serve again: a devdax plan is carved around the poison the pool check reads (a "
                            "record in a planned slice appeared after that read); clear the poison once its data is "
                            "rewritten, or replace the device; pool.strict false only warns")
    lines.extend(f"warning: {r}" for r in refuse)
    return lines
