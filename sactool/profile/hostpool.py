"""The HiSparse host pool as the profile describes it: which target each rank maps, how large the
pool of one rank is, and the placement plan the ``sactool_cxl`` plug-in carries out.

Shared by the launcher (capacity checks, ``--dry-run``) and the plug-in (inside each SGLang
scheduler process), so both read the profile the same way. No torch, no numpy here. Record
bytes come from :mod:`sactool.hisparse.layout`, the pool formula from
:func:`sactool.hisparse.capacity.host_pool_bytes`, the rank rule from
:func:`sactool.hisparse.placement.target_index`.

Sources (docs/sources.md, SGLang, SGLang 0.5.23):
* §2.5: host bytes per rank = (S·R + page) × L × row_bytes, S = device token slots,
  R = ``host_to_device_ratio``, L = layers; the pool is private to each scheduler rank.
* §1.3: row bytes per token per layer (656 B FP8, 1152 B BF16): :mod:`sactool.hisparse.layout`.
* §6: ranks spread round-robin over CXL devices (rank % devices), as SAC does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sactool.errors import RecordError
from sactool.hisparse.capacity import host_pool_bytes
from sactool.hisparse.layout import record_bytes
from sactool.hisparse.placement import target_index
from sactool.hisparse.rankplan import RankPlan, RankSlot, Target, node_of
from sactool.profile import Profile

def row_bytes(profile: Profile) -> int:
    """Bytes of one token's MLA latent KV in one layer, as the HiSparse host pool stores it."""
    m = profile.model
    return record_bytes(m.kv_lora_rank, m.qk_rope_head_dim, profile.sglang.kv_cache_dtype)


def pool_targets(profile: Profile) -> list[str]:
    """The pool's targets in kernel names: ``node2`` … (numa) or ``dax0.0`` … (devdax)."""
    q = profile.pool
    return [f"node{n}" for n in q.nodes] if q.mode == "numa" else list(q.dax_devices)


def rank_target(profile: Profile, rank: int, targets: Sequence[Target] | None = None) -> str:
    """The target rank ``rank`` maps: ``pool.rank_targets`` when tune resolved them, else the
    ``pool.rank_assignment`` rule over the listed targets (:func:`target_index`: round_robin,
    rank % targets, as SAC; packed, contiguous blocks of ranks per target; locality, a target on
    the socket of the rank's GPU — which needs the targets' facts, ``targets``)."""
    q = profile.pool
    world = profile.world_size
    if not 0 <= rank < world:
        raise RecordError(f"rank {rank} is outside the profile's {world} ranks (sglang.tp_size)",
                          "the profile's sglang.tp_size must match the --tp-size SGLang runs with")
    if q.rank_targets:
        return q.rank_targets[rank]
    names = pool_targets(profile)
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
        return assign_targets(profile, targets)[0][rank]
    return names[target_index(q.rank_assignment, rank, world, len(names))]


