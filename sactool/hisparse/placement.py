"""Rank → pool target placement (CXL NUMA node or DAX device).

* ``round_robin``: rank ``r`` uses target ``r % n`` — what SAC does ("rank-based
  ``tp_rank % num_devices``", docs/sources.md, SAC §5; 2 devices gave +9.2% over 1);
* ``packed``: consecutive ranks fill the first ``k ≤ n`` targets in blocks (rank ``r`` uses target
  ``r·k // ranks``), leaving the other targets free for other tenants. ``sactool tune`` writes the
  resolved ``pool.rank_targets``; a profile that says ``packed`` without them packs over every
  listed target (``k = n``) — the same rule, :func:`target_index`.

* ``locality``: rank ``r`` uses a target on its GPU's socket — the ``i``-th rank (in rank order)
  whose GPU sits on CPU node ``c`` takes the ``i % k``-th of the ``k`` targets whose CPU node is
  ``c`` ("each socket's GPUs use that socket's CXL adapter"); a rank whose socket has no target
  falls back to round-robin over all targets, and says so (:func:`locality`).

Ranks sharing a target split its capacity in equal partitions (one per rank, as SAC partitions a
device per rank) and share its gather bandwidth.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from sactool.hisparse.capacity import PoolTarget

RULES = ("round_robin", "packed")       # rules that need nothing but the rank and the target count


@dataclass(frozen=True)
class Placement:
    """``strategy``: round_robin | packed; ``rank_targets``: target name per rank."""

    strategy: str
    rank_targets: tuple[str, ...]

    @property
    def label(self) -> str:
        used = len(set(self.rank_targets))
        return f"{self.strategy}/{used}" if self.strategy == "packed" else self.strategy

    def ranks_per_target(self) -> dict[str, int]:
        return dict(Counter(self.rank_targets))


def target_index(rule: str, rank: int, ranks: int, targets: int) -> int:
    """Index of the target rank ``rank`` of ``ranks`` maps among ``targets`` under ``rule``."""
    if rule == "packed":
        return rank * targets // ranks
    if rule == "round_robin":
        return rank % targets
    raise ValueError(f"unknown rank assignment {rule!r}; rules: {', '.join(RULES)}")


def locality(rank_nodes: Sequence[int], targets: Sequence[str], target_nodes: Mapping[str, int | None],
             ) -> tuple[Placement, tuple[str, ...]]:
    """Rank ``r`` (whose GPU is on NUMA node ``rank_nodes[r]``) on a target of that socket
    (``target_nodes[t]``: the CPU node target ``t`` hangs off); (placement, fallback notes)."""
    if not targets:
        raise ValueError("no pool targets")
    seen: dict[int, int] = {}
    out: list[str] = []
    notes: list[str] = []
    for r, node in enumerate(rank_nodes):
        local = [t for t in targets if target_nodes.get(t) is not None and target_nodes.get(t) == node]
        i = seen.get(node, 0)
        seen[node] = i + 1
        if local:
            out.append(local[i % len(local)])
        else:
            out.append(targets[r % len(targets)])
            notes.append(f"rank {r}: no pool target on the socket of its GPU (node{node}); round-robin gives {out[-1]}")
    return Placement("locality", tuple(out)), tuple(notes)


def round_robin(ranks: int, targets: Sequence[str]) -> Placement:
    if not targets:
        raise ValueError("no pool targets")
    return Placement("round_robin", tuple(targets[target_index("round_robin", r, ranks, len(targets))]
                                          for r in range(ranks)))


def packed(ranks: int, targets: Sequence[str], k: int) -> Placement:
    if not 1 <= k <= len(targets):
        raise ValueError(f"k={k} outside 1..{len(targets)}")
    return Placement("packed", tuple(targets[target_index("packed", r, ranks, k)] for r in range(ranks)))


def candidates(ranks: int, targets: Sequence[str], *, rank_nodes: Sequence[int | None] = (),
               target_nodes: Mapping[str, int | None] | None = None) -> list[Placement]:
    """Round-robin over all targets, and packed on each smaller number of targets; with the NUMA
    node of every rank's GPU (``rank_nodes``) and every target's socket, locality first."""
    out = [round_robin(ranks, targets)]
    known = [n for n in rank_nodes if n is not None]
    if (len(rank_nodes) == ranks and len(known) == ranks and target_nodes
            and any(v is not None for v in target_nodes.values())):
        loc, notes = locality(known, targets, target_nodes)
        if not notes:      # every rank has a target on its socket
            out.insert(0, loc)
    for k in range(1, min(len(targets), ranks)):
        out.append(packed(ranks, targets, k))
    return out


def pool_bytes_per_rank(placement: Placement, targets: Sequence[PoolTarget]) -> int:
    """The smallest per-rank partition: each used target's capacity split over its ranks, rounded
    down to the target's align (a DAX device's slices start and end on it; the rank plan,
    :mod:`sactool.hisparse.rankplan`, cuts the same slices)."""
    by = {t.name: t for t in targets}
    return min(by[name].capacity_bytes // n // (by[name].align_bytes or 1) * (by[name].align_bytes or 1)
               for name, n in placement.ranks_per_target().items())
