"""The profile's settings schema (pydantic v2): every field's type and range, and the rules that
tie fields together, each refusal a one-line :class:`~sactool.errors.RecordError` (exit 4) that
names the dotted field — the pattern of :mod:`sactool.simulate.platform`.

The public record types stay the frozen dataclasses of :mod:`sactool.profile` (tune builds them,
``dataclasses.replace`` edits them); the models here only check. A section model lists its
fields without defaults of its own: a field the file leaves out takes the dataclass's default,
so each default has one owner. Values are checked as given — nothing is coerced (``"4"`` is no
integer, ``1`` no boolean) — and sequences come back as tuples.

Imported on first validation, not with :mod:`sactool.profile`, so the plug-in's import set does
not carry pydantic until it reads a profile.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Callable, Mapping, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from sactool.errors import RecordError
from sactool.hisparse.engine import DSA_PAGE_SIZE_CUDA, SWAP_IN_BLOCK_RANGE
from sactool.hisparse.layout import KV_DTYPES
from sactool.profile import (ENGINES, ENTRYPOINTS, HUGEPAGES, PLACEMENTS, POLICIES, POOL_MODES, PROVENANCE_SOURCES,
                             RANK_ASSIGNMENTS, ROLES, VLLM_EXECUTORS, VLLM_HISPARSE_FIELDS, VLLM_KV_DTYPES,
                             HiSparseSettings, ModelRef, PoolSettings, Provenance, SglangSettings, VllmSettings,
                             version_spec)

DEFAULT_HINT = "fix the field, or re-create the profile with sactool tune"
NEWER_HINT = "remove it, or upgrade sactool if a newer one wrote it"


def fail(msg: str, *, at: str | None = None, hint: str | None = None, sub: str = "") -> NoReturn:
    """Refuse the value being checked: ``msg`` says why; ``at`` names the dotted field when it is
    not where pydantic stands (a rule over several fields); ``sub`` is appended to the field
    (``[3]``: the list item); ``hint`` replaces :data:`DEFAULT_HINT`."""
    raise PydanticCustomError("profile", "{msg}", {"msg": msg, "at": at, "hint": hint, "sub": sub})


def _where(loc: tuple[Any, ...]) -> str:
    """``("pool", "nodes", 1)`` → ``pool.nodes[1]``; a provenance entry is ``provenance['pool.mode']``."""
    if len(loc) >= 2 and loc[0] == "provenance":
        return f"provenance[{str(loc[1])!r}]"
    return "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".")


_MESSAGES = {"missing": "is missing", "extra_forbidden": "is not a known field",
             "model_type": "must be a mapping", "dict_type": "must be a mapping"}


def refusal(e: ValidationError, *, missing_section: tuple[str, str] | None = None) -> RecordError:
    """The first error of ``e`` as the project's one-line error (field, why, hint).
    ``missing_section``: (message, hint) for a whole section left out."""
    err = e.errors()[0]
    ctx = err.get("ctx") or {}
    name = (ctx.get("at") or _where(tuple(err["loc"])) or "(top level)") + (ctx.get("sub") or "")
    kind = err["type"]
    hint = ctx.get("hint") if kind == "profile" else None
    if kind == "profile":
        msg = ctx["msg"]
    elif kind == "missing" and len(err["loc"]) == 1 and missing_section:
        msg, hint = missing_section
    elif kind in ("model_type", "dict_type"):
        msg = f"must be a mapping, got {type(err.get('input')).__name__}"
    elif kind == "extra_forbidden":
        msg, hint = _MESSAGES[kind], NEWER_HINT
    else:
        msg = _MESSAGES.get(kind, err["msg"])
    return RecordError(f"profile field {name}: {msg}", hint or DEFAULT_HINT)


# ------------------------------------------------------------------------------------------
# field types: each checks the value as given and returns it (sequences as tuples)
# ------------------------------------------------------------------------------------------

def _int_check(lo: int | None = None, hi: int | None = None, *, optional: bool = False,
               sub: str = "") -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v is None and optional:
            return None
        if not isinstance(v, int) or isinstance(v, bool):
            fail(f"must be an integer, got {v!r}", sub=sub)
        if lo is not None and v < lo:
            fail(f"must be >= {lo}, got {v}", sub=sub)
        if hi is not None and v > hi:
            fail(f"must be <= {hi}, got {v}", sub=sub)
        return v
    return check


def _integer(lo: int | None = None, hi: int | None = None, *, optional: bool = False) -> PlainValidator:
    return PlainValidator(_int_check(lo, hi, optional=optional))


def _choice(choices: tuple[str, ...]) -> PlainValidator:
    def check(v: Any) -> str:
        if v not in choices:
            fail(f"must be one of {', '.join(choices)}; got {v!r}")
        return v
    return PlainValidator(check)


def _text(*, optional: bool = False) -> PlainValidator:
    def check(v: Any) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str) or not v:
            fail(f"must be a non-empty string, got {v!r}")
        return v
    return PlainValidator(check)


def _flag(v: Any) -> bool:
    if not isinstance(v, bool):
        fail(f"must be true or false, got {v!r}")
    return v


def _seq(item: Callable[[Any, str], Any]) -> PlainValidator:
    """A list (or tuple) whose items each pass ``item(value, "[i]")``; a tuple back."""
    def check(v: Any) -> tuple[Any, ...]:
        if not isinstance(v, (list, tuple)):
            fail(f"must be a list, got {v!r}")
        return tuple(item(x, f"[{i}]") for i, x in enumerate(v))
    return PlainValidator(check)


def _node(v: Any, sub: str) -> int:
    return _int_check(0, sub=sub)(v)


_DAX_RE = re.compile(r"^dax\d+\.\d+$")
_TARGET_RE = re.compile(r"^(node\d+|dax\d+\.\d+)$")


def _dax(v: Any, sub: str) -> str:
    if not isinstance(v, str) or not _DAX_RE.match(v):
        fail(f"must name a DAX device like dax0.0, got {v!r}", sub=sub)
    return v


def _target(v: Any, sub: str) -> str:
    if not isinstance(v, str) or not _TARGET_RE.match(v):
        fail(f"must be nodeN or daxX.Y, got {v!r}", sub=sub)
    return v


def _weights(v: Any) -> dict[int, int]:
    """``{node: weight}``: node numbers (YAML may spell the keys as strings) to weights 1..255."""
    if not isinstance(v, Mapping):
        fail("must be a mapping node -> weight")
    try:
        out = {int(k): w for k, w in v.items()}
    except (TypeError, ValueError):
        fail("keys must be node numbers")
    for k, w in out.items():
        if k < 0:
            fail(f"must be >= 0, got {k}", at="pool.interleave_weights key")
        _int_check(1, 255, sub=f"[{k}]")(w)
    return out


def _fraction(v: Any) -> float | None:
    if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1):
        fail(f"must be a number in (0, 1), got {v!r}")
    return v


def _cpus(v: Any) -> Any:
    if v != "auto":
        from sactool.host.sysfs import parse_cpulist

        try:
            if not parse_cpulist(str(v)):
                raise ValueError("empty")
        except ValueError:
            fail(f"must be 'auto' or a cpulist like 0-15, got {v!r}")
    return v


def _version_range(v: Any) -> str:
    try:
        version_spec(v)
    except RecordError as e:   # its own message and hint, the field named by the caller
        fail(e.message.split(": ", 1)[1], hint=e.hint)
    return v


def _provenance(v: Any) -> Provenance:
    if isinstance(v, Provenance):
        v = dataclasses.asdict(v)
    if not isinstance(v, Mapping) or "source" not in v:
        fail("must be a mapping with a 'source'")
    if v["source"] not in PROVENANCE_SOURCES:
        fail(f"source must be one of {', '.join(PROVENANCE_SOURCES)}")
    return Provenance(source=v["source"], detail=str(v.get("detail", "")))


Int1 = Annotated[int, _integer(1)]
Text = Annotated[str, _text()]
Flag = Annotated[bool, PlainValidator(_flag)]
Nodes = Annotated[tuple[int, ...], _seq(_node)]
ProvenanceMap = dict[Any, Annotated[Provenance, PlainValidator(_provenance)]]

_ABSENT: Any = Field(None)
"""A settings field the file may leave out: the dataclass's default applies (only the fields set
are passed on)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def given(self) -> dict[str, Any]:
        """The fields the data set, as checked."""
        return {k: getattr(self, k) for k in self.model_fields_set}


