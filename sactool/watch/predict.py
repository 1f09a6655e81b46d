"""Predicted vs observed: the profile's hot-buffer hit rate and fetch bytes per generated token at its
buffer size (``predictions.per_context``, mean over the design contexts, as tune's objective
averages them) against what the engine counts, as ratios, with the workload tune assumed named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Comparison:
    """``miss_ratio`` = observed miss rate / predicted; ``bytes_ratio`` likewise for bytes per token."""

    workload: str
    device_buffer_size: int
    contexts: tuple[int, ...]
    predicted_hit_rate: float | None
    predicted_bytes_per_token: float | None
    observed_hit_rate: float | None
    observed_bytes_per_token: float | None
    miss_ratio: float | None
    bytes_ratio: float | None
    detail: str = ""

    def to_data(self) -> dict[str, Any]:
        return {"workload": self.workload, "device_buffer_size": self.device_buffer_size,
                "design_contexts": list(self.contexts), "predicted_hit_rate": self.predicted_hit_rate,
                "predicted_fetch_bytes_per_token": self.predicted_bytes_per_token,
                "observed_hit_rate": self.observed_hit_rate,
                "observed_host_to_device_bytes_per_token": self.observed_bytes_per_token,
                "miss_rate_observed_over_predicted": self.miss_ratio,
                "bytes_per_token_observed_over_predicted": self.bytes_ratio, "detail": self.detail}


def predicted(profile: Any) -> tuple[float | None, float | None, tuple[int, ...], str]:
    """(hit rate, fetch bytes per token, design contexts, workload name) from the profile's predictions."""
    pred = profile.predictions or {}
    rows = [r for r in pred.get("per_context") or [] if isinstance(r, dict) and r.get("fits")
            and isinstance(r.get("hit_rate"), (int, float))]
    wl = (getattr(profile, "workload", None) or {})
    name = str(wl.get("name") or wl.get("source") or "unknown") if isinstance(wl, dict) else "unknown"
    if not rows:
        return None, None, (), name
    hit = sum(float(r["hit_rate"]) for r in rows) / len(rows)
    byts = [float(r["fetch_bytes_per_token"]) for r in rows if isinstance(r.get("fetch_bytes_per_token"), (int, float))]
    return hit, (sum(byts) / len(byts) if byts else None), tuple(int(r["context_tokens"]) for r in rows), name


def compare(profile: Any, demand: Any | None) -> Comparison:
    """The profile's prediction against ``demand`` (:class:`sactool.watch.engine.Demand`, or None)."""
    hit, byts, ctxs, wl = predicted(profile)
    buf = profile.hisparse.device_buffer_size
    if hit is None:
        return Comparison(wl, buf, ctxs, None, None, None, None, None, None,
                          "the profile holds no predictions (written by hand, not by sactool tune)")
    oh = demand.hit_rate if demand is not None else None
    ob = demand.h2d_bytes_per_token if demand is not None else None
    miss_ratio = (1 - oh) / (1 - hit) if oh is not None and hit < 1 else None
    bytes_ratio = ob / byts if ob is not None and byts else None
    detail = "" if demand is not None and oh is not None else "no engine demand observed (see engine.detail)"
    return Comparison(wl, buf, ctxs, hit, byts, oh, ob, miss_ratio, bytes_ratio, detail)


__all__ = ["Comparison", "compare", "predicted"]
