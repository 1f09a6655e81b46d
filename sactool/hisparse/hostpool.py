"""The HiSparse host pool as the profile describes it: which target each rank maps, how large the
pool of one rank is, and the placement plan the ``sactool_cxl`` plug-in carries out.

Shared by the launcher (capacity checks, ``--dry-run``) and the plug-in (inside each SGLang
scheduler process), so both read the profile the same way. No torch, no numpy here. Record
bytes come from :mod:`sactool.hisparse.layout`, the pool formula from
:func:`sactool.hisparse.capacity.host_pool_bytes`, the rank rule from
:func:`sactool.hisparse.placement.target_index`.

Sources (shared/reference/sglang-integration.md, SGLang 0.5.23):
* §2.5: host bytes per rank = (S·R + page) × L × row_bytes, S = device token slots,
  R = ``host_to_device_ratio``, L = layers; the pool is private to each scheduler rank.
* §1.3: row bytes per token per layer (656 B FP8, 1152 B BF16): :mod:`sactool.hisparse.layout`.
* §6: ranks spread round-robin over CXL devices (rank % devices), as SAC does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sactool.errors import RecordError
from sactool.hisparse.capacity import host_pool_bytes
from sactool.hisparse.layout import record_bytes
from sactool.hisparse.placement import target_index
from sactool.profile import Profile

def row_bytes(profile: Profile) -> int:
    """Bytes of one token's MLA latent KV in one layer, as the HiSparse host pool stores it."""
    m = profile.model
    return record_bytes(m.kv_lora_rank, m.qk_rope_head_dim, profile.sglang.kv_cache_dtype)


def pool_targets(profile: Profile) -> list[str]:
    """The pool's targets in kernel names: ``node2`` … (numa) or ``dax0.0`` … (devdax)."""
    q = profile.pool
    return [f"node{n}" for n in q.nodes] if q.mode == "numa" else list(q.dax_devices)


def rank_target(profile: Profile, rank: int) -> str:
    """The target rank ``rank`` maps: ``pool.rank_targets`` when tune resolved them, else the
    ``pool.rank_assignment`` rule over the listed targets (:func:`target_index`: round_robin,
    rank % targets, as SAC; packed, contiguous blocks of ranks per target)."""
    q = profile.pool
    world = profile.world_size
    if not 0 <= rank < world:
        raise RecordError(f"rank {rank} is outside the profile's {world} ranks (sglang.tp_size)",
                          "the profile's sglang.tp_size must match the --tp-size SGLang runs with")
    if q.rank_targets:
        return q.rank_targets[rank]
    targets = pool_targets(profile)
    if not targets:
        raise RecordError("profile field pool.nodes / pool.dax_devices: no pool target",
                          "name the node(s) or DAX device(s) that hold the pool")
    if q.rank_assignment == "explicit":
        raise RecordError("profile field pool.rank_targets: is empty while pool.rank_assignment is explicit",
                          "list one target per rank, or use round_robin")
    return targets[target_index(q.rank_assignment, rank, world, len(targets))]


def ranks_by_target(profile: Profile) -> dict[str, list[int]]:
    """target -> the ranks that map it."""
    out: dict[str, list[int]] = {}
    for r in range(profile.world_size):
        out.setdefault(rank_target(profile, r), []).append(r)
    return out


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
    """S from, in order: ``predictions`` (tune's own figure), ``sglang.max_total_tokens`` (the
    device slots SGLang is told to use), ``sglang.max_running_requests`` ×
    ``hisparse.device_buffer_size``, ``request.concurrency`` × ``hisparse.device_buffer_size``."""
    h, s, m = profile.hisparse, profile.sglang, profile.model
    rb = row_bytes(profile)
    base = dict(host_to_device_ratio=h.host_to_device_ratio, page_size=s.page_size,
                num_layers=m.num_layers, row_bytes=rb)
    pred: dict[str, Any] = profile.predictions or {}
    for k in PREDICTION_BYTES_KEYS:
        v = pred.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return HostSizing(None, bytes_per_rank=v, source=f"predictions.{k}", **base)
    slots, source = None, ""
    for k in PREDICTION_SLOT_KEYS:
        v = pred.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            slots, source = v, f"predictions.{k}"
            break
    if slots is None and s.max_total_tokens:
        slots, source = s.max_total_tokens, "sglang.max_total_tokens"
    if slots is None and s.max_running_requests:
        slots = s.max_running_requests * h.device_buffer_size
        source = "sglang.max_running_requests x hisparse.device_buffer_size"
    conc = (profile.request or {}).get("concurrency")
    if slots is None and isinstance(conc, int) and not isinstance(conc, bool) and conc > 0:
        slots = conc * h.device_buffer_size
        source = "request.concurrency x hisparse.device_buffer_size"
    if slots is None:
        return HostSizing(None, bytes_per_rank=None, source="unknown: the profile has no predictions."
                          f"{PREDICTION_SLOT_KEYS[0]}, sglang.max_total_tokens, sglang.max_running_requests or request.concurrency",
                          **base)
    total = host_pool_bytes(slots, h.host_to_device_ratio, layers=m.num_layers, record_bytes=rb, page=s.page_size)
    return HostSizing(slots, bytes_per_rank=total, source=source, **base)


@dataclass(frozen=True)
class PoolPlan:
    """What the plug-in does for one rank (all from the profile; nothing measured yet)."""

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

    def describe(self) -> str:
        what = f"{self.target} ({'DAX device' if self.mode == 'devdax' else 'NUMA node'})"
        extra = "; a DRAM node stands in for CXL (pool.stand_in)" if self.stand_in else ""
        if self.mode == "devdax":
            return f"rank {self.rank}: map {what}{extra}"
        pol = self.policy + (f" {self.interleave_weights}" if self.policy == "weighted_interleave" else "")
        cpus = "the CPUs nearest it" if self.prefault_cpus == "auto" else f"CPUs {self.prefault_cpus}"
        return (f"rank {self.rank}: {what}, policy {pol}, hugepages {self.hugepages}, prefault "
                f"{self.prefault_threads} threads on {cpus}{extra}")


def plan_for_rank(profile: Profile, rank: int) -> PoolPlan:
    q = profile.pool
    target = rank_target(profile, rank)
    shared = tuple(r for r in ranks_by_target(profile)[target] if r != rank)
    node = int(target[4:]) if target.startswith("node") else None
    return PoolPlan(rank=rank, target=target, mode=q.mode, node=node, policy=q.policy,
                    interleave_weights=dict(q.interleave_weights), hugepages=q.hugepages,
                    prefault_threads=q.prefault_threads, prefault_cpus=q.prefault_cpus,
                    strict=q.strict, stand_in=q.stand_in, shared_with=shared)