class _Model(_Section):
    name: Text
    hf_id: Text
    architecture: Text
    num_layers: Int1
    kv_lora_rank: Int1
    qk_rope_head_dim: Int1
    index_topk: Int1
    max_position_embeddings: Int1


class _Pool(_Section):
    placement: Annotated[str, _choice(PLACEMENTS)] = _ABSENT
    mode: Annotated[str, _choice(POOL_MODES)] = _ABSENT
    nodes: Nodes = _ABSENT
    dax_devices: Annotated[tuple[str, ...], _seq(_dax)] = _ABSENT
    rank_assignment: Annotated[str, _choice(RANK_ASSIGNMENTS)] = _ABSENT
    rank_targets: Annotated[tuple[str, ...], _seq(_target)] = _ABSENT
    policy: Annotated[str, _choice(POLICIES)] = _ABSENT
    interleave_weights: Annotated[dict[int, int], PlainValidator(_weights)] = _ABSENT
    hugepages: Annotated[str, _choice(HUGEPAGES)] = _ABSENT
    prefault_threads: Annotated[int, _integer(1, 1024)] = _ABSENT
    prefault_cpus: Annotated[Any, PlainValidator(_cpus)] = _ABSENT
    register_chunk_gb: Annotated[int | None, _integer(1, optional=True)] = _ABSENT
    strict: Flag = _ABSENT
    stand_in: Flag = _ABSENT
    gpu_local_nodes: Nodes = _ABSENT
    capacity_bytes: Annotated[int | None, _integer(1, optional=True)] = _ABSENT


