"""The serving profile: the record ``sactool tune`` writes and ``sactool serve`` / the
``sactool_cxl`` SGLang plug-in / ``sactool simulate`` consume.

Layout (YAML, ``kind: profile``)::

    kind, schema_version, sactool_version, created_at   # header (records.header)
    machine: {...}          # machine block of the host the profile was tuned on
    model:    ModelRef      # which model, with the figures the engine will check
    pool:     PoolSettings  # where the HiSparse host pool lives and how it is allocated
    hisparse: HiSparseSettings   # -> --hisparse-config JSON and the prefetch switch
    sglang:   SglangSettings     # -> the rest of the SGLang argv (tp, attn-dp, kv dtype, …)
    request:  {...}         # what the user asked tune for (contexts, concurrency, GPU, budget)
    predictions: {...}      # what tune predicts for the chosen settings (hit rate, bytes, …)
    bench: {...} | null     # the bench record the fetch costs came from (path, digest, node)
    workload: {...} | null  # what the hot-buffer misses were simulated on: the workload model (which
                            # per-layer profile, or the random layer spread) or a --trace; null in a
                            # profile written before schema 2 (not recorded)
    provenance: {"hisparse.device_buffer_size": {source, detail}, ...}
    fleet: {...}            # only from tune --fleet: this host's share of a shared pool, its bandwidth
                            # when every host fetches at once, and the fleet record they came from

Every field of ``pool``, ``hisparse`` and ``sglang`` changes the SGLang argv, its environment or
the plug-in's behaviour; ``request``, ``predictions``, ``bench`` and ``provenance`` are the record
of why. ``provenance`` says for each settings field whether it was ``measured``, ``default``,
``user``-given, an ``engine`` constraint, or ``derived`` from other values.

Loading validates every field and names the field in the error; an older schema is upgraded step
by step, a newer one refused ("upgrade sactool").
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from sactool.errors import RecordError
from sactool.records import atomic_write, dumps, header, load_structured, upgrade

KIND = "profile"
SCHEMA_VERSION = 3
"""2: the ``workload`` block (where the hot-buffer figures came from); a schema-1 profile is
upgraded with ``workload: null`` (not recorded)."""

PLACEMENTS = ("plugin", "numactl", "none")
POOL_MODES = ("numa", "devdax")
POLICIES = ("bind", "preferred", "weighted_interleave")
HUGEPAGES = ("none", "thp", "2MB", "1GB")
RANK_ASSIGNMENTS = ("locality", "round_robin", "packed", "explicit")
ROLES = ("colocated", "prefill", "decode")
ENTRYPOINTS = ("launch_server", "serve")
from sactool.hisparse.layout import KV_DTYPES  # noqa: E402  (one owner: the HiSparse layout)
PROVENANCE_SOURCES = ("measured", "default", "user", "engine", "derived")

# SGLang 0.5.23 facts: one owner, the HiSparse engine module (re-exported here)
from sactool.hisparse.engine import DEFAULT_SGLANG_TESTED, DSA_PAGE_SIZE_CUDA, SWAP_IN_BLOCK_RANGE  # noqa: E402,F401


@dataclass(frozen=True)
class Provenance:
    """Where one settings value came from."""

    source: str     # measured | default | user | engine | derived
    detail: str = ""


@dataclass(frozen=True)
class ModelRef:
    """The model the profile is for (figures from its config.json; docs/sources.md, design facts)."""

    name: str                     # sactool's model name, e.g. "deepseek-v3.2"
    hf_id: str                    # Hugging Face id or local path, e.g. "deepseek-ai/DeepSeek-V3.2"
    architecture: str             # config.json "architectures"[0], e.g. "DeepseekV32ForCausalLM"
    num_layers: int               # num_hidden_layers
    kv_lora_rank: int
    qk_rope_head_dim: int
    index_topk: int
    max_position_embeddings: int

    @classmethod
    def of(cls, spec: Any) -> ModelRef:
        """The reference a profile keeps to model ``spec`` (a :class:`sactool.models.ModelSpec`)."""
        return cls(name=spec.name, hf_id=spec.hf_id, architecture=spec.architecture, num_layers=spec.num_layers,
                   kv_lora_rank=spec.kv_lora_rank, qk_rope_head_dim=spec.qk_rope_head_dim,
                   index_topk=spec.index_topk, max_position_embeddings=spec.max_position_embeddings)


@dataclass(frozen=True)
class PoolSettings:
    """Where the HiSparse host pool lives (consumed by ``serve`` and the plug-in)."""

    placement: str = "plugin"            # plugin | numactl | none (DRAM baseline)
    mode: str = "numa"                   # numa: NUMA node(s); devdax: /dev/daxX.Y mapped
    nodes: tuple[int, ...] = ()          # pool NUMA nodes (CXL, or the DRAM node standing in)
    dax_devices: tuple[str, ...] = ()    # e.g. ("dax0.0",) when mode == devdax
    rank_assignment: str = "round_robin"  # locality (GPU's socket) | round_robin (SAC: rank % devices) | packed | explicit
    rank_targets: tuple[str, ...] = ()   # resolved per rank: "node2" / "dax0.0"
    policy: str = "bind"                 # bind | preferred | weighted_interleave
    interleave_weights: dict[int, int] = field(default_factory=dict)  # node -> weight (weighted_interleave)
    hugepages: str = "thp"               # none | thp (MADV_HUGEPAGE) | 2MB | 1GB (hugetlbfs pool)
    prefault_threads: int = 8            # threads that pre-fault the pool, pinned near its node
    prefault_cpus: str = "auto"          # "auto" (CPUs nearest the pool node) or a cpulist
    register_chunk_gb: int | None = None  # SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB
    strict: bool = False                 # plug-in: stop instead of falling back to SGLang's allocator
    stand_in: bool = False               # True when a DRAM node stood in for CXL (no CXL on the host)
    gpu_local_nodes: tuple[int, ...] = ()  # per GPU rank -> --numa-node (CPU/DRAM binding, never CXL);
    #                                        also the GPU locality rank_assignment locality follows
    capacity_bytes: int | None = None    # bytes of each target the pool may use (the fork's map_bytes):
    #                                      devdax slices split min(this, device size); None = free
    #                                      memory of the node / size of the device (tune --pool-bytes)


@dataclass(frozen=True)
class HiSparseSettings:
    """SGLang HiSparse settings -> ``--hisparse-config`` JSON and env switches."""

    top_k: int = 2048
    device_buffer_size: int = 4096       # hot-buffer slots per request (>= top_k)
    host_to_device_ratio: int = 2        # host pool tokens = device slots x ratio
    swap_in_block_size: int = 960        # CUDA threads per CTA of the swap-in kernel (1..1024)
    prefetch: bool = True                # False -> SGLANG_DISABLE_HISPARSE_PREFETCH=1

    def config_json(self) -> dict[str, int]:
        """The exact ``--hisparse-config`` keys SGLang 0.5.23 parses (factory.py _parse_sparse_config)."""
        return {
            "top_k": self.top_k,
            "device_buffer_size": self.device_buffer_size,
            "host_to_device_ratio": self.host_to_device_ratio,
            "swap_in_block_size": self.swap_in_block_size,
        }


@dataclass(frozen=True)
class SglangSettings:
    """The rest of the SGLang command line."""

    tested: str = DEFAULT_SGLANG_TESTED   # version range the argv was checked against
    entrypoint: str = "launch_server"     # launch_server (python -m sglang.launch_server) | serve (sglang serve)
    role: str = "colocated"               # colocated | prefill | decode (--disaggregation-mode)
    tp_size: int = 1
    attn_dp_size: int = 1
    kv_cache_dtype: str = "fp8_e4m3"      # fp8_e4m3 (656 B records) | bfloat16 (1152 B)
    page_size: int = DSA_PAGE_SIZE_CUDA
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    context_length: int | None = None
    dsa_decode_backend: str | None = None
    base_gpu_id: int = 0                  # --base-gpu-id: rank r runs on GPU base_gpu_id + r (one node)
    max_total_tokens: int | None = None   # --max-total-tokens: device KV slots S per rank; the
    #                                       HiSparse host pool is S x host_to_device_ratio tokens


@dataclass(frozen=True)
class Profile:
    model: ModelRef
    pool: PoolSettings
    hisparse: HiSparseSettings
    sglang: SglangSettings
    machine: dict[str, Any] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)
    predictions: dict[str, Any] = field(default_factory=dict)
    bench: dict[str, Any] | None = None
    provenance: dict[str, Provenance] = field(default_factory=dict)
    workload: dict[str, Any] | None = None   # what tune's hot-buffer simulation ran on (None: not recorded)
    fleet: dict[str, Any] | None = None   # tune --fleet: this host's share of a shared pool and its sources
    kind: str = KIND
    schema_version: int = SCHEMA_VERSION
    sactool_version: str = ""
    created_at: str = ""

    @property
    def world_size(self) -> int:
        """Scheduler ranks that each allocate a host pool (one per GPU)."""
        return self.sglang.tp_size

    def to_data(self) -> dict[str, Any]:
        from sactool.records import to_data

        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        order = ["kind", "schema_version", "sactool_version", "created_at", "machine", "model", "pool",
                 "hisparse", "sglang", "request", "predictions", "bench", "workload", "provenance"]
        out = {k: to_data(d[k]) for k in order}
        if self.fleet is not None:  # written only by tune --fleet
            out["fleet"] = to_data(self.fleet)
        return out


# ------------------------------------------------------------------------------------------
# Construction, validation, load, save
# ------------------------------------------------------------------------------------------

def new_profile(**kw: Any) -> Profile:
    """A profile with a fresh header (version, UTC time); validated."""
    h = header(KIND, SCHEMA_VERSION)
    prof = Profile(sactool_version=h["sactool_version"], created_at=h["created_at"], **kw)
    validate(prof)
    return prof


def _err(field_name: str, msg: str, hint: str | None = None) -> RecordError:
    return RecordError(f"profile field {field_name}: {msg}", hint or "fix the field, or re-create the profile with sactool tune")


def _int(v: Any, name: str, lo: int | None = None, hi: int | None = None, *, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise _err(name, f"must be an integer, got {v!r}")
    if lo is not None and v < lo:
        raise _err(name, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise _err(name, f"must be <= {hi}, got {v}")
    return v


def _choice(v: Any, name: str, choices: tuple[str, ...]) -> str:
    if v not in choices:
        raise _err(name, f"must be one of {', '.join(choices)}; got {v!r}")
    return v


def _str(v: Any, name: str, *, optional: bool = False) -> str | None:
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v:
        raise _err(name, f"must be a non-empty string, got {v!r}")
    return v


def _bool(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise _err(name, f"must be true or false, got {v!r}")
    return v


_TARGET_RE = re.compile(r"^(node\d+|dax\d+\.\d+)$")
_VERSION_CLAUSE_RE = re.compile(r"^(>=|<=|==|!=|>|<)\s*(v?\d+(?:\.\d+)*)\S*$")


def version_spec(spec: str, name: str = "sglang.tested") -> list[tuple[str, tuple[int, ...]]]:
    """``'>=0.5.23,<0.6'`` → ``[('>=', (0, 5, 23)), ('<', (0, 6))]``: the comma-separated >=, >, <=,
    <, ==, != clauses ``serve`` compares the installed SGLang with (release numbers only, trailing
    zeros dropped). Anything else is a RecordError naming the field, so ``profile validate`` and
    ``serve`` refuse the same profiles."""
    if not isinstance(spec, str) or not spec.strip():
        raise _err(name, f"must be a version range like '>=0.5.23,<0.6', got {spec!r}")
    out = []
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = _VERSION_CLAUSE_RE.match(clause)
        if not m:
            raise _err(name, f"cannot read {clause!r} as a version clause", "use e.g. '>=0.5.23,<0.6'")
        parts = [int(x) for x in m.group(2).lstrip("v").split(".")]
        while len(parts) > 1 and parts[-1] == 0:
            parts.pop()
        out.append((m.group(1), tuple(parts)))
    return out


def validate(p: Profile) -> Profile:
    """Check every settings field and the cross-field rules; raise RecordError naming the field."""
    _validate_model(p.model)
    _validate_hisparse(p.hisparse, p.model)
    _validate_sglang(p.sglang, p.hisparse, p.model)
    _validate_pool_targets(p.pool, p.sglang)
    _validate_pool_allocation(p.pool, p.sglang)
    for k, v in p.provenance.items():
        if not isinstance(v, Provenance) or v.source not in PROVENANCE_SOURCES:
            raise _err(f"provenance[{k!r}]", f"source must be one of {', '.join(PROVENANCE_SOURCES)}")
    return p


def _validate_model(m: ModelRef) -> None:
    _str(m.name, "model.name")
    _str(m.hf_id, "model.hf_id")
    _str(m.architecture, "model.architecture")
    for f in ("num_layers", "kv_lora_rank", "qk_rope_head_dim", "index_topk", "max_position_embeddings"):
        _int(getattr(m, f), f"model.{f}", 1)


def _validate_hisparse(h: HiSparseSettings, m: ModelRef) -> None:
    _int(h.top_k, "hisparse.top_k", 1)
    if h.top_k != m.index_topk:
        raise _err("hisparse.top_k", f"{h.top_k} differs from the model's index_topk {m.index_topk} "
                   "(SGLang overrides top_k with index_topk)")
    _int(h.device_buffer_size, "hisparse.device_buffer_size", h.top_k)
    _int(h.host_to_device_ratio, "hisparse.host_to_device_ratio", 1)
    _int(h.swap_in_block_size, "hisparse.swap_in_block_size", *SWAP_IN_BLOCK_RANGE)
    _bool(h.prefetch, "hisparse.prefetch")


def _validate_sglang(s: SglangSettings, h: HiSparseSettings, m: ModelRef) -> None:
    version_spec(s.tested)
    _choice(s.entrypoint, "sglang.entrypoint", ENTRYPOINTS)
    _choice(s.role, "sglang.role", ROLES)
    _int(s.tp_size, "sglang.tp_size", 1)
    _int(s.attn_dp_size, "sglang.attn_dp_size", 1)
    if s.tp_size % s.attn_dp_size:
        raise _err("sglang.attn_dp_size", f"{s.attn_dp_size} must divide tp_size {s.tp_size}")
    _choice(s.kv_cache_dtype, "sglang.kv_cache_dtype", KV_DTYPES)
    _int(s.page_size, "sglang.page_size", 1)
    if s.page_size != DSA_PAGE_SIZE_CUDA:
        raise _err("sglang.page_size", f"DSA on CUDA forces page size {DSA_PAGE_SIZE_CUDA}, got {s.page_size}")
    if s.mem_fraction_static is not None and not (isinstance(s.mem_fraction_static, (int, float))
                                                 and not isinstance(s.mem_fraction_static, bool)
                                                 and 0 < s.mem_fraction_static < 1):
        raise _err("sglang.mem_fraction_static", f"must be a number in (0, 1), got {s.mem_fraction_static!r}")
    _int(s.max_running_requests, "sglang.max_running_requests", 1, optional=True)
    _int(s.context_length, "sglang.context_length", 1, m.max_position_embeddings, optional=True)
    _str(s.dsa_decode_backend, "sglang.dsa_decode_backend", optional=True)
    _int(s.max_total_tokens, "sglang.max_total_tokens", 1, optional=True)
    _int(s.base_gpu_id, "sglang.base_gpu_id", 0)
    if s.max_total_tokens is not None and s.max_total_tokens < h.device_buffer_size:
        raise _err("sglang.max_total_tokens", f"{s.max_total_tokens} is smaller than one request's hot buffer "
                   f"(device_buffer_size {h.device_buffer_size})")


def _validate_pool_targets(q: PoolSettings, s: SglangSettings) -> None:
    """Placement, mode, nodes / DAX devices and the rank → target map."""
    _choice(q.placement, "pool.placement", PLACEMENTS)
    _choice(q.mode, "pool.mode", POOL_MODES)
    for i, n in enumerate(q.nodes):
        _int(n, f"pool.nodes[{i}]", 0)
    for i, d in enumerate(q.dax_devices):
        if not isinstance(d, str) or not re.match(r"^dax\d+\.\d+$", d):
            raise _err(f"pool.dax_devices[{i}]", f"must name a DAX device like dax0.0, got {d!r}")
    if q.placement != "none":
        if q.mode == "numa" and not q.nodes:
            raise _err("pool.nodes", "is empty: name the NUMA node(s) that hold the pool")
        if q.mode == "devdax" and not q.dax_devices:
            raise _err("pool.dax_devices", "is empty while pool.mode is devdax")
        if q.mode == "devdax" and q.placement == "numactl":
            raise _err("pool.placement", "numactl cannot place memory on a devdax device; use plugin")
    _choice(q.rank_assignment, "pool.rank_assignment", RANK_ASSIGNMENTS)
    if q.rank_targets:
        if len(q.rank_targets) != s.tp_size:
            raise _err("pool.rank_targets", f"has {len(q.rank_targets)} entries for {s.tp_size} ranks (tp_size)")
        allowed = {f"node{n}" for n in q.nodes} if q.mode == "numa" else set(q.dax_devices)
        for i, t in enumerate(q.rank_targets):
            if not isinstance(t, str) or not _TARGET_RE.match(t):
                raise _err(f"pool.rank_targets[{i}]", f"must be nodeN or daxX.Y, got {t!r}")
            if t not in allowed:
                raise _err(f"pool.rank_targets[{i}]", f"{t} is not among the pool's targets {sorted(allowed)}")


def _validate_pool_allocation(q: PoolSettings, s: SglangSettings) -> None:
    """Policy, weights, huge pages, prefault, strictness and the GPU-local nodes."""
    _choice(q.policy, "pool.policy", POLICIES)
    if not isinstance(q.interleave_weights, dict):
        raise _err("pool.interleave_weights", "must be a mapping node -> weight")
    for k, w in q.interleave_weights.items():
        _int(k, "pool.interleave_weights key", 0)
        _int(w, f"pool.interleave_weights[{k}]", 1, 255)
    if q.policy == "weighted_interleave" and not q.interleave_weights:
        raise _err("pool.interleave_weights", "is empty while pool.policy is weighted_interleave")
    _choice(q.hugepages, "pool.hugepages", HUGEPAGES)
    _int(q.prefault_threads, "pool.prefault_threads", 1, 1024)
    if q.prefault_cpus != "auto":
        from sactool.host.sysfs import parse_cpulist

        try:
            if not parse_cpulist(str(q.prefault_cpus)):
                raise ValueError("empty")
        except ValueError:
            raise _err("pool.prefault_cpus", f"must be 'auto' or a cpulist like 0-15, got {q.prefault_cpus!r}") from None
    _int(q.register_chunk_gb, "pool.register_chunk_gb", 1, optional=True)
    _int(q.capacity_bytes, "pool.capacity_bytes", 1, optional=True)
    if q.rank_assignment == "locality" and not q.rank_targets and not q.gpu_local_nodes and q.placement != "none":
        raise _err("pool.rank_assignment", "locality needs each rank's GPU node in pool.gpu_local_nodes",
                   "set pool.gpu_local_nodes, or use round_robin")
    _bool(q.strict, "pool.strict")
    _bool(q.stand_in, "pool.stand_in")
    if q.gpu_local_nodes:
        if len(q.gpu_local_nodes) != s.tp_size:
            raise _err("pool.gpu_local_nodes", f"has {len(q.gpu_local_nodes)} entries for {s.tp_size} ranks")
        for i, n in enumerate(q.gpu_local_nodes):
            _int(n, f"pool.gpu_local_nodes[{i}]", 0)


def settings_fields() -> list[str]:
    """Dotted names of every settings field (``pool.*``, ``hisparse.*``, ``sglang.*``)."""
    out: list[str] = []
    for sect, cls in (("pool", PoolSettings), ("hisparse", HiSparseSettings), ("sglang", SglangSettings)):
        out.extend(f"{sect}.{f.name}" for f in dataclasses.fields(cls))
    return out


def _defaults() -> dict[str, Any]:
    out = {}
    for sect, cls in (("pool", PoolSettings), ("hisparse", HiSparseSettings), ("sglang", SglangSettings)):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f"{sect}.{f.name}"] = f.default
            elif f.default_factory is not dataclasses.MISSING:   # type: ignore[misc]
                out[f"{sect}.{f.name}"] = f.default_factory()    # type: ignore[misc]
    return out


def _build(cls, data: Any, section: str):
    if not isinstance(data, Mapping):
        raise _err(section, f"must be a mapping, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise _err(f"{section}.{unknown[0]}", "is not a known field", "remove it, or upgrade sactool if a newer one wrote it")
    kw = {}
    for k, v in data.items():
        if isinstance(v, list):
            v = tuple(v)
        kw[k] = v
    missing = [n for n, f in names.items() if n not in kw and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    if missing:
        raise _err(f"{section}.{missing[0]}", "is missing")
    return cls(**kw)


def _upgrade_1_to_2(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 had no ``workload`` block: which workload its hot-buffer figures came from is not
    recorded (null), not guessed."""
    record.setdefault("workload", None)
    return record


