"""Momentary readings of the pool's memory, kept apart from the probed structure.

A topology (nodes, DAX devices, their sockets and sizes) is structure: probed once, it holds for
the life of a process and a recording replays it. How much of a node is free is a reading: it
moves with every allocation on the machine, so it is taken where a decision needs it — when the
rank plan sizes a node's share (:func:`sactool.pool.targets.target_facts`) and again when the
plug-in answers the engine's host-memory check just before it allocates
(:meth:`sactool.pool.placer.HostPoolPlacer.pool_budget`). Both read it here, with one rule:
:func:`sactool.memory.nodes.free_estimate` (``nodeN/meminfo`` MemFree plus the node's
reclaimable page cache, plus free memory ``/proc/meminfo`` counts but no node reports) minus the
safety margin kept back there (``FreeEstimate.room_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.units import format_bytes


@dataclass(frozen=True)
class Room:
    """Bytes the pool may take on a node now (None: unreadable) and how that was read."""

    node: int
    bytes: int | None
    source: str
    margin_bytes: int = 0


def node_room(topo, reader, nid: int) -> Room:
    """Node ``nid``'s room now: its free estimate minus the margin kept back."""
    from sactool.memory import nodes as memnodes

    f = memnodes.free_estimate(topo, reader, nid)
    if f.bytes is None:
        return Room(nid, None, f.source)
    return Room(nid, f.room_bytes, f"{f.source}, minus {format_bytes(f.margin_bytes)} kept back", f.margin_bytes)