class _HiSparse(_Section):
    top_k: Int1 = _ABSENT
    device_buffer_size: Int1 = _ABSENT
    host_to_device_ratio: Int1 = _ABSENT
    swap_in_block_size: Annotated[int, _integer(*SWAP_IN_BLOCK_RANGE)] = _ABSENT
    prefetch: Flag = _ABSENT


class _Sglang(_Section):
    tested: Annotated[str, PlainValidator(_version_range)] = _ABSENT
    entrypoint: Annotated[str, _choice(ENTRYPOINTS)] = _ABSENT
    role: Annotated[str, _choice(ROLES)] = _ABSENT
    tp_size: Int1 = _ABSENT
    attn_dp_size: Int1 = _ABSENT
    kv_cache_dtype: Annotated[str, _choice(KV_DTYPES)] = _ABSENT
    page_size: Int1 = _ABSENT
    mem_fraction_static: Annotated[float | None, PlainValidator(_fraction)] = _ABSENT
    max_running_requests: Annotated[int | None, _integer(1, optional=True)] = _ABSENT
    context_length: Annotated[int | None, _integer(1, optional=True)] = _ABSENT
    dsa_decode_backend: Annotated[str | None, _text(optional=True)] = _ABSENT
    base_gpu_id: Annotated[int, _integer(0)] = _ABSENT
    max_total_tokens: Annotated[int | None, _integer(1, optional=True)] = _ABSENT


def _gib(v: Any) -> float:
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 2 ** 22):
        fail(f"must be a number of GiB above 0, got {v!r}")
    return v


def _executor(v: Any) -> str | None:
    if v is not None and v not in VLLM_EXECUTORS:
        fail(f"must be one of {', '.join(VLLM_EXECUTORS)} or null; got {v!r}")
    return v


class _Vllm(_Section):
    tested: Annotated[str, PlainValidator(_version_range)] = _ABSENT
    tp_size: Int1 = _ABSENT
    dp_size: Int1 = _ABSENT
    enable_expert_parallel: Flag = _ABSENT
    kv_cache_dtype: Annotated[str, _choice(VLLM_KV_DTYPES)] = _ABSENT
    block_size: Int1 = _ABSENT
    max_model_len: Annotated[int | None, _integer(1, optional=True)] = _ABSENT
    max_num_seqs: Annotated[int | None, _integer(1, optional=True)] = _ABSENT
    gpu_memory_utilization: Annotated[float | None, PlainValidator(_fraction)] = _ABSENT
    host_pool_gib: Annotated[float, PlainValidator(_gib)] = _ABSENT
    shared_host_pool: Flag = _ABSENT
    distributed_executor_backend: Annotated[str | None, PlainValidator(_executor)] = _ABSENT
    eager_host_mirror: Flag = _ABSENT