def _upgrade_2_to_3(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 2's machine block spelled ``numa_nodes[].node`` ``"node2"``; 3 holds the number."""
    from sactool.host.machine import upgrade_machine

    if "machine" in record:
        record["machine"] = upgrade_machine(record["machine"])
    return record


_UPGRADES: dict[int, Any] = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}  # schema n -> n+1 steps, applied in order


_DEFAULTS = _defaults()


def from_data(data: dict[str, Any], *, source: str = "profile") -> Profile:
    """Build and validate a Profile from loaded YAML/JSON data."""
    data = upgrade(data, kind=KIND, current=SCHEMA_VERSION, steps=_UPGRADES, source=source)
    known = {f.name for f in dataclasses.fields(Profile)}
    unknown = sorted(str(k) for k in set(data) - known)
    if unknown:   # the same rule as inside a section (_build): a typo must not pass silently
        raise _err(unknown[0], "is not a known field", "remove it, or upgrade sactool if a newer one wrote it")
    for sect in ("model", "pool", "hisparse", "sglang"):
        if sect not in data:
            raise _err(sect, "is missing")
    prov_raw = data.get("provenance") or {}
    if not isinstance(prov_raw, Mapping):
        raise _err("provenance", "must be a mapping")
    prov = {}
    for k, v in prov_raw.items():
        if not isinstance(v, Mapping) or "source" not in v:
            raise _err(f"provenance[{k!r}]", "must be a mapping with a 'source'")
        prov[str(k)] = Provenance(source=v["source"], detail=str(v.get("detail", "")))
    pool = _build(PoolSettings, data["pool"], "pool")
    if isinstance(pool.interleave_weights, Mapping):
        try:
            pool = dataclasses.replace(pool, interleave_weights={int(k): v for k, v in pool.interleave_weights.items()})
        except (TypeError, ValueError):
            raise _err("pool.interleave_weights", "keys must be node numbers") from None
    for name in ("machine", "request", "predictions"):
        if not isinstance(data.get(name) or {}, Mapping):
            raise _err(name, "must be a mapping")
    if data.get("bench") is not None and not isinstance(data["bench"], Mapping):
        raise _err("bench", "must be a mapping or null")
    if data.get("fleet") is not None and not isinstance(data["fleet"], Mapping):
        raise _err("fleet", "must be a mapping or null")
    if data.get("workload") is not None and not isinstance(data["workload"], Mapping):
        raise _err("workload", "must be a mapping or null")
    prof = Profile(
        model=_build(ModelRef, data["model"], "model"),
        pool=pool,
        hisparse=_build(HiSparseSettings, data["hisparse"], "hisparse"),
        sglang=_build(SglangSettings, data["sglang"], "sglang"),
        machine=dict(data.get("machine") or {}),
        request=dict(data.get("request") or {}),
        predictions=dict(data.get("predictions") or {}),
        bench=dict(data["bench"]) if data.get("bench") else None,
        fleet=dict(data["fleet"]) if data.get("fleet") else None,
        workload=dict(data["workload"]) if data.get("workload") else None,
        provenance=prov,
        schema_version=data["schema_version"],
        sactool_version=str(data.get("sactool_version", "")),
        created_at=str(data.get("created_at", "")),
    )
    from sactool.profile import whole

    whole.check_data(data, _DEFAULTS)   # sections, provenance of every field set, finite numbers (the file as a whole)
    validate(prof)
    whole.check_profile(prof)
    return prof


