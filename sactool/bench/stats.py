"""Centre and spread of repeated samples (pyperf/hyperfine style), pure Python.

Percentiles use linear interpolation between closest ranks (numpy's default "linear" method,
Hyndman & Fan type 7), so results match ``numpy.percentile``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Stats:
    """Summary of ``n`` samples in the result's unit."""

    median: float
    mean: float
    stdev: float
    min: float
    max: float
    p05: float
    p95: float
    n: int

    @property
    def rsd(self) -> float:
        """Relative standard deviation (stdev / mean); 0 for a single sample."""
        return self.stdev / self.mean if self.mean else 0.0


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Type-7 percentile of already sorted values, ``q`` in [0, 100]."""
    if not sorted_values:
        raise ValueError("no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(samples: Sequence[float]) -> Stats:
    """Median, mean, sample stdev (n-1), min, max, p05, p95, n. Raises ValueError when empty."""
    vals = sorted(float(v) for v in samples)
    n = len(vals)
    if n == 0:
        raise ValueError("no samples")
    if any(math.isnan(v) for v in vals):
        raise ValueError("NaN sample")
    mean = math.fsum(vals) / n
    var = math.fsum((v - mean) ** 2 for v in vals) / (n - 1) if n > 1 else 0.0
    return Stats(median=percentile(vals, 50), mean=mean, stdev=math.sqrt(var), min=vals[0], max=vals[-1],
                 p05=percentile(vals, 5), p95=percentile(vals, 95), n=n)


def stats_dict(s: Stats) -> dict:
    return {"median": s.median, "mean": s.mean, "stdev": s.stdev, "min": s.min, "max": s.max,
            "p05": s.p05, "p95": s.p95, "n": s.n}


def distinguishable(a: Stats, b: Stats) -> bool:
    """True when the p05–p95 ranges of two results do not overlap (a conservative test the
    tuner uses to say "not significant" instead of ranking noise)."""
    return a.p95 < b.p05 or b.p95 < a.p05
