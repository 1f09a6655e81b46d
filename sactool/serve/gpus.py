"""The GPUs the engine's ranks will really get, and the sockets the plan must use for them — one
check for both engines (``serve`` runs it for SGLang and vLLM profiles alike).

SGLang gives rank ``r`` CUDA device ``base_gpu_id + r`` (:func:`sactool.pool.rankplan.gpu_of`);
vLLM gives the TP ranks of DP replica ``d`` CUDA devices ``d·tp .. d·tp + tp − 1`` (one node:
``tp × dp`` devices from 0);
which PCI function that is follows CUDA's own rules (:mod:`sactool.topology.cuda`): the order
``CUDA_DEVICE_ORDER`` names — ``sactool serve`` sets ``PCI_BUS_ID`` when it is unset
(:mod:`sactool.serve.argv`) — narrowed and reordered by ``CUDA_VISIBLE_DEVICES``. ``tune`` wrote
``pool.gpu_local_nodes`` for the GPUs it saw; when the visible GPUs sit on other sockets, the plan
(``--numa-node``, ``placement: locality``) follows the visible ones, and the plug-in is told
(``$SACTOOL_GPU_LOCAL_NODES``). Works on a recorded tree (``--sysfs-root``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sactool.errors import SactoolError, TopologyError
from sactool.pool.contract import GPU_NODES_ENV, with_gpu_nodes
from sactool.host.sysfs import SysfsReader
from sactool.profile import Profile
from sactool.records import WarningLine
from sactool.serve.argv import EnvVar
from sactool.topology.cuda import ORDER_VAR, PCI_ORDER, VISIBLE_VAR, cuda_devices


@dataclass(frozen=True)
class GpuResolution:
    profile: Profile                 # gpu_local_nodes as the visible GPUs give them
    env: tuple[EnvVar, ...]          # $SACTOOL_GPU_LOCAL_NODES when they differ from the profile's
    lines: tuple[str, ...]           # for the checks ("warning: …" once for what the plan cannot follow)


@dataclass(frozen=True)
class GpuRanks:
    """The GPU ranks a profile starts: ``count`` CUDA devices from ``base``, ``said`` as in messages,
    the profile fields that set them (``fields``), and the engine's name."""

    count: int
    base: int
    said: str
    fields: str
    engine: str


def gpu_ranks(profile: Profile) -> GpuRanks:
    """SGLang: ``sglang.tp_size`` ranks from ``--base-gpu-id``; vLLM: ``tp × dp`` ranks from GPU 0
    (every GPU rank, whether its pool is private or shared by its replica)."""
    v = profile.vllm
    if profile.engine == "vllm" and v is not None:
        return GpuRanks(v.gpus, 0, f"{v.gpus} ranks (TP {v.tp_size} x DP {v.dp_size}) from GPU 0",
                        "vllm.tp_size / vllm.dp_size", "vLLM")
    s = profile.sglang
    return GpuRanks(s.tp_size, s.base_gpu_id, f"{s.tp_size} ranks from GPU {s.base_gpu_id}",
                    "sglang.tp_size / sglang.base_gpu_id", "SGLang")


