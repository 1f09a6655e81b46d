"""The rank plan: which pool target each GPU rank maps, and which slice of it.

One owner for the rank rules (:data:`RULES`, the one table) and the slice rule
(:func:`slice_bytes`), used by ``tune`` (candidate placements, the partition per rank), ``serve
--dry-run`` (the ``plan`` rows), ``tune --fleet`` (a host's slices) and the plug-ins (what each
rank maps). Pure: no sysfs reads, no syscalls; the facts about targets come in as
:class:`~sactool.pool.targets.Target` values.

Rules (``pool.rank_assignment``; the spellings a profile accepts are
:data:`sactool.profile.RANK_ASSIGNMENTS`, checked against this table at import):

* ``round_robin`` — rank ``r`` uses target ``r % n``: the SAC fork's rule (device =
  ``tp_rank % num_devices``, docs/sources.md, field notes §2; 2 devices gave +9.2% over 1).
* ``packed`` — contiguous blocks of ranks per target (rank ``r`` uses target ``r·n // ranks``),
  leaving other targets free for other tenants; tune packs onto ``k ≤ n`` targets and writes the
  resolved ``pool.rank_targets``.
* ``locality`` — rank ``r`` uses a target on its GPU's socket: the ``i``-th rank (in rank order)
  whose GPU sits on CPU node ``c`` takes the ``i % k``-th of the ``k`` targets whose CPU node is
  ``c`` ("each socket's GPUs use that socket's CXL adapter", issue 10). A rank whose socket has no
  target is spread round-robin over all targets, and the plan says so.
* ``explicit`` — ``pool.rank_targets`` as given.

Rank ↔ GPU: SGLang 0.5.23 gives tensor-parallel rank ``r`` of a one-node deployment GPU
``base_gpu_id + r · gpu_id_step`` (``managers/data_parallel_controller.py``, ``gpu_id =
base_gpu_id + (tp_rank % tp_size_per_node) · gpu_id_step``, pp = 1). Assumed here: one node,
``gpu_id_step`` 1 (SGLang's default), no pipeline parallelism.

Slices (the one slice rule, :func:`slice_bytes`): the ranks sharing a target each get an equal
partition of its capacity, rounded down to the target's ``align`` (a DAX device; a node has
none) — like the fork's per-rank partitions (each rank bump-allocates a disjoint 2 MiB-aligned
1/N of its device, field-notes §2). On a DAX device rank ``i`` of the device maps ``[i·partition,
(i+1)·partition)``; on a node the same rows carry no offsets: the kernel places each rank's pool
and ``size_bytes`` is the rank's share of the node's capacity. The pool the engine asks for must
fit the partition.

Known poison (a DAX device's poisoned ranges, :attr:`Target.poison`, from the devices' poison lists)
is carved around (:func:`carve`): every align block holding a poisoned byte is skipped, and the
slices — still disjoint, aligned and equal in size per sharer — are the largest that fit the clean
extents, laid out from the device's start; without poison this is the partition above. What is
left must still hold the pool (else CapacityError, as for a device too small); clearing the poison
restores the plain slices. serve reads the lists once and hands the same set to every rank
(:data:`sactool.pool.contract.POISON_ENV`), so all sharers carve alike.

A pool shared by several ranks (one region mapped by all of them, as vLLM's shared HiSparse
pool per DP replica) is not a rule here yet: a shared region is one slot whose ranks are a group,
added beside :class:`RankSlot` when an engine needs it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from sactool.errors import CapacityError, RecordError
from sactool.pool.targets import Target


@dataclass(frozen=True)
class Rule:
    """One rank rule: ``needs`` what beyond the rank and the target count (``""``, ``gpu_nodes``
    — the socket of each rank's GPU —, or ``rank_targets``); ``index``: the target index of rank
    ``r`` of ``ranks`` among ``n`` targets, for the rules that need nothing else."""

    name: str
    needs: str
    index: Callable[[int, int, int], int] | None
    doc: str


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("locality", "gpu_nodes", None, "a target on the socket of the rank's GPU"),
    Rule("round_robin", "", lambda r, ranks, n: r % n, "rank r uses target r % n (SAC)"),
    Rule("packed", "", lambda r, ranks, n: r * n // ranks, "contiguous blocks of ranks per target"),
    Rule("explicit", "rank_targets", None, "pool.rank_targets as given"),
)}
"""The rank rules, in the order ``pool.rank_assignment`` lists them."""


def _same_vocabulary() -> None:
    from sactool.profile import RANK_ASSIGNMENTS

    if tuple(RULES) != tuple(RANK_ASSIGNMENTS):   # the profile's schema spells what this table does
        raise ImportError(f"sactool.pool.rankplan.RULES {tuple(RULES)} differ from the profile's "
                          f"RANK_ASSIGNMENTS {tuple(RANK_ASSIGNMENTS)}")


_same_vocabulary()


def target_index(rule: str, rank: int, ranks: int, targets: int) -> int:
    """Index of the target rank ``rank`` of ``ranks`` maps among ``targets`` under ``rule`` (a rule
    that needs nothing else: round_robin, packed)."""
    r = RULES.get(rule)
    if r is None or r.index is None:
        simple = ", ".join(n for n, x in RULES.items() if x.index is not None)
        raise ValueError(f"rank assignment {rule!r} needs more than the rank and the target count; rules: {simple}")
    return r.index(rank, ranks, targets)


def slice_bytes(capacity_bytes: int, sharers: int, align_bytes: int | None = None,
                poison: Sequence[tuple[int, int]] = ()) -> int:
    """The slice rule: ``capacity_bytes`` split equally over ``sharers`` ranks, rounded down to
    ``align_bytes`` (a DAX device's align; None or 1 for a node); with known ``poison`` ((offset,
    length) ranges of a DAX device) the size of the slices :func:`carve` cuts around it."""
    if poison:
        return carve(capacity_bytes, sharers, align_bytes, poison).size_bytes
    unit = align_bytes or 1
    return capacity_bytes // sharers // unit * unit


@dataclass(frozen=True)
class Carve:
    """The slices of one DAX device under the slice rule: ``size_bytes`` each, the i-th sharer's at
    ``offsets[i]``. ``skipped``: the ``[start, end)`` stretches of whole align blocks left out because
    they hold known ``poison`` (``(offset, length)`` in the device); ``plain_bytes``: the slice without
    poison, for saying what carving cost."""

    capacity_bytes: int
    sharers: int
    align_bytes: int
    size_bytes: int
    offsets: tuple[int, ...]
    skipped: tuple[tuple[int, int], ...] = ()
    poison: tuple[tuple[int, int], ...] = ()
    plain_bytes: int = 0

    @property
    def changed(self) -> bool:
        """Whether the poison moved or shrank any slice (poison in the tail no slice reaches does not)."""
        plain = tuple(i * self.plain_bytes for i in range(self.sharers)) if self.plain_bytes else ()
        return self.size_bytes != self.plain_bytes or self.offsets != plain

    def describe(self, target: str) -> str:
        """``dax0.0: skipped [0x10000000, 0x10200000) (poison at +0x10001000, 64 B); 2 slices of …``."""
        from sactool.units import format_bytes

        skip = ", ".join(f"[{a:#x}, {b:#x})" for a, b in self.skipped)
        pois = ", ".join(f"+{o:#x}, {n} B" for o, n in self.poison)
        head = f"{target}: skipped {skip} (the {format_bytes(self.align_bytes)} align blocks holding poison at {pois})"
        slices = f"{self.sharers} slice{'s' if self.sharers > 1 else ''}"
        if not self.offsets:
            return head + f"; what is left cannot give {slices} of one align block"
        if not self.changed:
            return head + f"; no slice reaches it: {slices} of {format_bytes(self.size_bytes)} as without poison"
        return (head + f"; {slices} of {format_bytes(self.size_bytes)} ({format_bytes(self.plain_bytes)} without "
                "poison) at offsets " + ", ".join(f"{o:#x}" for o in self.offsets))


def poisoned_blocks(capacity_bytes: int, align_bytes: int | None, poison: Sequence[tuple[int, int]],
                    ) -> tuple[tuple[int, int], ...]:
    """The ``[first, end)`` align-block index ranges of a device of ``capacity_bytes`` that hold any
    byte of ``poison`` (``(offset, length)``; a length below 1 counts as 1 byte), merged and sorted;
    only whole blocks inside the capacity count (a slice never reaches the partial tail)."""
    unit = align_bytes or 1
    blocks = capacity_bytes // unit
    spans = []
    for off, length in poison:
        if off < 0 or off >= blocks * unit:
            continue
        spans.append((off // unit, min(blocks, (off + max(length, 1) - 1) // unit + 1)))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return tuple(merged)


def carve(capacity_bytes: int, sharers: int, align_bytes: int | None = None,
          poison: Sequence[tuple[int, int]] = ()) -> Carve:
    """The slice rule over a device's poison-free extents: every align block holding known poison is
    skipped; the slices stay disjoint, aligned and equal in size per sharer (as SAC's per-rank
    partitions), the largest size for which ``sharers`` slices fit in the clean extents, laid out
    from the device's start, the i-th sharer's first. Without poison: ``[i·s, (i+1)·s)`` with
    ``s = capacity // sharers`` aligned down — the plain rule. ``offsets`` is empty when what is
    left cannot give every sharer one aligned block."""
    unit = align_bytes or 1
    blocks = capacity_bytes // unit
    plain = blocks // sharers * unit if sharers > 0 else 0
    bad = poisoned_blocks(capacity_bytes, unit, poison)
    extents, at = [], 0
    for a, b in bad:
        if a > at:
            extents.append((at, a))
        at = b
    if blocks > at:
        extents.append((at, blocks))

    def fits(k: int) -> int:
        return sum((b - a) // k for a, b in extents)

    lo, hi = 0, (max((b - a for a, b in extents), default=0) if sharers > 0 else 0)
    while lo < hi:                 # the largest k blocks per slice with fits(k) >= sharers (monotone in k)
        mid = (lo + hi + 1) // 2
        if fits(mid) >= sharers:
            lo = mid
        else:
            hi = mid - 1
    offsets: list[int] = []
    if lo:
        for a, b in extents:
            for i in range((b - a) // lo):
                if len(offsets) < sharers:
                    offsets.append((a + i * lo) * unit)
    skipped = tuple((a * unit, b * unit) for a, b in bad)
    kept = tuple(sorted((o, n) for o, n in poison if 0 <= o < blocks * unit))
    return Carve(capacity_bytes, sharers, unit, lo * unit, tuple(offsets), skipped, kept, plain)


def gpu_of(rank: int, base_gpu_id: int = 0) -> int:
    """SGLang's GPU id of tensor-parallel rank ``rank`` on one node (``gpu_id_step`` 1)."""
    return base_gpu_id + rank


