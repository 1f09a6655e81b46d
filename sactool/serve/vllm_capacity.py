"""Does a vLLM profile's pool fit where it goes, and would vLLM's own preflight say otherwise?

The pools (:meth:`sactool.profile.VllmSettings.host_pool`, vLLM's own sizing: whole host blocks): one
per DP replica when shared by its TP ranks, one per rank when private; each pool owner is mapped to
a pool target by the rank plan (:func:`sactool.pool.rankplan.plan`, the engine-neutral rule and
slice rule, over the owners). Each target's room: a NUMA node's free memory (as for SGLang), or —
for a pool on huge pages (``pool.hugepages`` 2MB / 1GB) — the node's free huge pages of that size,
which ``MemAvailable`` never counts; a DAX device's aligned slice.

vLLM's own preflight (``check_hisparse_host_memory``) compares every pool with 95 % of the machine's
``MemAvailable`` at the moment the rank allocates. It refuses falsely where sactool places the pool:
a devdax slice or a huge-page pool is not in ``MemAvailable``; and with private pools the ranks check
one after another, each seeing what the earlier ranks left (a TP race: rank k sees ``avail − k·pool``),
so the last ranks of a TP 8 server can be refused although the target holds all eight. The check
reports these, and the plug-in answers the preflight for the memory the pool really goes to. A shared
pool also needs ``/dev/shm`` room for its files (vLLM checks it too, and it is real: tmpfs past its
size is SIGBUS), checked on the live machine.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any

from sactool.errors import CapacityError
from sactool.host.sysfs import SysfsReader
from sactool.profile import Profile
from sactool.units import format_bytes

HUGE = {"2MB": 2 << 20, "1GB": 1 << 30}


@dataclass(frozen=True)
class OwnerPool:
    owner: int                 # DP replica (shared) or rank (private)
    ranks: tuple[int, ...]     # the GPU ranks that map it (dp_index * tp + tp_rank)
    target: str
    bytes: int
    offset_bytes: int | None   # devdax: the slice's offset
    slice_bytes: int | None


@dataclass(frozen=True)
class VllmPoolCheck:
    pool_bytes: int                        # one pool, as vLLM maps it
    blocks: int
    shared: bool
    owners: tuple[OwnerPool, ...]
    lines: tuple[str, ...]
    preflight: tuple[str, ...] = field(default_factory=tuple)   # where vLLM's own check would refuse falsely
    plan: Any = None
    facts: tuple = ()                      # the targets as read (a DAX device's known poison included)

    def to_data(self) -> dict[str, Any]:
        return {"engine": "vllm", "pool_bytes": self.pool_bytes, "host_blocks": self.blocks, "shared": self.shared,
                "pools": [{"owner": o.owner, "ranks": list(o.ranks), "target": o.target, "bytes": o.bytes,
                           "offset_bytes": o.offset_bytes, "slice_bytes": o.slice_bytes} for o in self.owners],
                "vllm_preflight": list(self.preflight)}


def owner_ranks(profile: Profile, owner: int) -> tuple[int, ...]:
    v = profile.vllm
    assert v is not None
    if v.shared_host_pool:
        return tuple(range(owner * v.tp_size, (owner + 1) * v.tp_size))
    return (owner,)


def targets(profile: Profile, reader: SysfsReader, topo: Any = None) -> list[Any]:
    """The pool targets with this machine's (or recording's) room, huge-page pools counted in huge pages."""
    from dataclasses import replace

    from sactool.pool.targets import target_facts, target_names
    from sactool.topology import probe

    q = profile.pool
    topo = topo or probe(reader, poison=q.mode == "devdax")   # devdax: slices are carved around known poison
    facts = target_facts(topo, reader, target_names(q), capacity_bytes=q.capacity_bytes)
    if q.mode != "numa" or q.hugepages not in HUGE:
        return facts
    out = []
    size = HUGE[q.hugepages]
    for t in facts:
        node = topo.node(int(t.name[4:]))
        hp = next((h for h in node.hugepages if h.page_size_bytes == size), None)
        free = (hp.free or 0) * size if hp is not None else 0
        if q.capacity_bytes is not None:
            free = min(free, q.capacity_bytes)
        out.append(replace(t, capacity_bytes=free,
                           capacity_source=f"{t.name}'s free {q.hugepages} huge pages "
                                           f"(nodeN/hugepages/hugepages-{size // 1024}kB/free_hugepages: "
                                           f"{hp.free if hp else 0} free)"))
    return out


def check_pool(profile: Profile, reader: SysfsReader, *, live_shm: bool = True) -> VllmPoolCheck:
    """CapacityError when a pool does not fit its target; TopologyError for an absent target."""
    from sactool.hisparse.vllm import preflight_refuses
    from sactool.pool import rankplan

    v, q = profile.vllm, profile.pool
    assert v is not None
    pool = v.host_pool(profile.model)
    per = pool.allocated_bytes
    owners_n = v.pool_owners
    who = "DP replica" if v.shared_host_pool else "rank"
    lines = [f"host pool: {v.host_pool_gib} GiB -> {pool.blocks} host blocks of {pool.stride_bytes} B = "
             f"{format_bytes(per)} per {who} ({owners_n} pool(s)"
             + (f", each read by {v.tp_size} TP ranks" if v.shared_host_pool else "") + ")"]
    if q.placement == "none":
        lines.append("placement none: vLLM places the pool itself (its own preflight applies unchanged)")
        return VllmPoolCheck(per, pool.blocks, v.shared_host_pool, (), tuple(lines))
    facts = targets(profile, reader)
    rule = "explicit" if q.rank_targets else q.rank_assignment
    try:
        plan = rankplan.plan(owners_n, facts, rule, explicit=q.rank_targets,
                             rank_cpu_nodes=_owner_cpu_nodes(profile), pool_bytes_per_rank=per,
                             pool_source=f"vllm.host_pool_gib {v.host_pool_gib} (vLLM's whole host blocks)")
    except CapacityError as e:
        raise CapacityError(e.message.replace("rank ", f"{who} ", 1).replace("host pool", "vLLM host pool", 1),
                            "lower vllm.host_pool_gib or vllm.max_num_seqs in the profile (sactool tune --engine "
                            "vllm), spread the pools over more targets, or free memory there") from None
    owners = tuple(OwnerPool(s.rank, owner_ranks(profile, s.rank), s.target, per, s.offset_bytes, s.size_bytes)
                   for s in plan.slots)
    by_target: dict[str, list[OwnerPool]] = {}
    for o in owners:
        by_target.setdefault(o.target, []).append(o)
    for t in facts:
        mine = by_target.get(t.name, [])
        if not mine:
            continue
        need = per * len(mine)
        lines.append(f"{t.name}: {who}(s) {','.join(str(o.owner) for o in mine)} (GPU ranks "
                     f"{','.join(str(r) for o in mine for r in o.ranks)}) need {format_bytes(need)}, "
                     f"{format_bytes(t.capacity_bytes) if t.capacity_bytes is not None else 'unknown'} there "
                     f"({t.capacity_source})"
                     + ("".join(f"; slice of {who} {o.owner} at offset {o.offset_bytes}" for o in mine)
                        if t.kind == "devdax" else ""))
    if v.shared_host_pool and q.mode == "numa" and live_shm:
        free = shutil.disk_usage("/dev/shm").free if _is_dir("/dev/shm") else None
        total = per * owners_n
        if free is not None and total > free:
            raise CapacityError(f"/dev/shm has {format_bytes(free)} free, the shared pool's files need "
                                f"{format_bytes(total)} ({owners_n} region(s))",
                                "enlarge /dev/shm (mount -o remount,size=… /dev/shm; a container: --shm-size or "
                                "--ipc=host); tmpfs past its size is SIGBUS, not slower memory")
        if free is not None:
            lines.append(f"/dev/shm: {format_bytes(free)} free for the shared pool's {format_bytes(total)} of files")
    pre = _preflight(profile, reader, per, owners_n, facts, preflight_refuses)
    lines.extend(f"vLLM's own preflight: {p}" for p in pre)
    lines.extend(f"slices carved: {line}" for line in plan.carve_lines())
    return VllmPoolCheck(per, pool.blocks, v.shared_host_pool, owners, tuple(lines), tuple(pre), plan, tuple(facts))


def _is_dir(path: str) -> bool:
    import os

    return os.path.isdir(path)


def _owner_cpu_nodes(profile: Profile) -> tuple[int | None, ...]:
    """Each pool owner's GPU socket (the first GPU of a DP replica), for the locality rule."""
    q, v = profile.pool, profile.vllm
    assert v is not None
    if not q.gpu_local_nodes:
        return ()
    return tuple(q.gpu_local_nodes[owner_ranks(profile, o)[0]] for o in range(v.pool_owners))


