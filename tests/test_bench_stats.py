"""Statistics of samples: checked against numpy on seeded/hypothesis-generated data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sactool.bench.stats import distinguishable, percentile, summarize

floats = st.floats(min_value=1e-3, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(floats, min_size=1, max_size=60))
def test_summary_matches_numpy(xs):
    s = summarize(xs)
    a = np.array(xs)
    assert s.n == len(xs)
    assert s.min == a.min() and s.max == a.max()
    assert math.isclose(s.mean, a.mean(), rel_tol=1e-9)
    assert math.isclose(s.median, np.median(a), rel_tol=1e-9)
    assert math.isclose(s.p05, np.percentile(a, 5), rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(s.p95, np.percentile(a, 95), rel_tol=1e-9, abs_tol=1e-9)
    sd = a.std(ddof=1) if len(xs) > 1 else 0.0
    assert math.isclose(s.stdev, sd, rel_tol=1e-6, abs_tol=1e-6 * max(1.0, abs(a.mean())))
    assert s.min <= s.p05 <= s.median <= s.p95 <= s.max


def test_seeded_known_values():
    rng = np.random.default_rng(3)
    xs = rng.normal(100, 5, 1000)
    s = summarize(xs)
    assert abs(s.mean - 100) < 1 and abs(s.stdev - 5) < 0.5 and abs(s.rsd - 0.05) < 0.006


def test_edges():
    s = summarize([4.0])
    assert (s.median, s.stdev, s.p05, s.p95, s.n) == (4.0, 0.0, 4.0, 4.0, 1)
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_distinguishable():
    a = summarize([10, 11, 10.5, 10.2])
    b = summarize([20, 21, 20.5])
    c = summarize([10.4, 10.9, 11.5])
    assert distinguishable(a, b) and not distinguishable(a, c)