def workload_summary(block: Mapping[str, Any] | None) -> str:
    """One line saying what a profile's hot-buffer figures were simulated on (its ``workload``)."""
    if not block:
        return "not recorded (a profile written before schema 2)"
    if block.get("source") == "trace":
        return f"trace {block.get('trace')} ({block.get('steps')} steps, model {block.get('trace_model')})"
    runs = f"{block.get('steps')} steps x {len(block.get('seeds') or ())} seeds"
    name = block.get("name")
    if name and name != "sharegpt-dsv32":
        return f"workload {name} ({block.get('targets')}: {block.get('statistics')}); {runs}"
    name = f"workload {name}: " if name else ""
    if block.get("model_profile"):
        return (f"{name}workload model, {block['model_profile']} per-layer targets ({block.get('targets')}); "
                f"revisit knobs assumed; {runs}")
    return (f"{name}workload model, random per-layer spread (no per-layer profile for {block.get('model')}); "
            f"revisit knobs assumed; {runs}")


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Load, upgrade and validate a profile file (YAML or JSON)."""
    return from_data(load_structured(path, what="profile"), source=f"profile {path}")


def save_profile(profile: Profile, path: str | os.PathLike[str], *, force: bool = False,
                 make_parents: bool = False) -> Path:
    """Validate and write atomically as YAML; refuses to overwrite without ``force``. When the
    write fails (another tune wrote ``path`` meanwhile, a full disk, no inodes left) the profile
    is saved under the temporary directory and the error's hint names it (records.save_result)."""
    from sactool.records import save_result

    validate(profile)
    written, err = save_result(path, dumps(profile, "yaml"), force=force, kind="profile", suffix=".yaml",
                               make_parents=make_parents)
    if err is not None:
        raise err
    assert written is not None   # no error: the file is where it was asked to be
    return written


def default_profile_path(model_name: str, hostname: str | None = None) -> Path:
    """``profiles/<model>/<hostname>.yaml`` relative to the current directory."""
    import socket

    return Path("profiles") / model_name / f"{hostname or socket.gethostname()}.yaml"
