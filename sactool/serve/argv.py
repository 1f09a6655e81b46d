"""From a profile to the exact SGLang 0.5.23 command: an argv list, an environment delta, and for
every flag and variable the profile field it came from.

Flag spellings are SGLang 0.5.23's (``arg_groups/fields/*.py``; tests/test_sglang_compat.py checks
every flag this module can emit against the released source). Design:
docs/sources.md, SGLang §6.4. Pure: no subprocess, no file reads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sactool.hisparse.engine import RADIX_CACHE_WHY
from sactool.profile import Profile
from sactool.pool.contract import PROFILE_ENV, STRICT_ENV

PLUGIN_NAME = "sactool_cxl"            # entry point name in group sglang.srt.plugins (pyproject.toml)
@dataclass(frozen=True)
class Flag:
    """One flag (with its values) of the SGLang command and where it came from."""

    args: tuple[str, ...]
    source: str        # profile field(s), "sactool" (an engine requirement) or "user (after --)"
    why: str


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    source: str
    why: str


@dataclass(frozen=True)
class Command:
    """``argv`` to exec, ``env_delta`` to add to the inherited environment, and explanations."""

    argv: tuple[str, ...]
    env_delta: dict[str, str]
    prefix: tuple[Flag, ...]           # numactl wrapper and the program (python -m … / sglang serve)
    flags: tuple[Flag, ...]
    env: tuple[EnvVar, ...]
    placement: str
    hisparse: bool                     # HiSparse flags emitted (False for the prefill role)
    notes: tuple[str, ...] = field(default_factory=tuple)


def _num(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(v)


def program(profile: Profile, python: str, entrypoint: str | None = None,
            sglang_script: str | None = None) -> tuple[str, ...]:
    """``python -m sglang.launch_server``, or ``sglang serve`` with the console script the target
    Python reported (``sglang_script``), else the one next to ``python``."""
    ep = entrypoint or profile.sglang.entrypoint
    if ep == "serve":
        if sglang_script:
            return (sglang_script, "serve")
        d = os.path.dirname(python)
        return (os.path.join(d, "sglang") if d else "sglang", "serve")
    return (python, "-m", "sglang.launch_server")


def sglang_flags(profile: Profile, *, model_path: str | None) -> list[Flag]:
    """The SGLang flags the profile implies (user extras are appended by :func:`build_command`)."""
    s, h, q, m = profile.sglang, profile.hisparse, profile.pool, profile.model
    out: list[Flag] = []
    if model_path is None:
        out.append(Flag(("--model-path", m.hf_id), "model.hf_id", "the model the profile was tuned for"))
    out.append(Flag(("--trust-remote-code",), "model.architecture",
                    f"{m.architecture} ships its own config code (DeepSeek-V3.2 canonical command)"))
    out.append(Flag(("--tp-size", str(s.tp_size)), "sglang.tp_size", "GPU ranks; each allocates its own host pool"))
    out.append(Flag(("--attn-dp-size", str(s.attn_dp_size)), "sglang.attn_dp_size",
                    "attention data parallelism (0.5.23 spelling; replaces --dp-size N --enable-dp-attention)"))
    out.append(Flag(("--kv-cache-dtype", s.kv_cache_dtype), "sglang.kv_cache_dtype",
                    "656 B FP8 records or 1152 B BF16 records per token and layer"))
    out.append(Flag(("--page-size", str(s.page_size)), "sglang.page_size", "DSA forces 64 on CUDA; stated, not tuned"))
    if s.role != "prefill":
        out.append(Flag(("--disable-radix-cache",), "sactool", RADIX_CACHE_WHY))
        out.append(Flag(("--enable-hisparse",), "sglang.role",
                        f"role {s.role}: full KV in the host pool, top-k fetched per layer"))
        out.append(Flag(("--hisparse-config", json.dumps(h.config_json(), separators=(",", ":"))),
                        "hisparse.top_k, hisparse.device_buffer_size, hisparse.host_to_device_ratio, "
                        "hisparse.swap_in_block_size",
                        "the keys SGLang's _parse_sparse_config reads"))
    if s.dsa_decode_backend:
        out.append(Flag(("--dsa-decode-backend", s.dsa_decode_backend), "sglang.dsa_decode_backend",
                        "must be in HiSparse's allow-list for the kv dtype"))
    if s.role != "colocated":
        out.append(Flag(("--disaggregation-mode", s.role), "sglang.role",
                        "PD disaggregation" + ("; HiSparse off on the prefill side" if s.role == "prefill" else "")))
    if s.base_gpu_id:
        out.append(Flag(("--base-gpu-id", str(s.base_gpu_id)), "sglang.base_gpu_id",
                        f"rank r runs on GPU {s.base_gpu_id} + r; the rank plan follows it"))
    if q.gpu_local_nodes and q.placement != "numactl":
        # SGLang indexes --numa-node by GPU id: GPUs below base_gpu_id are not used by this server
        pad = (str(q.gpu_local_nodes[0]),) * s.base_gpu_id
        out.append(Flag(("--numa-node", *pad, *map(str, q.gpu_local_nodes)), "pool.gpu_local_nodes",
                        "CPU/DRAM binding of each rank (GPU-local node, never the CXL node); indexed by GPU id"
                        + (f", the first {s.base_gpu_id} entries fill GPUs this server does not use" if pad else "")))
    for name, flag, why in _OPTIONAL_SGLANG_FLAGS:
        value = getattr(s, name)
        if value is not None:
            out.append(Flag((flag, _num(value)), f"sglang.{name}", why))
    return out


_OPTIONAL_SGLANG_FLAGS = (
    # (SglangSettings field, SGLang flag, why) — emitted only when the profile sets the field
    ("mem_fraction_static", "--mem-fraction-static", "GPU memory for weights and KV"),
    ("max_running_requests", "--max-running-requests", "concurrency the pool was sized for"),
    ("max_total_tokens", "--max-total-tokens",
     "device KV slots S per rank; the host pool holds S x host_to_device_ratio tokens"),
    ("context_length", "--context-length", "longest request the pool was sized for"),
)


def numactl_prefix(profile: Profile) -> list[Flag]:
    """``numactl …`` for placement ``numactl`` (coarse: every allocation of every rank moves)."""
    q = profile.pool
    args: list[str] = ["numactl"]
    if q.gpu_local_nodes:
        args.append("--cpunodebind=" + ",".join(str(n) for n in sorted(set(q.gpu_local_nodes))))
    nodes = ",".join(str(n) for n in q.nodes)
    if q.policy == "weighted_interleave":
        args.append("--weighted-interleave=" + ",".join(str(n) for n in sorted(q.interleave_weights)))
        why = ("weighted interleave over the nodes of pool.interleave_weights; the weights themselves are "
               "the kernel's (/sys/kernel/mm/mempolicy/weighted_interleave), numactl cannot set them")
        src = "pool.placement, pool.policy, pool.interleave_weights, pool.gpu_local_nodes"
    elif q.policy == "preferred":
        args.append(("--preferred=" if len(q.nodes) == 1 else "--preferred-many=") + nodes)
        why, src = "prefer the pool node(s) for every allocation", "pool.placement, pool.policy, pool.nodes, pool.gpu_local_nodes"
    else:
        args.append("--membind=" + nodes)
        why, src = "bind every allocation to the pool node(s)", "pool.placement, pool.policy, pool.nodes, pool.gpu_local_nodes"
    return [Flag(tuple(args), src, why + "; coarse baseline: heap, staging and page cache move too")]


def build_command(profile: Profile, *, profile_path: str, extra_args: Sequence[str] = (), python: str,
                  entrypoint: str | None = None, environ: Mapping[str, str] | None = None,
                  sglang_script: str | None = None, extra_env: Sequence[EnvVar] = ()) -> Command:
    """argv and environment delta for ``profile`` (checks are done by :mod:`sactool.serve.checks`);
    ``extra_env``: variables the launcher resolved on the machine (:mod:`sactool.serve.gpus`)."""
    environ = os.environ if environ is None else environ
    q, s, h = profile.pool, profile.sglang, profile.hisparse
    extra = list(extra_args)
    hisparse = s.role != "prefill"
    model_path = next((extra[i + 1] for i, a in enumerate(extra[:-1]) if a in ("--model-path", "--model")), None)
    if model_path is None:
        model_path = next((a.split("=", 1)[1] for a in extra if a.startswith(("--model-path=", "--model="))), None)
    prefix: list[Flag] = numactl_prefix(profile) if q.placement == "numactl" and hisparse else []
    prog = program(profile, python, entrypoint, sglang_script)
    prefix.append(Flag(prog, "sglang.entrypoint" if entrypoint is None else "--entrypoint",
                       "SGLang's launcher in the target Python"))
    flags = sglang_flags(profile, model_path=model_path)
    if extra:
        flags.append(Flag(tuple(extra), "user (after --)", "passed through last so they win, each option spelled in full as SGLang resolves it"))
    env: list[EnvVar] = []
    notes: list[str] = []
    if not environ.get("CUDA_DEVICE_ORDER"):
        env.append(EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "sactool",
                          "GPU ids in PCI bus order, the order the GPU plan assumes (pool.gpu_local_nodes, "
                          "--numa-node, placement locality); CUDA's default is FASTEST_FIRST, and SGLang warns "
                          "without it (platforms/cuda.py)"))
    env.extend(extra_env)
    if hisparse and q.placement == "plugin":
        cur = [p.strip() for p in environ.get("SGLANG_PLUGINS", "").split(",") if p.strip()]
        if cur and PLUGIN_NAME not in cur:
            env.append(EnvVar("SGLANG_PLUGINS", ",".join(cur + [PLUGIN_NAME]), "pool.placement",
                              "SGLANG_PLUGINS is a whitelist: sactool_cxl appended to the plug-ins already named"))
        elif not cur:
            notes.append("SGLANG_PLUGINS is unset, and stays so: SGLang then loads every installed plug-in, "
                         "sactool_cxl included (setting it would whitelist only the plug-ins it names)")
        env.append(EnvVar(PROFILE_ENV, os.path.abspath(profile_path), "--profile",
                          "the plug-in reads pool.* from it: " + _targets(profile)))
        if q.strict:
            env.append(EnvVar(STRICT_ENV, "1", "pool.strict",
                              "the plug-in stops the rank instead of falling back to SGLang's allocator"))
    if hisparse and not h.prefetch:
        env.append(EnvVar("SGLANG_DISABLE_HISPARSE_PREFETCH", "1", "hisparse.prefetch",
                          "prefetch off (it only acts on IndexShare models)"))
    if q.register_chunk_gb is not None:
        env.append(EnvVar("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", str(q.register_chunk_gb), "pool.register_chunk_gb",
                          "cudaHostRegister chunk size of the host pool"))
    if hisparse and q.placement in ("numactl", "none"):
        if q.placement == "numactl":
            env.append(EnvVar("SGLANG_AUTO_NUMA_BIND", "0", "pool.placement",
                              "SGLang would re-exec each rank under numactl --membind=<GPU node>, undoing the prefix"))
        if q.hugepages in ("2MB", "1GB"):
            env.append(EnvVar("SGLANG_HUGEPAGE_SIZE", q.hugepages, "pool.hugepages", "stock allocator: MAP_HUGETLB pages"))
        elif q.hugepages == "thp":
            env.append(EnvVar("SGLANG_HICACHE_HOST_PARALLEL_ALLOC_THREADS", str(q.prefault_threads),
                              "pool.prefault_threads, pool.hugepages",
                              "stock allocator: private THP mapping pre-faulted by this many threads"))
        else:
            notes.append("pool.hugepages none: SGLang's stock allocator keeps its shared mapping "
                         "(no parallel pre-fault, which would ask for THP)")
    if hisparse and q.placement == "none":
        notes.append("placement none: DRAM baseline with the same HiSparse settings, for A/B runs")
    if not hisparse:
        notes.append("role prefill: no HiSparse host pool, so no placement and no plug-in")
    argv = tuple(a for f in prefix for a in f.args) + tuple(a for f in flags for a in f.args)
    return Command(argv=argv, env_delta={e.name: e.value for e in env}, prefix=tuple(prefix), flags=tuple(flags),
                   env=tuple(env), placement=q.placement if hisparse else "none", hisparse=hisparse,
                   notes=tuple(notes))


def with_poison_env(cmd: Command, profile: Profile, facts: Sequence[Any]) -> Command:
    """``cmd`` with ``$SACTOOL_POOL_POISON``: the known poison of each DAX target (``facts``: the
    targets as serve's pool check read them) — every rank carves its slice around exactly this set,
    so the plan each rank maps is the one the dry-run shows. Unchanged in NUMA mode, or when no
    device's poison list was read (then the ranks plan without it, as serve did)."""
    import dataclasses

    from sactool.pool.contract import POISON_ENV, poison_value

    if profile.pool.mode != "devdax":
        return cmd
    value = poison_value({t.name: t.poison for t in facts if t.kind == "devdax"})
    if value is None:
        return cmd
    n = sum(len(t.poison or ()) for t in facts if t.kind == "devdax")
    var = EnvVar(POISON_ENV, value, "the devices' poison lists (read by this serve)",
                 f"{n} known poisoned range(s): every rank carves its devdax slice around the same set, as the "
                 "plan shows" if n else "no known poison: every rank maps the plain slices, as the plan shows")
    env = tuple(e for e in cmd.env if e.name != POISON_ENV) + (var,)
    return dataclasses.replace(cmd, env=env, env_delta={e.name: e.value for e in env})


def _targets(profile: Profile) -> str:
    from sactool.errors import SactoolError
    from sactool.pool.plan import PoolSpec, ranks_by_target

    try:
        return "; ".join(f"{t} <- ranks {','.join(map(str, rs))}" for t, rs in ranks_by_target(PoolSpec.of(profile)).items())
    except SactoolError as e:  # a bad rank table is reported by the checks, not here
        return e.message