def _preflight(profile: Profile, reader: SysfsReader, per: int, owners: int, facts, refuses) -> list[str]:
    """Where vLLM's own ``check_hisparse_host_memory`` would refuse falsely, and why."""
    q, v = profile.pool, profile.vllm
    assert v is not None
    meminfo = reader.kv("proc/meminfo") or {}
    avail_kb = meminfo.get("MemAvailable")
    if avail_kb is None:
        return ["not judged (no MemAvailable in proc/meminfo)"]
    avail = avail_kb                 # parse_kv: kB values come back in bytes
    out = []
    checks = 1 if v.shared_host_pool else owners     # shared: the creator (TP rank 0) of each region checks
    refused = [k for k in range(checks) if refuses(per, avail - k * per)]
    if q.mode == "devdax":
        out.append(f"it compares {format_bytes(per)} with MemAvailable ({format_bytes(avail)}), which does not count "
                   "devdax memory: " + ("it would refuse; " if refused else "") + "the plug-in answers it with the "
                   "rank's slice of its device")
    elif q.hugepages in HUGE:
        out.append(f"it compares {format_bytes(per)} with MemAvailable ({format_bytes(avail)}), which does not count "
                   f"reserved {q.hugepages} huge pages: " + ("it would refuse; " if refused else "")
                   + "the plug-in answers it with the target node's free huge pages")
    elif refused:
        race = (f"ranks {','.join(map(str, refused))} of {checks} would be refused as each sees what the earlier "
                "ranks left (a TP race)" if refused[0] > 0 else f"it would refuse {format_bytes(per)} against 95 % "
                f"of {format_bytes(avail)} available machine-wide")
        out.append(race + "; the plug-in answers it with the free memory of the pool's own target")
    return out


__all__ = ["HUGE", "OwnerPool", "VllmPoolCheck", "check_pool", "owner_ranks", "targets"]
