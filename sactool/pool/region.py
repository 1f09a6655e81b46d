"""A pool region that several ranks map together (vLLM's one host pool per DP replica, read by its
TP ranks): bound to its node before the engine's first touch, verified rank by rank after it, or
mapped from the owner's slice of a DAX device. Engine-neutral: a mapping and a plan in, facts out.

* :func:`bind` — ``mbind`` the whole mapping with the plan's policy before any page of it exists.
  On a shared tmpfs object (``/dev/shm`` files, as vLLM's ``SharedOffloadRegion``) the kernel keeps
  the policy on the object, so every rank's first touch obeys it, whichever rank faults the page.
* :func:`verify` — ``move_pages`` over a range of the mapping (every page up to a bound, else an even
  sample): which node holds each page; pages another rank faulted and this one has not mapped yet
  count as not mapped (``-ENOENT``), not as misplaced.
* :func:`map_slice` — the owner's devdax slice (or the file standing in for the device,
  ``$SACTOOL_DEVDAX_STANDIN``), ``MAP_SHARED`` at the plan's offset: the ranks of one owner map the
  same bytes.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass, field
from typing import Any

VERIFY_PAGES_UP_TO = 1 << 20
"""Pages checked per range: every one up to this many (4 GiB of 4 KiB pages), else an even sample."""


def address(mm: mmap.mmap) -> int:
    c = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(c)
    finally:
        del c


def policy_nodes(plan: Any, settings: Any) -> tuple[int, list[int]]:
    """(mbind mode, nodes) of a NUMA plan: bind or preferred to its node, interleave over the
    weighted-interleave nodes (one mbind cannot give per-node weights: plain interleave)."""
    from sactool.memory import syscalls as sc

    if plan.policy == "weighted_interleave":
        return sc.MPOL_INTERLEAVE, sorted(settings.interleave_weights)
    if plan.policy == "preferred":
        return sc.MPOL_PREFERRED, [plan.node]
    return sc.MPOL_BIND, [plan.node]


def bind(mm: mmap.mmap, plan: Any, settings: Any) -> list[int]:
    """mbind all of ``mm`` to the plan's node(s) with its policy; the nodes bound to."""
    from sactool.memory import syscalls as sc

    mode, nodes = policy_nodes(plan, settings)
    sc.mbind(address(mm), len(mm), mode, nodes)
    return nodes


@dataclass(frozen=True)
class RangeCheck:
    """Which node holds each checked page of ``[offset, offset + length)`` of a mapping."""

    address: int
    offset: int
    length: int
    pages_checked: int
    node_pages: dict[int, int] = field(default_factory=dict)   # node -> pages; negative: -errno
    expected: tuple[int, ...] = ()

    @property
    def fraction(self) -> float:
        good = sum(v for k, v in self.node_pages.items() if k in self.expected)
        return good / self.pages_checked if self.pages_checked else 0.0

    def describe(self) -> str:
        return ", ".join(f"node{k}: {v}" if k >= 0 else f"errno{-k}: {v}" for k, v in sorted(self.node_pages.items()))


def verify(mm: mmap.mmap, offset: int, length: int, expected: list[int]) -> RangeCheck:
    """``move_pages`` over ``[offset, offset + length)`` of ``mm``."""
    import numpy as np

    from sactool.memory import syscalls as sc

    base = address(mm)
    page = mmap.PAGESIZE
    n = length // page
    step = max(1, -(-n // VERIFY_PAGES_UP_TO))
    idx = np.arange(0, n, step, dtype=np.uint64)
    addrs = np.uint64(base + offset) + idx * np.uint64(page)
    counts: dict[int, int] = {}
    for s in range(0, len(addrs), 1 << 18):
        for st in sc.page_nodes(addrs[s:s + (1 << 18)]):
            counts[int(st)] = counts.get(int(st), 0) + 1
    return RangeCheck(base, offset, length, len(idx), counts, tuple(expected))


def map_slice(plan: Any, size_bytes: int, *, reader: Any = None, offset_bytes: int | None = None) -> Any:
    """``size_bytes`` of the owner's slice of its DAX device (``plan.slot``) mapped MAP_SHARED from
    ``offset_bytes`` (a device offset inside the slice; default the slice's start): a
    :class:`sactool.memory.PlacedBuffer` (``offset_bytes``, ``path``); ValueError when that does not
    lie inside the slice or no slice is planned. Which stretch of the slice is free is the placer's
    to say (:meth:`sactool.pool.placer.HostPoolPlacer.map_slice`: a second pool of the process maps
    after the first, never over it)."""
    from sactool.memory import map_devdax, map_shared
    from sactool.pool.contract import STANDIN_ENV, standin_devices

    slot = plan.slot
    if slot is None or slot.size_bytes is None:
        raise ValueError(f"no slice of {plan.target} is planned for pool {plan.rank}")
    start = slot.offset_bytes or 0
    offset = start if offset_bytes is None else offset_bytes
    if offset < start or offset + size_bytes > start + slot.size_bytes:
        raise ValueError(f"pool {plan.rank} needs {size_bytes} bytes"
                         + (f" at offset {offset}" if offset != start else "")
                         + f", its slice of {plan.target} holds {slot.size_bytes}"
                         + (f" from offset {start}" if offset != start else ""))
    stand = standin_devices().get(plan.target)
    if stand:
        return map_shared(stand["path"], os.stat(stand["path"]).st_size, stand["align_bytes"], size_bytes,
                          offset_bytes=offset, name=plan.target,
                          note=f"a file standing in for /dev/{plan.target} (${STANDIN_ENV})")
    return map_devdax(plan.target, size_bytes, offset_bytes=offset, reader=reader)


def zero(mm: mmap.mmap, start: int, length: int) -> None:
    """Write zeroes over ``[start, start + length)`` of ``mm`` (faulting every page of it)."""
    import numpy as np

    arr = np.frombuffer(mm, dtype=np.uint8, count=length, offset=start)
    arr[:] = 0
    del arr


__all__ = ["RangeCheck", "VERIFY_PAGES_UP_TO", "address", "bind", "map_slice", "policy_nodes", "verify", "zero"]