# ------------------------------------------------------------------------------------------
# placements: target name per rank (tune's candidates; the plan's first step)
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """``strategy``: a rule of :data:`RULES`; ``rank_targets``: target name per rank."""

    strategy: str
    rank_targets: tuple[str, ...]

    @property
    def label(self) -> str:
        used = len(set(self.rank_targets))
        return f"{self.strategy}/{used}" if self.strategy == "packed" else self.strategy

    def ranks_per_target(self) -> dict[str, int]:
        return dict(Counter(self.rank_targets))


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
            out.append(targets[target_index("round_robin", r, len(rank_nodes), len(targets))])
            notes.append(f"rank {r}: no pool target on the socket of its GPU (node{node}); round-robin gives {out[-1]}")
    return Placement("locality", tuple(out)), tuple(notes)


def by_rule(rule: str, ranks: int, targets: Sequence[str]) -> Placement:
    """Every rank's target under a rule that needs nothing else (round_robin; packed over all of
    ``targets`` — pass fewer to pack onto fewer)."""
    if not targets:
        raise ValueError("no pool targets")
    return Placement(rule, tuple(targets[target_index(rule, r, ranks, len(targets))] for r in range(ranks)))


def round_robin(ranks: int, targets: Sequence[str]) -> Placement:
    return by_rule("round_robin", ranks, targets)


