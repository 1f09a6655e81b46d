"""Momentary readings of the pool's memory, kept apart from the probed structure.

A topology (nodes, DAX devices, their sockets and sizes) is structure: probed once, it holds for
the life of a process and a recording replays it. How much of a node is free is a reading: it
moves with every allocation on the machine, so it is taken where a decision needs it — when the
rank plan sizes a node's share (:func:`sactool.pool.targets.target_facts`) and again when the
plug-in answers the engine's host-memory check just before it allocates
(:meth:`sactool.pool.placer.HostPoolPlacer.pool_budget`). Both read it here, with one rule:
:func:`sactool.memory.nodes.free_estimate` (``nodeN/meminfo`` MemFree plus the node's
reclaimable page cache, plus free memory ``/proc/meminfo`` counts but no node reports) minus the
safety margin kept back there (``FreeEstimate.room_bytes``). A node's ``MemFree`` is read again
for each reading (:func:`now`), not taken from the probed structure: a pool this process placed
since the probe is no longer free, and a second pool's answer must count it.
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


def now(topo, reader):
    """``topo`` with every node's ``MemFree`` read again from ``nodeN/meminfo`` (a node whose meminfo
    cannot be read keeps the probed figure): the structure stays, the reading is this moment's."""
    import dataclasses

    from sactool.memory.nodes import NODE_DIR

    nodes: list = []
    moved = False
    for n in topo.nodes:
        free = (reader.kv(f"{NODE_DIR}/node{n.id}/meminfo") or {}).get("MemFree")
        if free is not None and free != n.mem_free_bytes:
            n, moved = dataclasses.replace(n, mem_free_bytes=free), True
        nodes.append(n)
    return dataclasses.replace(topo, nodes=tuple(nodes)) if moved else topo


def node_room(topo, reader, nid: int) -> Room:
    """Node ``nid``'s room now: its free estimate (``MemFree`` read now, :func:`now`) minus the margin
    kept back."""
    from sactool.memory import nodes as memnodes

    f = memnodes.free_estimate(now(topo, reader), reader, nid)
    if f.bytes is None:
        return Room(nid, None, f.source)
    return Room(nid, f.room_bytes, f"{f.source}, minus {format_bytes(f.margin_bytes)} kept back", f.margin_bytes)


def hugepage_room(reader, nid: int, page_bytes: int) -> Room:
    """Node ``nid``'s free huge pages of ``page_bytes`` now (``nodeN/hugepages/hugepages-<kB>kB/
    free_hugepages``, read at this moment: pools placed since the probe took theirs), in bytes."""
    from sactool.memory.nodes import NODE_DIR

    rel = f"{NODE_DIR}/node{nid}/hugepages/hugepages-{page_bytes // 1024}kB/free_hugepages"
    free = reader.int(rel)
    label = {2 << 20: "2MB", 1 << 30: "1GB"}.get(page_bytes, format_bytes(page_bytes))
    if free is None:
        return Room(nid, None, f"node{nid}'s free {label} huge pages: unreadable ({reader.why(rel)})")
    return Room(nid, free * page_bytes, f"node{nid}'s free {label} huge pages ({free}, read now)")
