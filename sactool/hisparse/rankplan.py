"""The rank plan: which pool target each GPU rank maps, and which slice of it.

One owner for the rule, used by ``tune`` (capacity per rank), ``serve --dry-run`` (the ``plan``
rows) and the ``sactool_cxl`` plug-in (what each scheduler process maps). Pure: no sysfs reads,
no syscalls; the facts about targets come in as :class:`Target` values.

Rules (``pool.rank_assignment``):

* ``round_robin`` — rank ``r`` uses target ``r % n``: the SAC fork's rule (device =
  ``tp_rank % num_devices``, docs/sources.md, field notes §2).
* ``locality`` — rank ``r`` uses a target on its GPU's socket: the ``i``-th rank (in rank order)
  whose GPU sits on CPU node ``c`` takes the ``i % k``-th of the ``k`` targets whose CPU node is
  ``c`` ("each socket's GPUs use that socket's CXL adapter", issue 10). A rank whose socket has no
  target is spread round-robin over all targets, and the plan says so.
* ``packed`` — contiguous blocks of ranks per target (rank ``r`` uses target ``r·n // ranks``).
* ``explicit`` — ``pool.rank_targets`` as given.

Rank ↔ GPU: SGLang 0.5.23 gives tensor-parallel rank ``r`` of a one-node deployment GPU
``base_gpu_id + r · gpu_id_step`` (``managers/data_parallel_controller.py``, ``gpu_id =
base_gpu_id + (tp_rank % tp_size_per_node) · gpu_id_step``, pp = 1). Assumed here: one node,
``gpu_id_step`` 1 (SGLang's default), no pipeline parallelism.

Slices (devdax): the ranks sharing a device each map their own partition of it, like the fork's
per-rank partitions (each rank bump-allocates a disjoint 2 MiB-aligned 1/N of its device,
field-notes §2): partition = ``capacity // ranks_on_device`` rounded down to the device's
``align``; rank ``i`` of the device maps ``[i·partition, (i+1)·partition)``. ``capacity`` is the
device's size, or what ``--pool-bytes`` pins. The pool SGLang asks for must fit the partition.
In NUMA mode the same rows carry no offsets: each rank's pool is placed by the kernel on the node,
``size_bytes`` is the rank's equal share of the node's capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sactool.errors import CapacityError, RecordError

RULES = ("locality", "round_robin", "packed", "explicit")


def node_of(name: str) -> int | None:
    """The NUMA node a pool target's name is (``node2`` → 2), None for a DAX device (``dax0.0``):
    the one place the target-name spelling is read back."""
    return int(name[4:]) if name.startswith("node") and name[4:].isdigit() else None


@dataclass(frozen=True)
class Target:
    """One pool target with the facts the plan needs.

    ``name``: ``node2`` or ``dax0.0``; ``kind``: ``numa`` | ``devdax``; ``capacity_bytes``: what
    the pool may take there (None: unknown) and ``capacity_source`` (where it was read or who
    pinned it); ``align_bytes``: ``daxX.Y/align`` (devdax); ``cpu_node``: the CPU node (socket)
    the target hangs off, with ``cpu_node_evidence``.
    """

    name: str
    kind: str
    capacity_bytes: int | None = None
    capacity_source: str = ""
    align_bytes: int | None = None
    cpu_node: int | None = None
    cpu_node_evidence: str = ""


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


def gpu_of(rank: int, base_gpu_id: int = 0) -> int:
    """SGLang's GPU id of tensor-parallel rank ``rank`` on one node (``gpu_id_step`` 1)."""
    return base_gpu_id + rank


def assign(world: int, targets: Sequence[Target], rule: str, *, rank_cpu_nodes: Sequence[int | None] = (),
           explicit: Sequence[str] = ()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(target name per rank, notes). ``rank_cpu_nodes[r]``: the NUMA node of rank r's GPU.
    The rules themselves live in :mod:`sactool.hisparse.placement`."""
    from sactool.hisparse import placement

    names = [t.name for t in targets]
    if rule not in RULES:
        raise RecordError(f"profile field pool.rank_assignment: unknown rule {rule!r}", f"use one of {', '.join(RULES)}")
    if rule == "explicit":
        if len(explicit) != world:
            raise RecordError(f"profile field pool.rank_targets: {len(explicit)} entries for {world} ranks",
                              "list one target per rank, or use round_robin")
        return tuple(explicit), ()
    if not names:
        raise RecordError("profile field pool.nodes / pool.dax_devices: no pool target",
                          "name the node(s) or DAX device(s) that hold the pool")
    if rule in placement.RULES:
        return tuple(names[placement.target_index(rule, r, world, len(names))] for r in range(world)), ()
    if len(rank_cpu_nodes) != world or any(n is None for n in rank_cpu_nodes):
        raise RecordError("pool.rank_assignment locality needs the NUMA node of each rank's GPU (pool.gpu_local_nodes)",
                          "set pool.gpu_local_nodes (sactool tune fills it from the GPUs probe sees), or use "
                          "pool.rank_assignment round_robin")
    known = [n for n in rank_cpu_nodes if n is not None]   # every one, by the check above
    p, notes = placement.locality(known, names, {t.name: t.cpu_node for t in targets})
    return p.rank_targets, notes


def _align_down(n: int, unit: int) -> int:
    return n // unit * unit


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
    slots = []
    for r, n in enumerate(names):
        t = by_name[n]
        ranks = sharing[n]
        i = ranks.index(r)
        size = offset = None
        if t.capacity_bytes is not None:
            if t.kind == "devdax":
                align = t.align_bytes or 1
                size = _align_down(t.capacity_bytes // len(ranks), align)
                offset = i * size
            else:
                size = t.capacity_bytes // len(ranks)
        if size is not None and pool_bytes_per_rank is not None and pool_bytes_per_rank > size:
            what = (f"its {len(ranks)}-way slice of {n} ({size} bytes, align {t.align_bytes})" if t.kind == "devdax"
                    else f"its share of {n} ({size} bytes: {t.capacity_bytes} over {len(ranks)} ranks)")
            raise CapacityError(f"rank {r}'s host pool of {pool_bytes_per_rank} bytes ({pool_source or 'the profile'}) "
                                f"does not fit {what}; capacity from {t.capacity_source or 'unknown'}",
                                "lower hisparse.host_to_device_ratio or sglang.max_running_requests in the profile "
                                "(sactool tune), spread ranks over more targets, or use larger devices")
        if t.kind == "devdax" and size is not None and size <= 0:
            raise CapacityError(f"{n} ({t.capacity_bytes} bytes, align {t.align_bytes}) cannot give {len(ranks)} ranks "
                                "an aligned slice each", "map fewer ranks onto it")
        slots.append(RankSlot(r, gpu_of(r, base_gpu_id), n, t.kind, offset if t.kind == "devdax" else None, size,
                              t.cpu_node))
    return RankPlan(rule, tuple(slots), notes)


def check_disjoint(p: RankPlan, targets: Sequence[Target]) -> None:
    """ValueError unless every devdax slice is aligned, inside its device and disjoint from the
    others (a property of :func:`plan`, checked again where slices are mapped)."""
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