class Settings(BaseModel):
    """The settings sections and the provenance, with the rules across them: ``sglang`` for an
    SGLang profile, ``vllm`` (and of ``hisparse`` only top_k and device_buffer_size) for a vLLM one."""

    model_config = ConfigDict(frozen=True)

    engine: Annotated[str, _choice(ENGINES)] = "sglang"
    model: _Model
    pool: _Pool
    hisparse: _HiSparse
    sglang: _Sglang | None = None
    vllm: _Vllm | None = None
    provenance: ProvenanceMap = Field(default_factory=dict)

    def sections(self) -> tuple[ModelRef, PoolSettings, HiSparseSettings, SglangSettings]:
        """The sections as the profile's dataclasses (defaults for what the data left out; a vLLM
        profile's ``sglang`` is the default, unused)."""
        return (ModelRef(**self.model.given()), PoolSettings(**self.pool.given()),
                HiSparseSettings(**self.hisparse.given()),
                SglangSettings(**(self.sglang.given() if self.sglang is not None else {})))

    def vllm_section(self) -> VllmSettings | None:
        return VllmSettings(**self.vllm.given()) if self.vllm is not None else None

    @model_validator(mode="after")
    def _across(self) -> Settings:
        cut = "is missing (is the file cut short?)"
        if self.engine == "sglang":
            if self.sglang is None:
                fail(cut, at="sglang", hint="re-create the profile with sactool tune")
            if self.vllm is not None:
                fail("is a vLLM section in a profile for SGLang (engine: sglang)", at="vllm",
                     hint="remove it, or set engine: vllm")
        else:
            if self.vllm is None:
                fail(cut, at="vllm", hint="re-create the profile with sactool tune --engine vllm")
            if self.sglang is not None:
                fail("is an SGLang section in a profile for vLLM (engine: vllm)", at="sglang",
                     hint="remove it, or set engine: sglang")
            extra = sorted(set(self.hisparse.model_fields_set) - set(VLLM_HISPARSE_FIELDS))
            if extra:
                fail(f"is SGLang's; vLLM's HiSparse has no such setting (of hisparse it reads "
                     f"{', '.join(VLLM_HISPARSE_FIELDS)})", at=f"hisparse.{extra[0]}", hint="remove it")
        across(*self.sections(), v=self.vllm_section())
        return self


def across(m: ModelRef, q: PoolSettings, h: HiSparseSettings, s: SglangSettings, v: VllmSettings | None = None) -> None:
    """The rules between fields (each field already has its own type and range); ``v``: a vLLM profile."""
    if h.top_k != m.index_topk:
        fail(f"{h.top_k} differs from the model's index_topk {m.index_topk} "
             "(the engine overrides top_k with index_topk)", at="hisparse.top_k")
    if h.device_buffer_size < h.top_k:
        fail(f"must be >= {h.top_k}, got {h.device_buffer_size}", at="hisparse.device_buffer_size")
    if v is not None:
        _across_vllm(m, q, h, v)
        return
    if s.tp_size % s.attn_dp_size:
        fail(f"{s.attn_dp_size} must divide tp_size {s.tp_size}", at="sglang.attn_dp_size")
    if s.page_size != DSA_PAGE_SIZE_CUDA:
        fail(f"DSA on CUDA forces page size {DSA_PAGE_SIZE_CUDA}, got {s.page_size}", at="sglang.page_size")
    if s.context_length is not None and s.context_length > m.max_position_embeddings:
        fail(f"must be <= {m.max_position_embeddings}, got {s.context_length}", at="sglang.context_length")
    if s.max_total_tokens is not None and s.max_total_tokens < h.device_buffer_size:
        fail(f"{s.max_total_tokens} is smaller than one request's hot buffer "
             f"(device_buffer_size {h.device_buffer_size})", at="sglang.max_total_tokens")
    if q.placement != "none":
        if q.mode == "numa" and not q.nodes:
            fail("is empty: name the NUMA node(s) that hold the pool", at="pool.nodes")
        if q.mode == "devdax" and not q.dax_devices:
            fail("is empty while pool.mode is devdax", at="pool.dax_devices")
        if q.mode == "devdax" and q.placement == "numactl":
            fail("numactl cannot place memory on a devdax device; use plugin", at="pool.placement")
    if q.rank_targets:
        if len(q.rank_targets) != s.tp_size:
            fail(f"has {len(q.rank_targets)} entries for {s.tp_size} ranks (tp_size)", at="pool.rank_targets")
        allowed = {f"node{n}" for n in q.nodes} if q.mode == "numa" else set(q.dax_devices)
        for i, t in enumerate(q.rank_targets):
            if t not in allowed:
                fail(f"{t} is not among the pool's targets {sorted(allowed)}", at=f"pool.rank_targets[{i}]")
    if q.policy == "weighted_interleave" and not q.interleave_weights:
        fail("is empty while pool.policy is weighted_interleave", at="pool.interleave_weights")
    if q.rank_assignment == "locality" and not q.rank_targets and not q.gpu_local_nodes and q.placement != "none":
        fail("locality needs each rank's GPU node in pool.gpu_local_nodes", at="pool.rank_assignment",
             hint="set pool.gpu_local_nodes, or use round_robin")
    if q.gpu_local_nodes and len(q.gpu_local_nodes) != s.tp_size:
        fail(f"has {len(q.gpu_local_nodes)} entries for {s.tp_size} ranks", at="pool.gpu_local_nodes")