def assign_targets(profile: Profile, targets: Sequence[Target]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(target per rank, notes) under the profile's rule, ``targets`` in the profile's order."""
    from sactool.hisparse.rankplan import assign

    q = profile.pool
    if q.rank_targets:
        return tuple(q.rank_targets), ()
    order = {n: i for i, n in enumerate(pool_targets(profile))}
    ts = sorted((t for t in targets if t.name in order), key=lambda t: order[t.name])
    return assign(profile.world_size, ts, q.rank_assignment, rank_cpu_nodes=q.gpu_local_nodes)


def ranks_by_target(profile: Profile, targets: Sequence[Target] | None = None) -> dict[str, list[int]]:
    """target -> the ranks that map it."""
    out: dict[str, list[int]] = {}
    for r in range(profile.world_size):
        out.setdefault(rank_target(profile, r, targets), []).append(r)
    return out


def rank_plan(profile: Profile, targets: Sequence[Target], *, check_pool: bool = True) -> RankPlan:
    """Every rank's target and slice (:func:`sactool.hisparse.rankplan.plan`): the profile's rule
    (or its resolved ``pool.rank_targets``), GPU ``sglang.base_gpu_id + rank``, and with
    ``check_pool`` the rank's host pool as the profile sizes it (:func:`host_sizing`) checked
    against its slice (the plug-in checks what SGLang really asks for instead).
    CapacityError / RecordError."""
    from sactool.hisparse.rankplan import plan

    q = profile.pool
    if q.capacity_bytes is not None:     # pinned: never more than a device holds
        import dataclasses

        targets = [dataclasses.replace(t, capacity_bytes=q.capacity_bytes if t.capacity_bytes is None or t.kind == "numa"
                                       else min(t.capacity_bytes, q.capacity_bytes),
                                       capacity_source=t.capacity_source if "pool.capacity_bytes" in t.capacity_source
                                       else f"pool.capacity_bytes ({t.capacity_source})") for t in targets]
    names, notes = assign_targets(profile, targets)
    sizing = host_sizing(profile)
    p = plan(profile.world_size, targets, "explicit", explicit=names, base_gpu_id=profile.sglang.base_gpu_id,
             pool_bytes_per_rank=sizing.bytes_per_rank if check_pool else None, pool_source=sizing.source)
    rule = "explicit (pool.rank_targets)" if q.rank_targets else q.rank_assignment
    return RankPlan(rule, p.slots, notes + p.notes)


# The environment the launcher (sactool serve) hands the plug-in: one owner for both sides.
PROFILE_ENV = "SACTOOL_PROFILE"
"""The profile the plug-in reads (absolute path); unset: the plug-in does nothing."""
STRICT_ENV = "SACTOOL_STRICT"
"""``1``: stop the rank instead of falling back (``pool.strict``; also when the profile is unreadable)."""
RANK_ENV = "SACTOOL_RANK"
"""The rank, where SGLang's TP group cannot tell it (tests, a single process)."""

GPU_NODES_ENV = "SACTOOL_GPU_LOCAL_NODES"
"""Set by ``sactool serve`` when the GPUs the ranks really get (CUDA_VISIBLE_DEVICES, in PCI bus
order) sit on other sockets than the profile's ``pool.gpu_local_nodes``: comma-separated CPU node
per rank. The plug-in plans with it, so its plan is the one ``serve --dry-run`` showed (SGLang may
narrow CUDA_VISIBLE_DEVICES per scheduler process, so the plug-in cannot re-derive it there)."""


def with_gpu_nodes(profile: Profile, nodes: Sequence[int]) -> Profile:
    """``profile`` with ``pool.gpu_local_nodes`` = ``nodes`` (the socket of each rank's GPU); a
    locality plan tune resolved for other GPUs (``pool.rank_targets``) is dropped, so the locality
    rule runs again over these sockets. Other rules do not depend on the GPUs and stay."""
    import dataclasses

    from sactool.profile import validate

    q = profile.pool
    nodes = tuple(int(n) for n in nodes)
    if nodes == tuple(q.gpu_local_nodes):
        return profile
    targets = () if q.rank_assignment == "locality" else q.rank_targets
    return validate(dataclasses.replace(profile, pool=dataclasses.replace(q, gpu_local_nodes=nodes,
                                                                             rank_targets=targets)))


def gpu_nodes_from_env(value: str, world: int) -> tuple[int, ...]:
    """``$SACTOOL_GPU_LOCAL_NODES`` -> one CPU node per rank; RecordError when malformed."""
    try:
        nodes = tuple(int(v) for v in value.split(","))
    except ValueError:
        nodes = ()
    if len(nodes) != world or any(n < 0 for n in nodes):
        raise RecordError(f"${GPU_NODES_ENV}={value!r} is not {world} comma-separated node numbers",
                          "launch through 'sactool serve', which sets it, or unset it")
    return nodes


@dataclass(frozen=True)
class HostSizing:
    """Host pool bytes of one rank (§2.5) and where the device-slot figure S came from."""

    device_token_slots: int | None       # S
    host_to_device_ratio: int            # R
    page_size: int
    num_layers: int                      # L
    row_bytes: int
    bytes_per_rank: int | None
    source: str                          # which profile field(s) gave S (or why it is unknown)


# Keys of ``profile.predictions`` that may carry S or the per-rank host bytes, in order of preference.
PREDICTION_SLOT_KEYS = ("device_token_slots", "device_slots_per_rank", "hisparse_device_slots")
PREDICTION_BYTES_KEYS = ("host_pool_bytes_per_rank", "host_bytes_per_rank")


def host_sizing(profile: Profile) -> HostSizing:
    """What SGLang will build per rank, from the argv it receives: S = ``--max-total-tokens``
    (``sglang.max_total_tokens``) and R = ``--hisparse-config``'s ``host_to_device_ratio``
    (``hisparse.host_to_device_ratio``). Without ``--max-total-tokens`` SGLang sizes S from the GPU's
    free memory at start-up, which no file here holds: then tune's own figure (``predictions``), else
    ``sglang.max_running_requests`` × ``hisparse.device_buffer_size``, else ``request.concurrency`` ×
    ``hisparse.device_buffer_size`` — each named in ``source``. A stored prediction that disagrees with
    the argv's figure is not used (an edited profile: the argv is what runs)."""
    h, s, m = profile.hisparse, profile.sglang, profile.model
    rb = row_bytes(profile)
    base = dict(host_to_device_ratio=h.host_to_device_ratio, page_size=s.page_size,
                num_layers=m.num_layers, row_bytes=rb)

    def sized(slots: int, source: str) -> HostSizing:
        total = host_pool_bytes(slots, h.host_to_device_ratio, layers=m.num_layers, record_bytes=rb, page=s.page_size)
        return HostSizing(slots, bytes_per_rank=total, source=source, **base)

    if s.max_total_tokens:
        return sized(s.max_total_tokens, f"the argv SGLang receives: --max-total-tokens {s.max_total_tokens} x "
                                         f"host_to_device_ratio {h.host_to_device_ratio} (--hisparse-config)")
    pred: dict[str, Any] = profile.predictions or {}
    for k in PREDICTION_BYTES_KEYS:
        v = pred.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return HostSizing(None, bytes_per_rank=v, source=f"predictions.{k} (no --max-total-tokens: SGLang sizes "
                              "its device slots at start-up)", **base)
    for k in PREDICTION_SLOT_KEYS:
        v = pred.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return sized(v, f"predictions.{k}")
    if s.max_running_requests:
        return sized(s.max_running_requests * h.device_buffer_size,
                     "sglang.max_running_requests x hisparse.device_buffer_size")
    conc = (profile.request or {}).get("concurrency")
    if isinstance(conc, int) and not isinstance(conc, bool) and conc > 0:
        return sized(conc * h.device_buffer_size, "request.concurrency x hisparse.device_buffer_size")
    return HostSizing(None, bytes_per_rank=None, source="unknown: the profile has no sglang.max_total_tokens, "
                      f"predictions.{PREDICTION_SLOT_KEYS[0]}, sglang.max_running_requests or request.concurrency",
                      **base)


@dataclass(frozen=True)
class PoolPlan:
    """What the plug-in does for one rank (from the profile, and the targets' facts when given)."""

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
                f"{self.prefault_threads} threads on {cpus}{extra}")


def plan_for_rank(profile: Profile, rank: int, targets: Sequence[Target] | None = None,
                  plan: RankPlan | None = None) -> PoolPlan:
    """The plug-in's plan for ``rank``; with ``targets`` (or a ``plan`` built from them) it
    carries the rank's slice and its target's CPU node."""
    q = profile.pool
    if plan is None and targets is not None:
        plan = rank_plan(profile, targets)
    target = plan.slot(rank).target if plan is not None else rank_target(profile, rank)
    by = plan.ranks_by_target() if plan is not None else ranks_by_target(profile)
    shared = tuple(r for r in by[target] if r != rank)
    node = node_of(target)
    facts = {t.name: t for t in targets or ()}
    t = facts.get(target)
    return PoolPlan(rank=rank, target=target, mode=q.mode, node=node, policy=q.policy,
                    interleave_weights=dict(q.interleave_weights), hugepages=q.hugepages,
                    prefault_threads=q.prefault_threads, prefault_cpus=q.prefault_cpus,
                    strict=q.strict, stand_in=q.stand_in, shared_with=shared,
                    slot=plan.slot(rank) if plan is not None else None,
                    align_bytes=t.align_bytes if t else None, cpu_node=t.cpu_node if t else None)
