"""The miss-volume validation view: the model's misses and SAC-DRAM step next to the authors' logs.

Nothing here is an input of the model; the tests check that the view computes what it says (the
implied misses reproduce the logs' gap through the model's own step function, the first-touch bound
follows the published unions, the logs' figures are the ones in the platform file) and that it
stays out of runs that do not compare SAC with DRAM.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sactool.cli import main
from sactool.simulate.api import _path
from sactool.simulate.misscheck import _scenario, gap_s, implied_misses, miss_check, step_s
from sactool.simulate.misses import constant_profile
from sactool.simulate.platform import load_platform
from sactool.workload.layers import first_touch_misses
from sactool.workload.params import DSV32_LOCALITY, DSV32_STEPS

PLATFORM = Path(__file__).resolve().parent.parent / "sactool" / "data" / "platforms" / "sac-paper.yaml"
L, R = 61, 1152   # DeepSeek-V3.2 layers, BF16 record bytes


def _pair(p, ctx=131072):
    sac = _scenario(p, "sac", _path(p, "sac", R), L, R, ctx, None)
    dram = _scenario(p, "dram", _path(p, "dram", R), L, R, ctx, None)
    return sac, dram


def test_implied_misses_reproduce_the_gap_they_were_asked_for():
    p = load_platform(PLATFORM)
    sac, dram = _pair(p)
    gaps = [gap_s(sac, dram, 8, m) for m in (0, 20, 40, 80, 160, 640)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]          # more misses never shrink the gap
    for m in (35.0, 120.0, 700.0):
        target = gap_s(sac, dram, 8, m)
        got = implied_misses(sac, dram, 8, target, p.top_k)
        assert got == pytest.approx(m, rel=1e-3)
    assert implied_misses(sac, dram, 8, -1.0, p.top_k) == 0.0                      # no miss already does it
    assert implied_misses(sac, dram, 8, gap_s(sac, dram, 8, p.top_k) + 1.0, p.top_k) is None


def test_bandwidth_bound_gap_follows_the_device_share():
    """At many misses the SAC step is bytes / (device bandwidth / ranks on the device): one device
    instead of two doubles that share's time (the mechanism the authors' p4 runs exercise)."""
    p = load_platform(PLATFORM)
    sac, _ = _pair(p)
    b, m = 8, 200.0
    per_rank = p.cxl_device_read_bytes_per_s / (p.attn_dp_size // p.cxl_devices)
    fixed = L * _path(p, "sac", R).fixed_s
    assert step_s(sac, b, m) == pytest.approx(fixed + L * b * m * R / per_rank, rel=1e-9)
    one = _scenario(p, "sac", dataclasses.replace(_path(p, "sac", R), devices=1), L, R, 131072, None)
    assert step_s(one, b, m) - step_s(sac, b, m) == pytest.approx(L * b * m * R / per_rank, rel=1e-9)


def test_first_touches_follow_the_published_mean_union():
    # (mean union x context - top_k) / steps, no layer below top_k at these contexts
    for ctx in (16384, 131072):
        union = DSV32_LOCALITY[ctx][0]
        assert first_touch_misses(ctx, 2048) == pytest.approx((union * ctx - 2048) / DSV32_STEPS, abs=0.15)
    assert first_touch_misses(131072, 2048) > first_touch_misses(16384, 2048)


def test_miss_check_reports_the_logs_figures_and_the_model_beside_them():
    p = load_platform(PLATFORM)
    logs = p.validation["step_gap"]
    chk = miss_check(p, contexts=(16384, 131072), layers=L, record_bytes=R,
                     paths={pl: _path(p, pl, R) for pl in ("sac", "dram")}, compute=None,
                     miss_fn=lambda ctx, buf: constant_profile(2048, 40.0, top_k=2048), layer_profile="deepseek-v3.2")
    assert chk["what"].startswith("validation (not an input)") and chk["requests_per_rank"] == 8
    assert "synthetic" in chk["prompt"]
    sac, dram = _pair(p)
    row = chk["per_context"][131072]
    assert row["logs_gap_s"] == logs["per_context_s"][131072] == 0.01123
    assert row["model_misses_per_layer"] == 40.0 and row["buffer_slots"] == 6144
    assert row["model_gap_s"] == pytest.approx(gap_s(sac, dram, 8, 40.0))
    assert gap_s(sac, dram, 8, row["implied_misses_per_layer"]) == pytest.approx(0.01123, rel=1e-3)
    assert row["logs_one_minus_two_devices_s"] == 0.00977 and row["model_one_minus_two_devices_s"] > 0
    assert row["first_touch_misses_per_layer"] == pytest.approx(first_touch_misses(131072, 2048))
    sweep = chk["by_requests_per_rank"]
    assert sweep["context_tokens"] == 131072 and sorted(sweep["rows"]) == [1, 2, 4, 6, 8, 10, 12]
    assert sweep["rows"][2]["implied_misses_per_layer"] == 0.0        # the logs' gap is negative there
    # a platform without the logs' gaps gets no view
    bare = dataclasses.replace(p, validation={})
    assert miss_check(bare, contexts=(16384,), layers=L, record_bytes=R,
                      paths={pl: _path(bare, pl, R) for pl in ("sac", "dram")}, compute=None,
                      miss_fn=lambda ctx, buf: constant_profile(1, 1.0), layer_profile=None) == {}


def test_cli_explain_shows_the_view_and_json_carries_it(capsys):
    quick = ["--context", "16k", "--concurrency", "8", "--output-tokens", "64", "--hotbuffer-steps", "32"]
    assert main(["simulate", "--platform", str(PLATFORM), *quick, "--placements", "sac,dram", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "validation, not an input" in out and "misses the logs' step needs" in out
    assert "fitted on the platform's calibration runs" in out and "never in the fit" in out
    assert main(["simulate", "--platform", str(PLATFORM), *quick, "--placements", "sac,dram", "-f", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["miss_check"]["per_context"]["16384"]["logs_gap_s"] == 0.00206
    # without local DRAM in the run there is no SAC/DRAM comparison to check
    assert main(["simulate", "--platform", str(PLATFORM), *quick, "--placements", "sac", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["miss_check"] == {}


def test_the_logs_gaps_are_never_an_input():
    """Doubling every logged gap changes the validation view and nothing the model predicts."""
    from sactool.simulate.api import SimulationOptions, simulate

    p = load_platform(PLATFORM)
    logs = p.validation["step_gap"]
    doubled = dict(logs, per_context_s={k: 2 * v for k, v in logs["per_context_s"].items()},
                   by_requests_per_rank_128k_s={k: 2 * v for k, v in logs["by_requests_per_rank_128k_s"].items()})
    q = dataclasses.replace(p, validation=dict(p.validation, step_gap=doubled))
    kw = dict(contexts=(16384,), concurrency=(8,), output_tokens=64, hotbuffer_steps=32,
              placements=("sac", "dram"))
    a, b = simulate(SimulationOptions(p, **kw)), simulate(SimulationOptions(q, **kw))
    assert a.points == b.points and a.ratios == b.ratios
    ra, rb = a.miss_check["per_context"][16384], b.miss_check["per_context"][16384]
    assert rb["logs_gap_s"] == 2 * ra["logs_gap_s"] and rb["model_gap_s"] == ra["model_gap_s"]
    assert rb["implied_misses_per_layer"] > ra["implied_misses_per_layer"]


def test_a_step_time_only_scenario_is_refused_by_a_run():
    # the view's scenarios carry no miss profile (only engine._step_time reads them): a run says so
    from sactool.simulate import engine
    from sactool.simulate.harness import HarnessInputs, run_harness

    sac, _ = _pair(load_platform(PLATFORM))
    with pytest.raises(ValueError, match="no miss profile"):
        engine.run(sac)
    with pytest.raises(ValueError, match="no miss profile"):
        run_harness(sac, HarnessInputs(0.0, 0.0))
