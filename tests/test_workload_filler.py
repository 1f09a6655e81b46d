"""The paper runs' filler workload: valid top-k rows, the mechanism it stands for, and its fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sactool.errors import UsageError
from sactool.hisparse.hotbuffer import simulate_many
from sactool.workload.filler import FillerParams, generate_filler

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = ROOT / "sactool" / "data" / "platforms" / "sac-paper.yaml"


def test_rows_are_valid_top_k_selections():
    ctx, steps, k = 4096, 40, 256
    idx = generate_filler(ctx, steps, 3, k, FillerParams(40, 900, 4.0, window_tokens=50), seed=1)
    assert idx.shape == (steps, 3, k)
    for s in range(steps):
        row = idx[s]
        assert all(len(set(r.tolist())) == k for r in row)
        assert row.min() >= 0 and row.max() < ctx + s and (row == ctx + s - 1).any(axis=1).all()
    # seeded: the same seed gives the same trace, another seed another one
    again = generate_filler(ctx, steps, 3, k, FillerParams(40, 900, 4.0, window_tokens=50), seed=1)
    other = generate_filler(ctx, steps, 3, k, FillerParams(40, 900, 4.0, window_tokens=50), seed=2)
    assert np.array_equal(idx, again) and not np.array_equal(idx, other)


def test_misses_fall_with_the_buffer_and_grow_with_the_pool():
    ctx, k = 16384, 2048

    def misses(pool, bufs=(4096, 6144)):
        idx = generate_filler(ctx, 1000, 2, k, FillerParams(300, pool, 4.0), seed=0)
        return [r.misses[500:].mean() for r in simulate_many(idx, list(bufs), context_tokens=ctx, mode="pd",
                                                           kernel="sac-fork")]

    small, large = misses(6000), misses(9000)
    assert small[0] > small[1] > 0 and large[0] > large[1]
    assert large[1] > small[1] and large[0] > small[0]
    # once warm, a buffer that holds the whole pool leaves only the newest token's miss
    assert misses(6000, (12288,))[0] < 3


def test_refused_shapes():
    with pytest.raises(UsageError, match="do not fit top_k"):
        generate_filler(16384, 4, 1, 2048, FillerParams(1800, 4000))
    with pytest.raises(UsageError, match="exceed the"):
        generate_filler(4096, 4, 1, 2048, FillerParams(300, 4000))


def test_stored_parameters_reproduce_the_calibrated_misses():
    from sactool.simulate import load_platform
    from sactool.simulate.fillerfit import profile

    p = load_platform(PLATFORM)
    assert p.topk_workload == "filler" and sorted(p.filler) == [16384, 32768, 65536, 131072]
    for ctx in (16384, 131072):
        for buf in (4096, 6144):
            prof = profile(p.filler, ctx, buf, p.top_k, kernel=p.hisparse_kernel)
            life = (sum(prof.per_step[1:]) + prof.steady * (1024 - len(prof.per_step))) / 1023
            assert life == pytest.approx(p.calibration.misses[(ctx, buf)], rel=0.04)
            assert len(prof.per_step) == 256 and prof.per_step[0] == 2047   # the cold fill (the newest token has its own slot)


def test_fit_from_scratch_lands_on_the_targets():
    from sactool.simulate.calibration import Calibration
    from sactool.simulate.fillerfit import fit, profile

    cal = Calibration(1e-7, {(16384, 4096): 40.0, (16384, 6144): 20.0}, {}, {}, 0.0, 0, 0)
    per = fit(cal, top_k=2048, kernel="sac-fork")
    for buf, want in ((4096, 40.0), (6144, 20.0)):
        assert profile(per, 16384, buf, 2048, kernel="sac-fork").hit_rate == pytest.approx(1 - want / 2048, abs=0.002)


def test_the_packaged_workload_is_what_the_platform_names():
    from sactool.simulate import load_platform
    from sactool.workload.filler import load_filler_workload, workload_names

    assert "filler-sac-runs" in workload_names()
    w = load_filler_workload("filler-sac-runs")
    assert load_platform(PLATFORM).filler == w.per_context and "calibration" in w.statistics
    with pytest.raises(UsageError, match="no packaged top-k workload"):
        load_filler_workload("nope")