def packed(ranks: int, targets: Sequence[str], k: int) -> Placement:
    if not 1 <= k <= len(targets):
        raise ValueError(f"k={k} outside 1..{len(targets)}")
    return by_rule("packed", ranks, targets[:k])


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


def pool_bytes_per_rank(placement: Placement, targets: Sequence[Target]) -> int:
    """The smallest per-rank partition of ``placement``: each used target's capacity under the
    slice rule (:func:`slice_bytes`) — the slices :func:`plan` cuts."""
    by = {t.name: t for t in targets}
    return min(slice_bytes(_known_capacity(by[name]), n, by[name].align_bytes,
                           (by[name].poison or ()) if by[name].kind == "devdax" else ())
               for name, n in placement.ranks_per_target().items())


def _known_capacity(t: Target) -> int:
    if t.capacity_bytes is None:
        raise ValueError(f"pool target {t.name}: capacity unknown ({t.capacity_source or 'no source'})")
    return t.capacity_bytes


def assign(world: int, targets: Sequence[Target], rule: str, *, rank_cpu_nodes: Sequence[int | None] = (),
           explicit: Sequence[str] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(target name per rank, notes) under ``rule``. ``rank_cpu_nodes[r]``: the NUMA node of rank
    r's GPU (locality); ``explicit``: the target of each rank (explicit)."""
    names = [t.name for t in targets]
    r = RULES.get(rule)
    if r is None:
        raise RecordError(f"profile field pool.rank_assignment: unknown rule {rule!r}", f"use one of {', '.join(RULES)}")
    if r.needs == "rank_targets":
        if len(explicit) != world:
            raise RecordError(f"profile field pool.rank_targets: {len(explicit)} entries for {world} ranks",
                              "list one target per rank, or use round_robin")
        return tuple(explicit), ()
    if not names:
        raise RecordError("profile field pool.nodes / pool.dax_devices: no pool target",
                          "name the node(s) or DAX device(s) that hold the pool")
    if not r.needs:
        return by_rule(rule, world, names).rank_targets, ()
    if len(rank_cpu_nodes) != world or any(n is None for n in rank_cpu_nodes):
        raise RecordError("pool.rank_assignment locality needs the NUMA node of each rank's GPU (pool.gpu_local_nodes)",
                          "set pool.gpu_local_nodes (sactool tune fills it from the GPUs probe sees), or use "
                          "pool.rank_assignment round_robin")
    known = [n for n in rank_cpu_nodes if n is not None]   # every one, by the check above
    p, notes = locality(known, names, {t.name: t.cpu_node for t in targets})
    return p.rank_targets, notes


# ------------------------------------------------------------------------------------------
# the plan: target and slice per rank
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankSlot:
    """One row of the plan (``serve --dry-run`` JSON ``plan``)."""

    rank: int
    gpu: int
    target: str
    kind: str
    offset_bytes: int | None
    size_bytes: int | None
    cpu_node: int | None

    def to_data(self) -> dict:
        return {"rank": self.rank, "gpu": self.gpu, "target": self.target, "kind": self.kind,
                "offset_bytes": self.offset_bytes, "size_bytes": self.size_bytes, "cpu_node": self.cpu_node}


@dataclass(frozen=True)
class RankPlan:
    rule: str
    slots: tuple[RankSlot, ...]
    notes: tuple[str, ...] = ()
    carved: tuple[tuple[str, Carve], ...] = ()   # (DAX device, its slices) where known poison was skipped

    def carve_lines(self) -> list[str]:
        """One line per DAX device whose slices were cut around known poison (:meth:`Carve.describe`)."""
        return [c.describe(name) for name, c in self.carved]

    @property
    def total_bytes(self) -> int | None:
        """The capacity plan: the sum of every rank's slice (None when a capacity is unknown)."""
        sizes = [s.size_bytes for s in self.slots]
        known = [v for v in sizes if v is not None]
        return None if len(known) < len(sizes) else sum(known)

    def slot(self, rank: int) -> RankSlot:
        return self.slots[rank]

    def ranks_by_target(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for s in self.slots:
            out.setdefault(s.target, []).append(s.rank)
        return out

    def to_data(self) -> list[dict]:
        return [s.to_data() for s in self.slots]


def plan(world: int, targets: Sequence[Target], rule: str, *, rank_cpu_nodes: Sequence[int | None] = (),
         explicit: Sequence[str] = (), base_gpu_id: int = 0, pool_bytes_per_rank: int | None = None,
         pool_source: str = "") -> RankPlan:
    """The rank plan; CapacityError when a rank's pool (``pool_bytes_per_rank``) does not fit its
    slice, RecordError when a rank names a target that is not in ``targets``."""
    by_name = {t.name: t for t in targets}
    names, notes = assign(world, targets, rule, rank_cpu_nodes=rank_cpu_nodes, explicit=explicit)
    sharing: dict[str, list[int]] = {}
    for r, n in enumerate(names):
        if n not in by_name:
            raise RecordError(f"profile field pool.rank_targets[{r}]: {n} is not among the pool's targets "
                              f"({', '.join(by_name) or 'none'})", "fix pool.rank_targets")
        sharing.setdefault(n, []).append(r)
    carved = {n: c for n, c in ((n, _carve(by_name[n], len(rs))) for n, rs in sharing.items()) if c is not None}
    slots = []
    for r, n in enumerate(names):
        t = by_name[n]
        ranks = sharing[n]
        c = carved.get(n)
        size = None if t.capacity_bytes is None else c.size_bytes if c is not None else \
            slice_bytes(t.capacity_bytes, len(ranks), t.align_bytes)
        offset = None if size is None or t.kind != "devdax" else \
            (c.offsets[ranks.index(r)] if c.offsets else 0) if c is not None else ranks.index(r) * size
        around = f", carved around known poison ({c.describe(n)})" if c is not None else ""
        if size is not None and pool_bytes_per_rank is not None and pool_bytes_per_rank > size:
            what = (f"its {len(ranks)}-way slice of {n} ({size} bytes, align {t.align_bytes}{around})" if t.kind == "devdax"
                    else f"its share of {n} ({size} bytes: {t.capacity_bytes} over {len(ranks)} ranks)")
            raise CapacityError(f"rank {r}'s host pool of {pool_bytes_per_rank} bytes ({pool_source or 'the profile'}) "
                                f"does not fit {what}; capacity from {t.capacity_source or 'unknown'}",
                                "lower hisparse.host_to_device_ratio or sglang.max_running_requests in the profile "
                                "(sactool tune), spread ranks over more targets, or use larger devices"
                                + ("; once the poisoned data is rewritten, clearing the poison restores the whole "
                                   "slices" if c is not None else ""))
        if t.kind == "devdax" and size is not None and size <= 0:
            raise CapacityError(f"{n} ({t.capacity_bytes} bytes, align {t.align_bytes}) cannot give {len(ranks)} ranks "
                                f"an aligned slice each{around}", "map fewer ranks onto it")
        slots.append(RankSlot(r, gpu_of(r, base_gpu_id), n, t.kind, offset, size, t.cpu_node))
    return RankPlan(rule, tuple(slots), notes, tuple((n, carved[n]) for n in sharing if n in carved))


def _carve(t: Target, sharers: int) -> Carve | None:
    """The slices of DAX device ``t`` cut around its known poison (:func:`carve`); None for a node, a
    device of unknown size or one without known poison inside its capacity."""
    if t.kind != "devdax" or t.capacity_bytes is None or not t.poison:
        return None
    c = carve(t.capacity_bytes, sharers, t.align_bytes, t.poison)
    return c if c.skipped else None


def check_disjoint(p: RankPlan, targets: Sequence[Target]) -> None:
    """ValueError unless every devdax slice is aligned, inside its device, disjoint from the others
    and clear of the device's known poison (a property of :func:`plan`, checked again where slices
    are mapped)."""
    by_name = {t.name: t for t in targets}
    for name, ranks in p.ranks_by_target().items():
        t = by_name[name]
        if t.kind != "devdax" or t.capacity_bytes is None:
            continue
        sl = sorted((p.slots[r].offset_bytes or 0, p.slots[r].size_bytes or 0) for r in ranks)
        for (o, s), nxt in zip(sl, sl[1:] + [(t.capacity_bytes, 0)]):
            if o % (t.align_bytes or 1) or s % (t.align_bytes or 1):
                raise ValueError(f"{name}: slice at {o} of {s} bytes is not aligned to {t.align_bytes}")
            if o + s > nxt[0]:
                raise ValueError(f"{name}: slice at {o} of {s} bytes overlaps the next one or leaves the device")
            hit = next(((po, n) for po, n in t.poison or () if po < o + s and o < po + max(n, 1)), None)
            if hit is not None:
                raise ValueError(f"{name}: slice at {o} of {s} bytes holds known poison at +{hit[0]:#x} ({hit[1]} B)")
