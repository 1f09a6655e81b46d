"""The serving profile: the record ``sactool tune`` writes and ``sactool serve`` / the
``sactool_cxl`` SGLang plug-in / ``sactool simulate`` consume.

Layout (YAML, ``kind: profile``)::

    kind, schema_version, sactool_version, created_at   # header (records.header)
    engine: sglang | vllm   # the serving engine the settings are for (schema 4; older profiles: sglang)
    machine: {...}          # machine block of the host the profile was tuned on
    model:    ModelRef      # which model, with the figures the engine will check
    pool:     PoolSettings  # where the HiSparse host pool lives and how it is allocated
    hisparse: HiSparseSettings   # -> --hisparse-config JSON and the prefetch switch
    sglang:   SglangSettings     # -> the rest of the SGLang argv (tp, attn-dp, kv dtype, …); engine sglang
    vllm:     VllmSettings       # -> the vllm serve argv (tp, dp, host_pool_gib, …); engine vllm only,
                                 #    with hisparse holding only top_k and device_buffer_size
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
SCHEMA_VERSION = 4
"""Version of the profile; its history (upgrades: ``_UPGRADES``):

1 — the first format.
2 — the ``workload`` block (where the hot-buffer figures came from; a schema-1 profile gets ``workload: null``).
3 — the ``machine`` block's ``numa_nodes[].node`` is a number (the bench and fleet blocks' pool targets stay names).
4 — ``engine`` (sglang or vllm) and the ``vllm`` section; an older profile is upgraded with ``engine: sglang``."""

ENGINES = ("sglang", "vllm")

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
from sactool.hisparse.vllm import BLOCK_SIZE as VLLM_BLOCK_SIZE, VLLM_TESTED  # noqa: E402

VLLM_KV_DTYPES = ("fp8_ds_mla", "auto")
"""vLLM's ``--kv-cache-dtype`` for DSA records: 656-byte FP8 (``fp8_ds_mla``) or the model's BF16 (``auto``)."""
VLLM_EXECUTORS = ("mp", "ray", "uni", "external_launcher")


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
class VllmSettings:
    """The ``vllm serve`` command line of a vLLM profile (vLLM's own HiSparse, :mod:`sactool.hisparse.vllm`)."""

    tested: str = VLLM_TESTED             # vLLM range the argv and plug-in hooks were checked against
    tp_size: int = 1                      # --tensor-parallel-size: GPUs of one DP replica
    dp_size: int = 1                      # --data-parallel-size: replicas (each its own pool)
    enable_expert_parallel: bool = False  # --enable-expert-parallel (DP attention with EP MoE)
    kv_cache_dtype: str = "fp8_ds_mla"    # fp8_ds_mla (656 B records) | auto (model dtype, 1152 B BF16)
    block_size: int = VLLM_BLOCK_SIZE     # --block-size: tokens per KV block = per host block
    max_model_len: int | None = None      # --max-model-len: longest request; the pool holds one at least
    max_num_seqs: int | None = None       # --max-num-seqs: running requests per DP replica
    gpu_memory_utilization: float | None = None
    host_pool_gib: float = 1.0            # kv_connector_extra_config.host_pool_gib: one pool (per DP replica
    #                                       when shared, per rank when private), usable capacity
    shared_host_pool: bool = False        # one region per DP replica read by its TP ranks (tp > 1, mp executor)
    distributed_executor_backend: str | None = None   # "mp" when the shared pool is planned
    eager_host_mirror: bool = True        # hisparse_config.eager_host_mirror

    @property
    def gpus(self) -> int:
        return self.tp_size * self.dp_size

    @property
    def pool_owners(self) -> int:
        """Pools allocated on this host: one per DP replica when shared, one per rank otherwise."""
        return self.dp_size if self.shared_host_pool else self.gpus

    def host_pool(self, model: ModelRef) -> Any:
        """The pool as vLLM sizes it (:class:`sactool.hisparse.vllm.HostPool`)."""
        from sactool.hisparse.layout import record_bytes
        from sactool.hisparse.vllm import HostPool

        dtype = "fp8_e4m3" if self.kv_cache_dtype == "fp8_ds_mla" else "bfloat16"
        return HostPool(self.host_pool_gib, model.num_layers, record_bytes(model.kv_lora_rank, model.qk_rope_head_dim,
                        dtype), self.block_size, self.shared_host_pool)


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
    engine: str = "sglang"                # sglang | vllm: which engine the settings are for
    vllm: VllmSettings | None = None      # engine vllm: the vllm serve settings
    kind: str = KIND
    schema_version: int = SCHEMA_VERSION
    sactool_version: str = ""
    created_at: str = ""

    @property
    def world_size(self) -> int:
        """Processes that each allocate a host pool: SGLang's scheduler ranks (one per GPU); vLLM's
        DP replicas (a shared pool read by the replica's TP ranks) or its ranks (private pools)."""
        if self.engine == "vllm" and self.vllm is not None:
            return self.vllm.pool_owners
        return self.sglang.tp_size

    def to_data(self) -> dict[str, Any]:
        from sactool.records import to_data

        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        order = ["kind", "schema_version", "sactool_version", "created_at", "engine", "machine", "model", "pool",
                 "hisparse", "sglang", "vllm", "request", "predictions", "bench", "workload", "provenance"]
        if self.engine == "vllm":   # vLLM's own settings; of hisparse only what vLLM reads
            order.remove("sglang")
            d["hisparse"] = {k: getattr(self.hisparse, k) for k in VLLM_HISPARSE_FIELDS}
        else:
            order.remove("vllm")
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


def _release(v: str) -> tuple[int, ...]:
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", v)
    if not m:
        raise ValueError(v)
    parts = [int(x) for x in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def version_in(version: str, spec: str) -> bool:
    """``version`` satisfies a comma-separated PEP 440-style range of >=, >, <=, <, ==, != clauses
    (:func:`version_spec`; release numbers only, a pre-release counts as its release): the one test
    ``serve`` applies to the installed engine and the plug-ins to their hook tables."""
    v = _release(version)
    ops = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b,
           "<": lambda a, b: a < b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
    return all(ops[op](v, release) for op, release in version_spec(spec))


def validate(p: Profile) -> Profile:
    """Check every settings field and the cross-field rules (the pydantic schema,
    :mod:`sactool.profile.schema`); raise RecordError naming the field."""
    from sactool.profile.schema import check_settings

    check_settings(p)
    return p


VLLM_HISPARSE_FIELDS = ("top_k", "device_buffer_size")
"""The ``hisparse`` fields a vLLM profile has (vLLM's hisparse_config has no ratio, CTA width or prefetch switch)."""


def settings_fields(engine: str = "sglang") -> list[str]:
    """Dotted names of every settings field of a profile for ``engine`` (``pool.*``, ``hisparse.*``,
    ``sglang.*`` or ``vllm.*``)."""
    out = [f"pool.{f.name}" for f in dataclasses.fields(PoolSettings)]
    if engine == "vllm":
        return out + [f"hisparse.{k}" for k in VLLM_HISPARSE_FIELDS] + [f"vllm.{f.name}" for f in
                                                                       dataclasses.fields(VllmSettings)]
    for sect, cls in (("hisparse", HiSparseSettings), ("sglang", SglangSettings)):
        out.extend(f"{sect}.{f.name}" for f in dataclasses.fields(cls))
    return out


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


def _upgrade_3_to_4(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 profiles were all SGLang's: ``engine: sglang`` (the ``vllm`` section came with 4)."""
    record.setdefault("engine", "sglang")
    return record


_UPGRADES: dict[int, Any] = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3, 3: _upgrade_3_to_4}  # schema n -> n+1 steps, applied in order



def from_data(data: dict[str, Any], *, source: str = "profile") -> Profile:
    """Build and validate a Profile from loaded YAML/JSON data: upgraded step by step, then
    checked as a whole (:mod:`sactool.profile.whole`: every field, the rules across fields, the
    sections, the provenance of every field set, finite numbers, argv values)."""
    data = upgrade(data, kind=KIND, current=SCHEMA_VERSION, steps=_UPGRADES, source=source)
    from sactool.profile import whole

    r = whole.read(data)
    model, pool, hisparse, sglang = r.sections()
    prof = Profile(model=model, pool=pool, hisparse=hisparse, sglang=sglang, machine=r.machine, request=r.request,
                   predictions=r.predictions, bench=r.bench, fleet=r.fleet, workload=r.workload,
                   engine=r.engine, vllm=r.vllm_section(),
                   provenance={str(k): v for k, v in r.provenance.items()}, schema_version=data["schema_version"],
                   sactool_version=r.sactool_version, created_at=r.created_at)
    whole.check_profile(prof)   # counts within what a machine holds
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


def default_profile_path(model_name: str, hostname: str | None = None,
                         sysfs_root: str | os.PathLike[str] | None = None) -> Path:
    """``profiles/<model>/<name>.yaml`` relative to the current directory (a checkout's git ignores
    ``profiles/`` but ``profiles/examples/``; docs/reference/files.md). ``<name>`` is ``hostname``
    when given; for a recording (``sysfs_root``) the hostname it recorded, else its directory's
    name — never this machine's; live, this machine's hostname. A name that is not one (the
    kernel's ``(none)`` of a host never named, empty) is ``localhost``; characters a file name
    should not carry become ``_`` (as a fleet's host names do, ``fleet.split.host_file_name``)."""
    if hostname is None and sysfs_root is not None:
        from sactool.host.sysfs import SysfsReader

        root = Path(sysfs_root)
        hostname = _host_name(SysfsReader(root).str("proc/sys/kernel/hostname")) or root.resolve().name
    elif hostname is None:
        import socket

        hostname = socket.gethostname()
    return Path("profiles") / model_name / f"{_host_name(hostname) or 'localhost'}.yaml"


def _host_name(name: str | None) -> str | None:
    """``name`` made a file name: None for no name (None, empty, the kernel's ``(none)``)."""
    if not name or name.strip() in ("(none)", "(unknown)"):
        return None
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", name.strip()).strip(".")
    return clean[:64] or None
