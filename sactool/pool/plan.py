"""The pool a deployment asks for (:class:`PoolSpec`: pool settings, world size, per-rank byte
budget — never a whole profile), its rank plan over the targets' facts, and what the plug-in does
for one rank (:class:`PoolPlan`).

Shared by the launcher (capacity checks, ``--dry-run``), simulate (which target a rank maps) and
the plug-ins (inside each engine rank), so all read the pool the same way. No torch, no numpy.
The rank rules and the slice rule are :mod:`sactool.pool.rankplan`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sactool.errors import RecordError
from sactool.pool.rankplan import RankPlan, RankSlot, assign, plan, target_index
from sactool.pool.targets import Target, node_of, pinned, target_names


@dataclass(frozen=True)
class PoolSpec:
    """What the pool is, engine-neutral: ``settings`` (:class:`sactool.profile.PoolSettings`),
    ``world`` (ranks that each allocate a pool), ``base_gpu_id`` (rank r runs on GPU base + r), and
    the per-rank byte budget the engine will ask for (``bytes_per_rank``, None when no file
    holds it) with ``bytes_source``. ``sizing``: the engine's own sizing record (the profile's
    :class:`sactool.profile.sizing.HostSizing`), carried for reports. ``cpu_nodes``: the GPU
    socket of each pool owner where an owner is not one GPU rank (vLLM's pool shared by a DP
    replica: its first GPU's); None: ``settings.gpu_local_nodes``, one per rank."""

    settings: Any
    world: int
    base_gpu_id: int = 0
    bytes_per_rank: int | None = None
    bytes_source: str = ""
    sizing: Any = None
    cpu_nodes: tuple[int, ...] | None = None

    @classmethod
    def of(cls, profile: Any) -> PoolSpec:
        """The pool a profile asks for (SGLang: ``sglang.tp_size`` ranks, ``--base-gpu-id``, the host
        pool of :func:`sactool.profile.sizing.host_sizing`)."""
        from sactool.profile.sizing import host_sizing

        if getattr(profile, "engine", "sglang") == "vllm" and profile.vllm is not None:
            # vLLM: one pool per DP replica (shared by its TP ranks) or per rank, vLLM's own sizing
            v = profile.vllm
            pool = v.host_pool(profile.model)
            gpu_nodes = tuple(profile.pool.gpu_local_nodes)
            owners = tuple(gpu_nodes[o * v.tp_size] for o in range(v.dp_size)) if v.shared_host_pool and gpu_nodes \
                else None
            return cls(profile.pool, v.pool_owners, 0, pool.allocated_bytes,
                       f"vllm.host_pool_gib {v.host_pool_gib} = {pool.blocks} whole host blocks of {pool.stride_bytes} B "
                       f"per {'DP replica' if v.shared_host_pool else 'rank'}", pool, owners)
        sizing = host_sizing(profile)
        return cls(profile.pool, profile.world_size, profile.sglang.base_gpu_id, sizing.bytes_per_rank,
                   sizing.source, sizing)


def rank_target(spec: PoolSpec, rank: int, targets: Sequence[Target] | None = None) -> str:
    """The target rank ``rank`` maps: ``pool.rank_targets`` when tune resolved them, else the
    ``pool.rank_assignment`` rule over the listed targets (:func:`target_index`: round_robin,
    rank % targets, as SAC; packed, contiguous blocks of ranks per target; locality, a target on
    the socket of the rank's GPU — which needs the targets' facts, ``targets``)."""
    q = spec.settings
    world = spec.world
    if not 0 <= rank < world:
        raise RecordError(f"rank {rank} is outside the profile's {world} ranks (sglang.tp_size)",
                          "the profile's sglang.tp_size must match the --tp-size SGLang runs with")
    if q.rank_targets:
        return q.rank_targets[rank]
    names = target_names(q)
    if not names:
        raise RecordError("profile field pool.nodes / pool.dax_devices: no pool target",
                          "name the node(s) or DAX device(s) that hold the pool")
    if q.rank_assignment == "explicit":
        raise RecordError("profile field pool.rank_targets: is empty while pool.rank_assignment is explicit",
                          "list one target per rank, or use round_robin")
    if q.rank_assignment == "locality":
        if targets is None:
            raise RecordError("pool.rank_assignment locality: which socket each target is on is not known here",
                              "resolve it on the machine (sactool serve --dry-run, or sactool tune writes "
                              "pool.rank_targets)")
        return assign_targets(spec, targets)[0][rank]
    return names[target_index(q.rank_assignment, rank, world, len(names))]


def assign_targets(spec: PoolSpec, targets: Sequence[Target]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(target per rank, notes) under the settings' rule, ``targets`` in the settings' order."""
    q = spec.settings
    if q.rank_targets:
        return tuple(q.rank_targets), ()
    order = {n: i for i, n in enumerate(target_names(q))}
    ts = sorted((t for t in targets if t.name in order), key=lambda t: order[t.name])
    return assign(spec.world, ts, q.rank_assignment,
                  rank_cpu_nodes=spec.cpu_nodes if spec.cpu_nodes is not None else q.gpu_local_nodes)


def ranks_by_target(spec: PoolSpec, targets: Sequence[Target] | None = None) -> dict[str, list[int]]:
    """target -> the ranks that map it."""
    out: dict[str, list[int]] = {}
    for r in range(spec.world):
        out.setdefault(rank_target(spec, r, targets), []).append(r)
    return out


def rank_plan(spec: PoolSpec, targets: Sequence[Target], *, check_pool: bool = True) -> RankPlan:
    """Every rank's target and slice (:func:`sactool.pool.rankplan.plan`): the settings' rule (or
    the resolved ``pool.rank_targets``), GPU ``base_gpu_id + rank``, and with ``check_pool`` the
    rank's pool (``spec.bytes_per_rank``) checked against its slice (the plug-in checks what the
    engine really asks for instead). CapacityError / RecordError."""
    q = spec.settings
    targets = pinned(targets, q.capacity_bytes)    # pinned: never more than a device holds
    names, notes = assign_targets(spec, targets)
    p = plan(spec.world, targets, "explicit", explicit=names, base_gpu_id=spec.base_gpu_id,
             pool_bytes_per_rank=spec.bytes_per_rank if check_pool else None, pool_source=spec.bytes_source)
    rule = "explicit (pool.rank_targets)" if q.rank_targets else q.rank_assignment
    return RankPlan(rule, p.slots, notes + p.notes, p.carved)


@dataclass(frozen=True)
class PoolPlan:
    """What the plug-in does for one rank (from the settings, and the targets' facts when given)."""

    rank: int
    target: str                          # "node2" or "dax0.0"
    mode: str                            # numa | devdax
    node: int | None                     # target node (numa)
    policy: str                          # bind | preferred | weighted_interleave
    interleave_weights: dict[int, int]
    hugepages: str                       # none | thp | 2MB | 1GB
    prefault_threads: int
    prefault_cpus: str                   # "auto" or a cpulist
    strict: bool
    stand_in: bool
    shared_with: tuple[int, ...]         # other ranks that map the same target
    slot: RankSlot | None = None         # the rank's row of the rank plan (offset/size of its slice)
    align_bytes: int | None = None       # devdax: the device's align
    cpu_node: int | None = None          # the target's CPU node (prefault threads run there on "auto")

    @property
    def offset_bytes(self) -> int:
        return (self.slot.offset_bytes or 0) if self.slot else 0

    def describe(self) -> str:
        what = f"{self.target} ({'DAX device' if self.mode == 'devdax' else 'NUMA node'})"
        extra = "; a DRAM node stands in for CXL (pool.stand_in)" if self.stand_in else ""
        if self.mode == "devdax":
            if self.slot is not None and self.slot.size_bytes is not None and self.slot.offset_bytes is not None:
                return (f"rank {self.rank} (GPU {self.slot.gpu}): map {what} bytes [{self.slot.offset_bytes}, "
                        f"{self.slot.offset_bytes + self.slot.size_bytes}) (align {self.align_bytes}){extra}")
            return f"rank {self.rank}: map {what}{extra}"
        pol = self.policy + (f" {self.interleave_weights}" if self.policy == "weighted_interleave" else "")
        cpus = (("the CPUs of node" + str(self.cpu_node)) if self.cpu_node is not None else "the CPUs nearest it") \
            if self.prefault_cpus == "auto" else f"CPUs {self.prefault_cpus}"
        return (f"rank {self.rank}: {what}, policy {pol}, hugepages {self.hugepages}, prefault "
                f"{self.prefault_threads} thread{'s' if self.prefault_threads != 1 else ''} on {cpus}{extra}")


def plan_for_rank(spec: PoolSpec, rank: int, targets: Sequence[Target] | None = None,
                  plan: RankPlan | None = None) -> PoolPlan:
    """The plug-in's plan for ``rank``; with ``targets`` (or a ``plan`` built from them) it
    carries the rank's slice and its target's CPU node."""
    q = spec.settings
    if plan is None and targets is not None:
        plan = rank_plan(spec, targets)
    target = plan.slot(rank).target if plan is not None else rank_target(spec, rank)
    by = plan.ranks_by_target() if plan is not None else ranks_by_target(spec)
    shared = tuple(r for r in by[target] if r != rank)
    facts = {t.name: t for t in targets or ()}
    t = facts.get(target)
    return PoolPlan(rank=rank, target=target, mode=q.mode, node=node_of(target), policy=q.policy,
                    interleave_weights=dict(q.interleave_weights), hugepages=q.hugepages,
                    prefault_threads=q.prefault_threads, prefault_cpus=q.prefault_cpus,
                    strict=q.strict, stand_in=q.stand_in, shared_with=shared,
                    slot=plan.slot(rank) if plan is not None else None,
                    align_bytes=t.align_bytes if t else None, cpu_node=t.cpu_node if t else None)
