"""GPU compute per decode step: from measured step times, or a roofline from a small catalog.

*Measured* (preferred): decode step times of one rank with the KV in HBM (no pool reads), at a few
(requests per rank, context) points. The model uses ``base(context) + slope × (requests − 1)``:
``base`` is the straight line through the one-request points over context, ``slope`` the
least-squares per-request increment of the other points over their context's base. Both are
fitted to *compute measurements* only, never to the serving results being predicted; points
outside the measured range are extrapolated along those lines (said in the explain view).

*Roofline* (when nothing was measured): per rank and step, the larger of
``(weights / tp + requests × (top_k × record + context × index_key) × layers) / HBM bandwidth``
and ``2 × active parameters × requests / (peak dense BF16 FLOP/s)``. A lower bound: it leaves
out kernel launches, communication and scheduling, so measured steps are longer.
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.hisparse.gpus import GPUS   # the one GPU catalog: HBM size, bandwidth, FLOP/s
from sactool.units import format_bytes

# name -> (HBM bytes/s, dense BF16 FLOP/s, source), from the catalog
ROOFLINE: dict[str, tuple[float, float, str]] = {
    k: (g.hbm_bytes_per_s, g.bf16_flops, g.roofline_source) for k, g in GPUS.items() if g.bf16_flops}


@dataclass(frozen=True)
class ComputeModel:
    """Seconds of GPU work per decode step of one rank (all layers), without pool reads."""

    kind: str                      # "measured" | "roofline"
    detail: str
    _base: tuple[tuple[int, float], ...] = ()   # (context, seconds) at one request per rank
    _slope_s: float = 0.0
    _roof: tuple[float, ...] = ()

    def step_s(self, requests: int, context: int) -> float:
        if requests <= 0:
            return 0.0
        if self.kind == "measured":
            return max(0.0, _line(self._base, context)) + self._slope_s * (requests - 1)
        bw, flops, weights_per_gpu, per_req_bytes_fixed, idx_per_token, active = self._roof
        mem = (weights_per_gpu + requests * (per_req_bytes_fixed + context * idx_per_token)) / bw
        return max(mem, 2.0 * active * requests / flops)


def _line(points: tuple[tuple[int, float], ...], x: float) -> float:
    if len(points) == 1:
        return points[0][1]
    # piecewise linear inside, the end segments extended outside
    pts = sorted(points)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1 or (x1, y1) == pts[-1]:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]  # pragma: no cover


def measured_model(points) -> ComputeModel:
    """From ``StepPoint``s (requests_per_rank, context_tokens, step_time_s)."""
    ones: dict[int, list[float]] = {}
    for p in points:
        if p.requests_per_rank == 1:
            ones.setdefault(p.context_tokens, []).append(p.step_time_s)
    if not ones:
        # no one-request points: take the smallest batch as base
        b0 = min(p.requests_per_rank for p in points)
        for p in points:
            if p.requests_per_rank == b0:
                ones.setdefault(p.context_tokens, []).append(p.step_time_s)
    base = tuple(sorted((c, sum(v) / len(v)) for c, v in ones.items()))
    base_b = 1 if any(p.requests_per_rank == 1 for p in points) else min(p.requests_per_rank for p in points)
    num = den = 0.0
    for p in points:
        x = p.requests_per_rank - base_b
        if x > 0:
            num += x * (p.step_time_s - _line(base, p.context_tokens))
            den += x * x
    slope = num / den if den else 0.0
    detail = (f"measured: {len(points)} points; base {', '.join(f'{c // 1024}K {s * 1e3:.1f} ms' for c, s in base)}; "
              f"+{slope * 1e3:.2f} ms per extra request per rank")
    # shift base to one request if the smallest measured batch was larger
    base = tuple((c, s - slope * (base_b - 1)) for c, s in base)
    return ComputeModel("measured", detail, _base=base, _slope_s=slope)


def roofline_model(gpu: str, *, model_name: str, tp: int, layers: int, top_k: int,
                   record_bytes: int, index_key_bytes: int) -> ComputeModel:
    from sactool.errors import UsageError

    key = gpu.lower()
    if key not in ROOFLINE:
        raise UsageError(f"GPU {gpu!r} has no roofline figures; known: {', '.join(sorted(ROOFLINE))}",
                         "give measured decode step times (gpu.decode_step.measured) in a platform file")
    from sactool.models import active_params_of, checkpoint_of

    active = active_params_of(model_name)   # sactool/data/models/<name>.json: _sactool.active_params
    if active is None:
        raise UsageError(f"activated parameters of {model_name} are not known to sactool",
                         "give measured decode step times (gpu.decode_step.measured) in a platform file")
    checkpoint = checkpoint_of(model_name)
    if checkpoint is None:
        raise UsageError(f"checkpoint size of {model_name} is not known to sactool",
                         "give measured decode step times (gpu.decode_step.measured) in a platform file")
    bw, flops, src = ROOFLINE[key]
    weights = checkpoint[0] / tp
    per_req = top_k * record_bytes * layers
    idx = index_key_bytes * layers
    return ComputeModel("roofline", f"roofline lower bound ({src}; weights {format_bytes(weights)}/GPU)",
                        _roof=(bw, flops, weights, per_req, idx, active[0]))


def prefill_s(points: tuple[tuple[int, float], ...], context: int) -> float:
    """Prefill seconds of one request of ``context`` tokens (measured points, linear between)."""
    return max(0.0, _line(points, context))
