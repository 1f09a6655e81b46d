"""A profile validated as a whole, beyond each field's own rule (:func:`sactool.profile.validate`):

* the sections a profile consists of are there, and so is the provenance of every settings field
  the file sets to other than sactool's default — a file cut short (a full disk, a copy interrupted) loses its later sections and
  its provenance first, and must not pass as "valid profile … 0 provenance entries";
* every number anywhere in it is finite (``.nan`` and ``.inf`` load as YAML floats; a NaN in
  ``bench.*`` would reach the fetch cost unnoticed);
* counts are within what a machine can hold: ``sglang.max_running_requests`` no more than every
  rank's GPU can give a hot buffer (the largest GPU of :mod:`sactool.hisparse.gpus`), the host pool
  the profile asks of each rank (:func:`sactool.profile.sizing.host_sizing`) within the pool
  partition tune measured for it (``predictions.pool_partition_bytes_per_rank``) and, over all
  ranks, within 2^52 bytes — the largest physical address space of x86-64 (MAXPHYADDR ≤ 52, Intel
  SDM vol. 3A §4.1.4) and AArch64 (52-bit PA);
* values that become SGLang arguments cannot be read as flags (``model.hf_id:
  --enable-hierarchical-cache`` would turn the model path into a switch).

Every refusal is a :class:`~sactool.errors.RecordError` (exit 4) naming the field, like the rest
of profile validation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any, Mapping

from pydantic import BeforeValidator, ConfigDict, Field, PlainValidator, model_validator

from sactool.errors import RecordError
from sactool.profile.schema import ProvenanceMap, Settings, checked, fail

SECTIONS = ("model", "pool", "hisparse", "sglang", "provenance")
"""The sections without which a file is no SGLang profile (a vLLM profile has ``vllm`` for
``sglang``; the record's other blocks are optional)."""

SETTINGS_SECTIONS = ("pool", "hisparse", "sglang", "vllm")

MAX_PHYSICAL_BYTES = 1 << 52
"""The largest physical address space of x86-64 and AArch64 (52 bits): no machine holds more."""

ARGV_VALUES = ("model.hf_id", "sglang.dsa_decode_backend")
"""Profile strings passed to SGLang as the value after a flag (``--model-path``, ``--dsa-decode-backend``)."""

CUT_SHORT = ("is missing (is the file cut short?)", "re-create the profile with sactool tune")


def _err(name: str, msg: str, hint: str | None = None) -> RecordError:
    return RecordError(f"profile field {name}: {msg}", hint or "fix the field, or re-create the profile with sactool tune")


def _block(v: Any) -> dict[str, Any]:
    """``machine``, ``request``, ``predictions``: a mapping; null or left empty: ``{}``."""
    if not v:
        return {}
    if not isinstance(v, Mapping):
        fail("must be a mapping")
    return dict(v)


def _optional_block(v: Any) -> dict[str, Any] | None:
    """``bench``, ``workload``, ``fleet``: a mapping, or null (an empty one counts as null)."""
    if v is not None and not isinstance(v, Mapping):
        fail("must be a mapping or null")
    return dict(v) if v else None


Block = Annotated[dict[str, Any], PlainValidator(_block)]
OptionalBlock = Annotated[dict[str, Any] | None, PlainValidator(_optional_block)]


class Record(Settings):
    """A whole profile file (after :func:`sactool.records.upgrade`): :class:`Settings` and the
    record around it; no key the profile does not know."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Any = None
    schema_version: Any = None
    sactool_version: Annotated[str, BeforeValidator(str)] = ""
    created_at: Annotated[str, BeforeValidator(str)] = ""
    machine: Block = Field(default_factory=dict)
    request: Block = Field(default_factory=dict)
    predictions: Block = Field(default_factory=dict)
    bench: OptionalBlock = None
    workload: OptionalBlock = None
    fleet: OptionalBlock = None
    provenance: Annotated[ProvenanceMap, BeforeValidator(lambda v: {} if v is None else v)]   # required here

    @model_validator(mode="after")
    def _whole(self) -> Record:
        _covered(self)
        for name in ("machine", "request", "predictions", "bench", "workload", "fleet"):
            _finite(getattr(self, name), name)
        _argv_values(self)
        return self


def read(data: Mapping[str, Any]) -> Record:
    """The loaded (and upgraded) file checked as a whole; RecordError naming the first bad field."""
    return checked(Record, data, missing_section=CUT_SHORT)


def _covered(r: Record) -> None:
    """The provenance names every settings field the file sets to other than sactool's default."""
    if not r.provenance:
        fail("is empty: every settings field must say where its value came from (is the file cut short?)",
             at="provenance", hint="re-create the profile with sactool tune")
    _, q, h, s = r.sections()
    v = r.vllm_section()
    parts = [("pool", q, r.pool), ("hisparse", h, r.hisparse), ("sglang", s, r.sglang), ("vllm", v, r.vllm)]
    set_here = [f"{name}.{k}" for name, section, given in parts if given is not None
                for k in given.model_fields_set if not _is_default(getattr(section, k), _default(type(section), k))]
    missing = [f for f in set_here if f not in r.provenance]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        fail(f"is missing{more}: every settings field the profile sets says where its value came from "
             "(is the file cut short?)", at=f"provenance[{missing[0]!r}]",
             hint="re-create the profile with sactool tune, or add the entry (source: user)")


_NONE = object()


def _default(cls: type, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NONE


def _is_default(v: Any, default: Any) -> bool:
    return default is not _NONE and v == default and type(v) is type(default)


def _finite(v: Any, where: str) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        fail(f"must be a finite number, got {v}", at=where)
    if isinstance(v, Mapping):
        for k, x in v.items():
            _finite(x, f"{where}.{k}")
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _finite(x, f"{where}[{i}]")


def _argv_values(r: Record) -> None:
    """Values that become SGLang arguments cannot be read as flags, nor split into two."""
    m, _, _, s = r.sections()
    for name, v in zip(ARGV_VALUES, (m.hf_id, s.dsa_decode_backend)):
        if r.engine == "vllm" and name != "model.hf_id":
            continue
        if isinstance(v, str) and (v.startswith("-") or any(c.isspace() or not c.isprintable() for c in v)):
            fail(f"{v!r} would reach SGLang's command line as "
                 + ("a flag" if v.startswith("-") else "a value with spaces or control characters"), at=name,
                 hint="name a model path or Hugging Face id (e.g. deepseek-ai/DeepSeek-V3.2)"
                 if name == "model.hf_id" else "fix the field")


def check_profile(p: Any) -> None:
    """The rules that need the built profile: counts within what a machine holds."""
    _check_requests(p)
    _check_host_pool(p)


def _check_requests(p: Any) -> None:
    from sactool.hisparse.gpus import GPUS
    from sactool.hisparse.layout import record_bytes

    s, h, m = p.sglang, p.hisparse, p.model
    if p.engine == "vllm" or not s.max_running_requests:
        return
    per_request = h.device_buffer_size * m.num_layers * record_bytes(m.kv_lora_rank, m.qk_rope_head_dim,
                                                                     s.kv_cache_dtype)
    largest = max(GPUS.values(), key=lambda g: g.hbm_bytes)
    most = s.attn_dp_size * (largest.hbm_bytes // per_request)
    if s.max_running_requests > most:
        raise _err("sglang.max_running_requests",
                   f"{s.max_running_requests} is more than {s.attn_dp_size} rank(s) can hold: each running request "
                   f"needs a {h.device_buffer_size}-slot hot buffer ({per_request} B), and even a "
                   f"{largest.name}'s {largest.hbm_bytes} B holds {largest.hbm_bytes // per_request} per rank")


def _check_host_pool(p: Any) -> None:
    from sactool.profile.sizing import host_sizing
    from sactool.units import format_bytes

    if p.engine == "vllm" and p.vllm is not None:
        total = p.vllm.host_pool(p.model).allocated_bytes * p.world_size
        if total > MAX_PHYSICAL_BYTES:
            raise _err("vllm.host_pool_gib", f"{p.vllm.host_pool_gib} GiB over {p.world_size} pool(s) is "
                       f"{format_bytes(total)}, more than any machine can address ({format_bytes(MAX_PHYSICAL_BYTES)})")
        return
    size = host_sizing(p)
    if size.bytes_per_rank is None:
        return
    total = size.bytes_per_rank * p.world_size
    if total > MAX_PHYSICAL_BYTES:
        raise _err("hisparse.host_to_device_ratio",
                   f"{p.hisparse.host_to_device_ratio} asks {format_bytes(total)} of host pool over {p.world_size} "
                   f"rank(s) ({size.source}), more than any machine can address ({format_bytes(MAX_PHYSICAL_BYTES)})")
    part = (p.predictions or {}).get("pool_partition_bytes_per_rank")
    if isinstance(part, int) and not isinstance(part, bool) and 0 < part < size.bytes_per_rank:
        raise _err("hisparse.host_to_device_ratio",
                   f"{p.hisparse.host_to_device_ratio} asks {format_bytes(size.bytes_per_rank)} of host pool per rank "
                   f"({size.source}), more than the {format_bytes(part)} pool partition tune measured for each rank "
                   "(predictions.pool_partition_bytes_per_rank)",
                   "lower it, or re-run sactool tune on the machine with the larger pool")