def resolve_gpus(profile: Profile, reader: SysfsReader, environ: Mapping[str, str]) -> GpuResolution:
    """TopologyError when fewer CUDA devices are visible than the ranks need; otherwise the
    profile with each rank's GPU socket as this machine (or recording) has it."""
    q, ranks = profile.pool, gpu_ranks(profile)
    order = environ.get(ORDER_VAR)
    lines: list[str] = []
    if order and order != PCI_ORDER:
        lines.append(WarningLine("cuda-order", f"{ORDER_VAR}={order}: sactool's GPU plan (pool.gpu_local_nodes, "
                                 f"--numa-node, placement locality) assumes PCI bus order; unset it or set "
                                 f"{ORDER_VAR}={PCI_ORDER}"))
    from sactool.topology import probe

    try:
        topo = probe(reader)
    except SactoolError:          # the pool check reports an unreadable tree
        return GpuResolution(profile, (), tuple(lines))
    where = "here" if topo.live else "in the recording"
    view = cuda_devices(topo.gpus, environ)
    other = _not_cuda(view, ranks.engine)
    if other:
        lines.append(WarningLine("gpu-not-cuda", other))
    world, base = ranks.count, ranks.base
    if not topo.gpus and topo.gpus_scanned:
        # the PCI bus was read and holds no GPU: no CUDA device for any rank (documented: exit 3)
        raise TopologyError(f"{ranks.said} need {base + world} CUDA devices; {where} no NVIDIA GPU "
                            f"is seen: {topo.gpu_scan}",
                            "run serve on the GPU server (--dry-run --sysfs-root a recording of it plans for it "
                            "there), or check that the GPUs are on the PCI bus (lspci -d 10de:)")
    if not topo.gpus:
        lines.append(f"GPUs: none seen {where} ({topo.gpu_scan}); each rank's socket is pool.gpu_local_nodes "
                     f"as the profile has it ({list(q.gpu_local_nodes) or _no_sockets(ranks)})")
        if environ.get(VISIBLE_VAR) is not None and q.gpu_local_nodes:
            lines.append(WarningLine("gpus-unseen", f"{VISIBLE_VAR}={environ[VISIBLE_VAR]} is set, but no GPU is seen "
                                     f"{where}, so the plan cannot follow it: pool.gpu_local_nodes stays as tune wrote it"))
        return GpuResolution(profile, (), tuple(lines))
    if view.known and len(view.gpus) < base + world:
        amd = f"; {other}" if other else ""
        raise TopologyError(f"{ranks.said} need {base + world} CUDA devices; {where} "
                            f"{len(view.gpus)} are visible ({view.describe()}){amd}",
                            f"set {VISIBLE_VAR} to at least {base + world} NVIDIA GPUs, or lower {ranks.fields} "
                            "in the profile")
    lines.extend(_slow_links(view, base, world))
    nodes = view.sockets(base, world)
    if nodes is None or any(n is None for n in nodes):
        if order and order != PCI_ORDER:       # said once above
            return GpuResolution(profile, (), tuple(lines))
        why = view.why if not view.known else "a visible GPU's socket is unknown (see 'sactool probe')"
        lines.append(WarningLine("gpu-numbering-unknown", f"the GPUs of ranks 0..{world - 1} cannot be told: {why}; "
                                 "pool.gpu_local_nodes stays as tune wrote it"))
        return GpuResolution(profile, (), tuple(lines))
    seen = f"GPUs of ranks 0..{world - 1}: {view.describe(base, world)}"
    if not q.gpu_local_nodes:
        lines.append(seen + "; the profile names no GPU sockets (pool.gpu_local_nodes), so "
                     + ("SGLang asks NVML" if ranks.engine == "SGLang" else "no rank rule follows them"))
        return GpuResolution(profile, (), tuple(lines))
    if tuple(nodes) == tuple(q.gpu_local_nodes):
        lines.append(seen + "; their sockets are pool.gpu_local_nodes")
        return GpuResolution(profile, (), tuple(lines))
    new = with_gpu_nodes(profile, nodes)      # type: ignore[arg-type]
    value = ",".join(map(str, nodes))
    lines.append(seen + f"; pool.gpu_local_nodes {list(q.gpu_local_nodes)} were for other GPUs: the plan uses "
                 f"[{value}]" + ("; the locality plan is made again over them" if not new.pool.rank_targets
                                 and q.rank_targets else ""))
    env = EnvVar(GPU_NODES_ENV, value, f"probe + {VISIBLE_VAR}",
                 f"the socket of each rank's GPU as visible to {ranks.engine} (not the profile's pool.gpu_local_nodes); "
                 "the plug-in plans with it")
    return GpuResolution(new, (env,), tuple(lines))


def _slow_links(view, base: int, world: int) -> list[WarningLine]:
    """A warning per rank whose GPU's host link trained below both its ends (probe's gpu-link-degraded)."""
    from sactool.topology.warn import gpu_link_downgrade

    out = []
    for i, g in enumerate(view.gpus[base:base + world]):
        why = gpu_link_downgrade(g)
        if why is not None:
            out.append(WarningLine("gpu-link-degraded", f"rank {i}'s GPU {base + i} ({g.pci_device}) link trained at {why}",
                                   "reseat the GPU or check its riser; lspci -vv: LnkSta vs LnkCap"))
    return out


def _no_sockets(ranks: GpuRanks) -> str:
    """What stands for the GPU sockets a profile does not name."""
    return "none: SGLang asks NVML" if ranks.engine == "SGLang" else "none: no rank rule follows the GPUs' sockets"


def _not_cuda(view, engine: str) -> str:
    """One line for the GPUs that are not CUDA devices (an AMD Instinct), or ''."""
    if not view.not_cuda:
        return ""
    names = ", ".join(f"{g.pci_device} ({g.vendor_name or g.vendor} {g.device})" for g in view.not_cuda)
    return (f"{names} {'is not a CUDA device' if len(view.not_cuda) == 1 else 'are not CUDA devices'}: {engine} "
            "HiSparse with sactool's plug-in runs on CUDA GPUs only, so no rank is planned on them")
