"""Is the profile's pool, and the profile itself, for this machine? One check for both engines.

``sactool serve`` runs :func:`pool_here` for SGLang and vLLM profiles alike, before the capacity
check: each pool target against this machine's probe (CXL, CPU-less, the size tune planned with)
and the profile's ``machine`` block against this machine's (:mod:`sactool.pool.match`; another
machine is a warning, refused with ``--strict``). The GPUs the ranks get are the other check both
engines share (:func:`sactool.serve.gpus.resolve_gpus`).
"""

from __future__ import annotations

from sactool.host.sysfs import SysfsReader
from sactool.profile import Profile


def builds_pool(profile: Profile) -> bool:
    """Does the engine build a host pool that sactool places? Not with placement none, nor on an
    SGLang prefill rank (it builds none)."""
    if profile.pool.placement == "none":
        return False
    return profile.engine == "vllm" or profile.sglang.role != "prefill"


def pool_here(profile: Profile, sysfs_root: str | None, strict: bool) -> list[str]:
    """Check lines: the profile's pool targets checked against this machine's probe (CXL, CPU-less,
    size) and its machine block against this machine's. TopologyError (exit 3) for a target that is
    not CXL memory here; RecordError (exit 4) for another machine with ``strict``."""
    from sactool.host.machine import machine_block
    from sactool.pool import match as poolmatch
    from sactool.topology import probe

    reader = SysfsReader(sysfs_root)
    topo = probe(reader)
    out: list[str] = []
    if builds_pool(profile):
        out += poolmatch.check_targets(profile.pool, topo, (profile.request or {}).get("pool_targets") or ())
    return out + poolmatch.check_machine(profile.machine, machine_block(reader), strict=strict,
                                         where="this machine" if topo.live else "the recording")


__all__ = ["builds_pool", "pool_here"]
