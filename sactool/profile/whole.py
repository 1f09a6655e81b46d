"""A profile validated as a whole, beyond each field's own rule (:func:`sactool.profile.validate`):

* the sections a profile consists of are there, and so is the provenance of every settings field
  the file sets to other than sactool's default — a file cut short (a full disk, a copy interrupted) loses its later sections and
  its provenance first, and must not pass as "valid profile … 0 provenance entries";
* every number anywhere in it is finite (``.nan`` and ``.inf`` load as YAML floats; a NaN in
  ``bench.*`` would reach the fetch cost unnoticed);
* counts are within what a machine can hold: ``sglang.max_running_requests`` no more than every
  rank's GPU can give a hot buffer (the largest GPU of :mod:`sactool.hisparse.gpus`), the host pool
  the profile asks of each rank (:func:`sactool.profile.hostpool.host_sizing`) within the pool
  partition tune measured for it (``predictions.pool_partition_bytes_per_rank``) and, over all
  ranks, within 2^52 bytes — the largest physical address space of x86-64 (MAXPHYADDR ≤ 52, Intel
  SDM vol. 3A §4.1.4) and AArch64 (52-bit PA);
* values that become SGLang arguments cannot be read as flags (``model.hf_id:
  --enable-hierarchical-cache`` would turn the model path into a switch).

Every refusal is a :class:`~sactool.errors.RecordError` (exit 4) naming the field, like the rest
of profile validation.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from sactool.errors import RecordError

SECTIONS = ("model", "pool", "hisparse", "sglang", "provenance")
"""The sections without which a file is no profile (the record's other blocks are optional)."""

SETTINGS_SECTIONS = ("pool", "hisparse", "sglang")

MAX_PHYSICAL_BYTES = 1 << 52
"""The largest physical address space of x86-64 and AArch64 (52 bits): no machine holds more."""

ARGV_VALUES = ("model.hf_id", "sglang.dsa_decode_backend")
"""Profile strings passed to SGLang as the value after a flag (``--model-path``, ``--dsa-decode-backend``)."""


def _err(name: str, msg: str, hint: str | None = None) -> RecordError:
    return RecordError(f"profile field {name}: {msg}", hint or "fix the field, or re-create the profile with sactool tune")


def check_data(data: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """The rules that read the file as loaded: sections, provenance coverage, finite numbers.
    ``defaults``: each settings field's default (``pool.hugepages`` → ``"thp"``); a field the file
    leaves at it needs no provenance (sactool writes every field, older profiles name fewer)."""
    for sect in SECTIONS:
        if sect not in data:
            raise _err(sect, "is missing (is the file cut short?)", "re-create the profile with sactool tune")
    prov = data.get("provenance")
    if not isinstance(prov, Mapping) or not prov:
        raise _err("provenance", "is empty: every settings field must say where its value came from "
                   "(is the file cut short?)", "re-create the profile with sactool tune")
    set_here = [f"{sect}.{k}" for sect in SETTINGS_SECTIONS if isinstance(data.get(sect), Mapping)
                for k, v in data[sect].items() if not _is_default(v, defaults.get(f"{sect}.{k}", _NONE))]
    missing = [f for f in set_here if f not in prov]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise _err(f"provenance[{missing[0]!r}]", f"is missing{more}: every settings field the profile sets says "
                   "where its value came from (is the file cut short?)",
                   "re-create the profile with sactool tune, or add the entry (source: user)")
    _finite(data, "")


_NONE = object()


def _is_default(v: Any, default: Any) -> bool:
    if isinstance(v, list):
        v = tuple(v)
    return default is not _NONE and v == default and type(v) is type(default)


def _finite(v: Any, where: str) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        raise _err(where or "(top level)", f"must be a finite number, got {v}")
    if isinstance(v, Mapping):
        for k, x in v.items():
            _finite(x, f"{where}.{k}" if where else str(k))
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _finite(x, f"{where}[{i}]")


def check_profile(p: Any) -> None:
    """The rules that need the built profile: argv values, counts within what a machine holds."""
    for name in ARGV_VALUES:
        sect, field = name.split(".")
        v = getattr(getattr(p, sect), field)
        if isinstance(v, str) and (v.startswith("-") or any(c.isspace() or not c.isprintable() for c in v)):
            raise _err(name, f"{v!r} would reach SGLang's command line as "
                       + ("a flag" if v.startswith("-") else "a value with spaces or control characters"),
                       "name a model path or Hugging Face id (e.g. deepseek-ai/DeepSeek-V3.2)"
                       if name == "model.hf_id" else "fix the field")
    _check_requests(p)
    _check_host_pool(p)


def _check_requests(p: Any) -> None:
    from sactool.hisparse.gpus import GPUS
    from sactool.hisparse.layout import record_bytes

    s, h, m = p.sglang, p.hisparse, p.model
    if not s.max_running_requests:
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
    from sactool.profile.hostpool import host_sizing
    from sactool.units import format_bytes

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