def _across_vllm(m: ModelRef, q: PoolSettings, h: HiSparseSettings, v: VllmSettings) -> None:
    """vLLM 0.34's own refusals (:mod:`sactool.hisparse.vllm`), and the pool rules over its pool owners."""
    from sactool.hisparse.vllm import REFUSED_ARCHITECTURES, device_buffer_problem, uses_shared_pool

    if m.architecture in REFUSED_ARCHITECTURES:
        fail(REFUSED_ARCHITECTURES[m.architecture], at="model.architecture", hint="serve this model with SGLang")
    why = device_buffer_problem(h.device_buffer_size, h.top_k)
    if why:
        fail(why, at="hisparse.device_buffer_size")
    if v.max_model_len is not None and v.max_model_len > m.max_position_embeddings:
        fail(f"must be <= {m.max_position_embeddings}, got {v.max_model_len}", at="vllm.max_model_len")
    shared = uses_shared_pool(v.tp_size, executor=v.distributed_executor_backend or "mp")
    if v.shared_host_pool and not shared:
        fail(f"vLLM shares the host pool only with tp_size > 1 and the mp executor (tp_size {v.tp_size}, "
             f"executor {v.distributed_executor_backend})", at="vllm.shared_host_pool")
    if not v.shared_host_pool and shared and v.distributed_executor_backend == "mp":
        fail("is false, but vLLM shares the pool of tp_size > 1 with the mp executor", at="vllm.shared_host_pool")
    pool = v.host_pool(m)
    if v.max_model_len is not None and pool.problem(v.max_model_len):
        fail(pool.problem(v.max_model_len), at="vllm.host_pool_gib")
    owners = v.pool_owners
    if q.placement != "none":
        if q.mode == "numa" and not q.nodes:
            fail("is empty: name the NUMA node(s) that hold the pool", at="pool.nodes")
        if q.mode == "devdax" and not q.dax_devices:
            fail("is empty while pool.mode is devdax", at="pool.dax_devices")
        if q.placement == "numactl":
            fail("numactl is for SGLang's pools; vLLM's pool is placed by the plug-in (or left with none)",
                 at="pool.placement")
    if q.rank_targets:
        if len(q.rank_targets) != owners:
            fail(f"has {len(q.rank_targets)} entries for {owners} pool(s) "
                 f"({'one per DP replica' if v.shared_host_pool else 'one per rank'})", at="pool.rank_targets")
        allowed = {f"node{n}" for n in q.nodes} if q.mode == "numa" else set(q.dax_devices)
        for i, t in enumerate(q.rank_targets):
            if t not in allowed:
                fail(f"{t} is not among the pool's targets {sorted(allowed)}", at=f"pool.rank_targets[{i}]")
    if q.policy == "weighted_interleave" and not q.interleave_weights:
        fail("is empty while pool.policy is weighted_interleave", at="pool.interleave_weights")
    if q.gpu_local_nodes and len(q.gpu_local_nodes) != v.gpus:
        fail(f"has {len(q.gpu_local_nodes)} entries for {v.gpus} GPUs", at="pool.gpu_local_nodes")


M = TypeVar("M", bound=BaseModel)


def checked(model: type[M], data: Any, **kw: Any) -> M:
    """``data`` validated by ``model``; the first error as a RecordError (:func:`refusal`)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise refusal(e, **kw) from None


def check_settings(p: Any) -> None:
    """Validate a built :class:`~sactool.profile.Profile`'s settings and provenance (RecordError)."""
    data: dict[str, Any] = {name: dataclasses.asdict(getattr(p, name)) for name in ("model", "pool", "hisparse")}
    data["engine"] = p.engine
    if p.engine == "vllm":
        data["hisparse"] = {k: data["hisparse"][k] for k in VLLM_HISPARSE_FIELDS}
        data["vllm"] = dataclasses.asdict(p.vllm) if p.vllm is not None else None
    else:
        data["sglang"] = dataclasses.asdict(p.sglang)
    checked(Settings, dict(data, provenance=p.provenance))
