"""The HiSparse step's calibration: what it recovers, what it refuses, and that it never sees a held-out run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sactool.errors import RecordError
from sactool.simulate import load_platform
from sactool.simulate.calibration import CalibrationRun, _isotonic, fit

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = ROOT / "sactool" / "data" / "platforms" / "sac-paper.yaml"
L = 61


def _synthetic(c: float, misses: dict, base, share: dict[str, float]) -> tuple[CalibrationRun, ...]:
    """Runs made from known parameters with the model's own equation."""
    runs = []
    for (ctx, buf), m in misses.items():
        for b in (1, 2, 4, 6, 10, 12):
            for pl in ("dram", "sac"):
                y = base(b, ctx) + L * b * m * (c + share[pl])
                runs.append(CalibrationRun(pl, buf, ctx, b, y, f"synthetic/{pl}{buf}/{b}"))
    return tuple(runs)


def test_fit_recovers_known_parameters():
    share = {"dram": 1152 / 27.7e9, "sac": 1152 / 5.625e9}
    misses = {(16384, 4096): 60.0, (16384, 6144): 35.0, (131072, 4096): 150.0, (131072, 6144): 115.0}

    def base(b, ctx):
        return 0.030 + 0.002 * b + 1e-8 * ctx

    runs = _synthetic(90e-9, misses, base, share)
    cal = fit(runs, lambda pl, b, ctx: L * b * share[pl], L)
    assert cal.per_missed_record_s == pytest.approx(90e-9, rel=1e-3)
    for k, m in misses.items():
        assert cal.misses[k] == pytest.approx(m, rel=1e-3)
    assert cal.base_s(4, 16384) == pytest.approx(base(4, 16384), abs=1e-7)
    assert cal.rms_s < 1e-7
    # between calibrated batches: linear; above them: the slope of all batches (0.002 s here)
    assert cal.base_s(8, 16384) == pytest.approx(base(8, 16384), abs=1e-7)
    assert cal.base_s(16, 131072) == pytest.approx(base(16, 131072), abs=1e-6)
    # between contexts: linear in context
    assert cal.base_s(4, 65536) == pytest.approx(base(4, 65536), abs=1e-6)


def test_base_is_monotone_and_never_extrapolated_with_a_negative_slope():
    share = {"dram": 4e-8, "sac": 2e-7}
    steps = {1: 0.034, 2: 0.038, 4: 0.042, 6: 0.051, 10: 0.0606, 12: 0.0597}   # the 16K sweep's dip
    runs = tuple(CalibrationRun(pl, buf, 16384, b, y, "x") for b, y in steps.items()
                 for pl in ("dram", "sac") for buf in (4096, 6144))
    cal = fit(runs, lambda pl, b, ctx: L * b * share[pl], L)
    ys = [cal.base_s(b, 16384) for b in range(1, 30)]
    assert all(b >= a - 1e-12 for a, b in zip(ys, ys[1:]))
    assert _isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]


def test_fit_refuses_runs_of_one_placement():
    runs = tuple(CalibrationRun("dram", 6144, 16384, b, 0.03 + 0.001 * b, "x") for b in (1, 2, 4))
    with pytest.raises(RecordError, match="both placements"):
        fit(runs, lambda pl, b, ctx: 1e-5 * b, L)


def test_paper_platform_calibration_holds_no_validation_run():
    p = load_platform(PLATFORM)
    runs = p.calibration_runs
    assert len(runs) == 96
    # c = 64 (8 requests per rank), one CXL device, RDMA and c >= 128 are held out
    assert {r.requests_per_rank for r in runs} == {1, 2, 4, 6, 10, 12}
    assert {r.placement for r in runs} == {"dram", "sac"}
    assert all(r.run.startswith(("dc_0502/p2_", "dc_0417/p2_")) for r in runs)
    assert {r.device_buffer_size for r in runs} == {4096, 6144}
    assert any("p4" in h for h in p.calibration_held_out) and any("c = 64" in h for h in p.calibration_held_out)


def test_paper_platform_fit_and_its_use():
    from sactool.simulate.api import calibration_of
    from sactool.simulate.misses import calibrated_profile

    p = load_platform(PLATFORM)
    cal = calibration_of(p, 1152, L)
    # a per-record cost common to both placements, between 0 and the CXL share's own 205 ns
    assert 50e-9 < cal.per_missed_record_s < 400e-9
    # misses grow with context and fall with the buffer at every context
    for buf in (4096, 6144):
        ms = [cal.misses[(c, buf)] for c in (16384, 32768, 65536, 131072)]
        assert ms == sorted(ms) and ms[-1] > 2 * ms[0]
    assert all(cal.misses[(c, 4096)] > cal.misses[(c, 6144)] for c in (16384, 32768, 65536, 131072))
    assert cal.rms_s < 0.0015
    with pytest.raises(Exception, match="no calibrated misses for a 5120-slot"):
        calibrated_profile(cal, 16384, 5120, 2048)


def test_a_what_if_does_not_refit_the_calibration():
    p = load_platform(PLATFORM)
    q = load_platform(PLATFORM, ["cxl.devices=1", "cxl.device_read_bytes_per_s=11e9"])
    assert q.cxl_devices == 1 and q.calibration.to_data() == p.calibration.to_data()
    # refitting on the what-if would have moved the fitted misses
    from sactool.simulate.platform import from_data
    from sactool.records import load_structured
    from sactool.simulate.platform import apply_overrides

    refit = from_data(apply_overrides(load_structured(PLATFORM, what="platform file"), ["cxl.devices=1"])).calibration
    assert refit.misses[(131072, 6144)] != pytest.approx(p.calibration.misses[(131072, 6144)], rel=0.05)


def test_held_out_report_on_the_paper_platform():
    from sactool.simulate.heldout import markdown, report

    rep = report(load_platform(PLATFORM))
    ctxs = (16384, 32768, 65536, 131072)
    # the mechanisms the runs show, predicted on runs the fit never saw: a larger buffer helps both
    # placements, a second device helps more as context grows, SAC/DRAM falls with context
    assert all(rep["buffer_sac"][c][0] > 0.03 for c in ctxs)
    assert all(rep["buffer_dram"][c][0] > 0.01 for c in ctxs)
    dev = [rep["devices"][c][0] for c in ctxs]
    assert dev == sorted(dev) and dev[0] > 0
    sd = [rep["sac_vs_dram"][c][0] for c in ctxs]
    assert sd == sorted(sd, reverse=True)
    # the logs' side is read from the platform's validation.held_out (p4_02 / p4_05 at 16K)
    assert rep["buffer_sac"][16384][1] == pytest.approx(1103.5 / 1003.0 - 1)
    text = markdown(rep)
    assert "two CXL devices vs one" in text and "+3.6%" in text


def test_baselines_from_validation_families_are_named_in_every_run():
    from sactool.simulate.api import SimulationOptions, simulate

    p = load_platform(PLATFORM)
    assert "first_token.extend" in p.calibration_baselines and "rdma.fetch_fixed_s" in p.calibration_baselines
    res = simulate(SimulationOptions(p, contexts=(16384,), concurrency=(8,), output_tokens=32,
                                     placements=("sac", "dram")))
    assert any("validation run families" in n and "frontend.s_per_prompt_token" in n for n in res.notes)
    assert any("per-missed-record cost" in n and "held out" in n for n in res.notes)
