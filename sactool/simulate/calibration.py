"""The HiSparse step's free parameters, fitted on named calibration runs only.

The decode step of a rank that reads its KV through HiSparse is modelled as

    step(placement, b, ctx, buffer) = base(b, ctx) + b × m(ctx, buffer) × L × (c + record / share)

* ``base(b, ctx)``: everything that does not depend on the misses (GPU compute, the coordinator,
  the per-layer kernel launches, the eager backup) at ``b`` requests per rank;
* ``m(ctx, buffer)``: missed records per layer per request per step, averaged over a request's
  life (what a median inter-token gap of a run set holds), of the workload the runs decoded;
* ``c``: a cost per missed record that every placement pays (``per_missed_record_s``);
* ``record / share``: the bytes of one record over the rank's share of the path it reads
  (``engine._step_time`` with every rank at ``b``: the CXL device shared by ``rank % devices``,
  the PCIe link and switch uplink for DRAM).

The calibration runs (platform section ``calibration.runs``) measure this step for both
placements (DRAM, SAC on two CXL devices) at both hot-buffer sizes. Per context the model is
linear in ``base`` and ``m`` once ``c`` is given, so ``c`` is found by a one-dimensional search
(golden section on the summed squared error over all contexts) with the rest by least squares at
each trial. SAC − DRAM at one buffer identifies ``m`` (``c`` cancels); the same placement across
buffers identifies ``c``. The fit never sees a run outside ``calibration.runs``; the platform's
``calibration.held_out`` names the runs agreement is reported on.

``base`` is known at the calibrated batches only. Between them it is interpolated linearly after
a monotone (non-decreasing in ``b``) pool-adjacent-violators pass; above the largest calibrated
batch it continues with the least-squares slope over all calibrated batches of that context
(never negative) — not the slope of the last segment, which at the top of the sweeps is noise
(16K: 60.6 → 59.7 ms from 10 to 12 requests per rank). Contexts between calibrated ones are
linear in context; outside, the nearest calibrated context's value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

from sactool.errors import RecordError

C_MAX_S = 1e-6
"""Upper end of the search for the per-record cost (1 µs: ~5× the CXL share's own 205 ns)."""


@dataclass(frozen=True)
class CalibrationRun:
    placement: str            # dram | sac
    device_buffer_size: int
    context_tokens: int
    requests_per_rank: int
    step_time_s: float        # median inter-token gap of the run set (round2 tbt_p50_ms)
    run: str                  # family/run id, e.g. dc_0502/p2_01


@dataclass(frozen=True)
class Calibration:
    """The fitted parameters and how well they fit the calibration runs."""

    per_missed_record_s: float
    misses: dict[tuple[int, int], float]            # (context, buffer) -> misses per layer per request
    base: dict[int, tuple[tuple[int, float], ...]]  # context -> ((b, base step s), ...) monotone
    base_slope: dict[int, float]                    # context -> s per request per rank above the range
    rms_s: float                                    # residual over the calibration runs
    runs: int
    max_requests_per_rank: int
    source: str = ""

    def base_s(self, requests_per_rank: float, context: int) -> float:
        """The zero-miss step at a batch and context (rules in the module docstring)."""
        per = sorted((c, self._base_at(c, requests_per_rank)) for c in self.base)
        if context <= per[0][0]:
            return per[0][1]
        if context >= per[-1][0]:
            return per[-1][1]
        for (c0, y0), (c1, y1) in zip(per, per[1:]):
            if context <= c1:
                return y0 + (y1 - y0) * (context - c0) / (c1 - c0)
        return per[-1][1]  # pragma: no cover

    def _base_at(self, ctx: int, b: float) -> float:
        pts = self.base[ctx]
        if b <= pts[0][0]:
            return pts[0][1]
        if b >= pts[-1][0]:
            return pts[-1][1] + self.base_slope[ctx] * (b - pts[-1][0])
        for (b0, y0), (b1, y1) in zip(pts, pts[1:]):
            if b <= b1:
                return y0 + (y1 - y0) * (b - b0) / (b1 - b0)
        return pts[-1][1]  # pragma: no cover

    def misses_at(self, context: int, buffer: int) -> float | None:
        """Fitted misses at a calibrated buffer, linear in context between calibrated contexts."""
        per = sorted((c, m) for (c, b), m in self.misses.items() if b == buffer)
        if not per:
            return None
        if context <= per[0][0]:
            return per[0][1]
        if context >= per[-1][0]:
            return per[-1][1]
        for (c0, y0), (c1, y1) in zip(per, per[1:]):
            if context <= c1:
                return y0 + (y1 - y0) * (context - c0) / (c1 - c0)
        return per[-1][1]  # pragma: no cover

    def to_data(self) -> dict[str, Any]:
        return {
            "per_missed_record_s": self.per_missed_record_s,
            "misses_per_layer_per_request": {f"{c}/{b}": m for (c, b), m in sorted(self.misses.items())},
            "base_step_s": {str(c): {str(b): y for b, y in pts} for c, pts in sorted(self.base.items())},
            "base_slope_s_per_request": {str(c): s for c, s in sorted(self.base_slope.items())},
            "rms_s": self.rms_s, "runs": self.runs, "max_requests_per_rank": self.max_requests_per_rank,
            "source": self.source,
        }


def _isotonic(ys: list[float]) -> list[float]:
    """Pool-adjacent-violators: the non-decreasing sequence nearest ``ys`` in squared error."""
    blocks: list[list[float]] = []      # [sum, count]
    for y in ys:
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    out: list[float] = []
    for s, n in blocks:
        out += [s / n] * int(n)
    return out


def _lstsq(rows: list[list[float]], ys: list[float]):
    import numpy as np

    A = np.array(rows, dtype=float)
    y = np.array(ys, dtype=float)
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    r = y - A @ x
    return x, float(r @ r)


def fit(runs: tuple[CalibrationRun, ...], coeff: Callable[[str, int, int], float], layers: int, *,
        source: str = "") -> Calibration:
    """Fit ``c``, ``m`` and ``base`` (module docstring). ``coeff(placement, b, ctx)``: the step's
    seconds per missed record per layer per request from the bandwidth share alone (the engine's
    path model with every rank at ``b``), times ``layers × b``."""
    if not runs:
        raise RecordError("platform field calibration.runs is empty", "list the calibration runs (see sac-paper.yaml)")
    layers_b: dict[tuple[str, int, int], float] = {}
    ctxs = sorted({r.context_tokens for r in runs})

    def per_ctx(c: float, ctx: int):
        sel = [r for r in runs if r.context_tokens == ctx]
        bs = sorted({r.requests_per_rank for r in sel})
        bufs = sorted({r.device_buffer_size for r in sel})
        places = {r.placement for r in sel}
        if len(places) < 2:
            raise RecordError(f"calibration runs at {ctx} tokens need both placements (dram and sac)",
                              "add the other placement's runs to calibration.runs")
        rows, ys = [], []
        for r in sel:
            row = [0.0] * (len(bs) + len(bufs))
            row[bs.index(r.requests_per_rank)] = 1.0
            key = (r.placement, r.requests_per_rank, ctx)
            if key not in layers_b:
                layers_b[key] = coeff(r.placement, r.requests_per_rank, ctx)
            row[len(bs) + bufs.index(r.device_buffer_size)] = layers_b[key] + c * layers * r.requests_per_rank
            rows.append(row)
            ys.append(r.step_time_s)
        x, ss = _lstsq(rows, ys)
        return x, ss, bs, bufs

    def total(c: float) -> float:
        return sum(per_ctx(c, ctx)[1] for ctx in ctxs)

    lo, hi = 0.0, C_MAX_S
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = total(a), total(b)
    for _ in range(60):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = total(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = total(b)
    c = 0.5 * (lo + hi)
    if total(0.0) <= total(c):
        c = 0.0
    misses: dict[tuple[int, int], float] = {}
    base: dict[int, tuple[tuple[int, float], ...]] = {}
    slope: dict[int, float] = {}
    ss_all = 0.0
    for ctx in ctxs:
        x, ss, bs, bufs = per_ctx(c, ctx)
        ss_all += ss
        for i, buf in enumerate(bufs):
            misses[(ctx, buf)] = max(0.0, float(x[len(bs) + i]))
        ys = _isotonic([float(v) for v in x[:len(bs)]])
        base[ctx] = tuple(zip(bs, ys))
        n = len(bs)
        mb, my = sum(bs) / n, sum(ys) / n
        sxx = sum((q - mb) ** 2 for q in bs)
        slope[ctx] = max(0.0, sum((q - mb) * (y - my) for q, y in zip(bs, ys)) / sxx) if sxx else 0.0
    return Calibration(c, misses, base, slope, math.sqrt(ss_all / len(runs)), len(runs),
                       max(r.requests_per_rank for r in runs), source)


def calibrate(p, *, record_bytes: int, layers: int) -> Calibration | None:
    """The platform's calibration (None when it lists no calibration runs), using the engine's
    own path model for the bandwidth share so the fit and the simulation agree by construction."""
    if not p.calibration_runs:
        return None
    from sactool.simulate.engine import path_model as _path
    from sactool.simulate.misscheck import _scenario, step_s

    def coeff(placement: str, b: int, ctx: int) -> float:
        path = dataclasses.replace(_path(p, placement, record_bytes), fixed_s=0.0, common_s_per_record=0.0)
        sc = _scenario(p, placement, path, layers, record_bytes, ctx, None)
        return step_s(sc, b, 1.0) - step_s(sc, b, 0.0)

    return fit(p.calibration_runs, coeff, layers, source=p.calibration_source)
