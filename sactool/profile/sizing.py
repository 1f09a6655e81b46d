"""How large the engine's host pool of one rank is, read from the profile: the argv the engine
receives (and, where the engine sizes at start-up, tune's own figure). The profile owns this
because its own validation checks it (:mod:`sactool.profile.whole`); where the pool goes and
whether it fits is :mod:`sactool.pool`.

Shared by the launcher (capacity checks, ``--dry-run``), the plug-ins and profile validation, so
all read the profile the same way. No torch, no numpy here. Record bytes come from
:mod:`sactool.hisparse.layout`, the pool formula from
:func:`sactool.hisparse.capacity.host_pool_bytes`.

Sources (docs/sources.md, SGLang, SGLang 0.5.23):
* §2.5: host bytes per rank = (S·R + page) × L × row_bytes, S = device token slots,
  R = ``host_to_device_ratio``, L = layers; the pool is private to each scheduler rank.
* §1.3: row bytes per token per layer (656 B FP8, 1152 B BF16): :mod:`sactool.hisparse.layout`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sactool.hisparse.capacity import host_pool_bytes
from sactool.hisparse.layout import record_bytes
from sactool.profile import Profile


def row_bytes(profile: Profile) -> int:
    """Bytes of one token's MLA latent KV in one layer, as the HiSparse host pool stores it."""
    m = profile.model
    return record_bytes(m.kv_lora_rank, m.qk_rope_head_dim, profile.sglang.kv_cache_dtype)


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
    """What SGLang will build per rank, from the argv it receives: S = ``--max-total-tokens``
    (``sglang.max_total_tokens``) and R = ``--hisparse-config``'s ``host_to_device_ratio``
    (``hisparse.host_to_device_ratio``). Without ``--max-total-tokens`` SGLang sizes S from the GPU's
    free memory at start-up, which no file here holds: then tune's own figure (``predictions``), else
    ``sglang.max_running_requests`` × ``hisparse.device_buffer_size``, else ``request.concurrency`` ×
    ``hisparse.device_buffer_size`` — each named in ``source``. A stored prediction that disagrees with
    the argv's figure is not used (an edited profile: the argv is what runs)."""
    h, s, m = profile.hisparse, profile.sglang, profile.model
    rb = row_bytes(profile)
    base = dict(host_to_device_ratio=h.host_to_device_ratio, page_size=s.page_size,
                num_layers=m.num_layers, row_bytes=rb)

    def sized(slots: int, source: str) -> HostSizing:
        total = host_pool_bytes(slots, h.host_to_device_ratio, layers=m.num_layers, record_bytes=rb, page=s.page_size)
        return HostSizing(slots, bytes_per_rank=total, source=source, **base)

    if s.max_total_tokens:
        return sized(s.max_total_tokens, f"the argv SGLang receives: --max-total-tokens {s.max_total_tokens} x "
                                         f"host_to_device_ratio {h.host_to_device_ratio} (--hisparse-config)")
    pred: dict[str, Any] = profile.predictions or {}
    for k in PREDICTION_BYTES_KEYS:
        v = pred.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return HostSizing(None, bytes_per_rank=v, source=f"predictions.{k} (no --max-total-tokens: SGLang sizes "
                              "its device slots at start-up)", **base)
    for k in PREDICTION_SLOT_KEYS:
        v = pred.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return sized(v, f"predictions.{k}")
    if s.max_running_requests:
        return sized(s.max_running_requests * h.device_buffer_size,
                     "sglang.max_running_requests x hisparse.device_buffer_size")
    conc = (profile.request or {}).get("concurrency")
    if isinstance(conc, int) and not isinstance(conc, bool) and conc > 0:
        return sized(conc * h.device_buffer_size, "request.concurrency x hisparse.device_buffer_size")
    return HostSizing(None, bytes_per_rank=None, source="unknown: the profile has no sglang.max_total_tokens, "
                      f"predictions.{PREDICTION_SLOT_KEYS[0]}, sglang.max_running_requests or request.concurrency",
                      **base)
