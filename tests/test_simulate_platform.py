"""The shipped SAC-paper platform: it loads, every section is sourced, and the model's outputs on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sactool.errors import RecordError, UsageError
from sactool.simulate.api import SimulationOptions, simulate
from sactool.simulate.platform import from_data, load_platform

PLATFORM = Path(__file__).resolve().parent.parent / "sactool" / "data" / "platforms" / "sac-paper.yaml"


def _data():
    return yaml.safe_load(PLATFORM.read_text())


def test_shipped_platform_loads_with_cited_figures():
    p = load_platform(PLATFORM)
    assert (p.model, p.kv_dtype, p.gpus, p.attn_dp_size, p.top_k) == ("deepseek-v3.2", "bfloat16", 8, 8, 2048)
    assert (p.device_buffer_size, p.rdma_device_buffer_size, p.output_tokens) == (6144, 4096, 1024)
    assert p.contexts == (16384, 32768, 65536, 131072) and p.concurrency == (64,)
    assert p.nic_bytes_per_s == 12.5e9 and p.nics == 2
    # the micro-benchmark anchors
    pts = {q.records: q.latency_s for q in p.gather_cxl.points}
    assert pts[64] == pytest.approx(11.9e-6) and pts[2048] == pytest.approx(85.6e-6)
    pts = {q.records: q.latency_s for q in p.gather_dram.points}
    assert pts[64] == pytest.approx(11.1e-6) and pts[2048] == pytest.approx(49.7e-6)
    # every numeric line of the file carries a source tag or sits in a block that names one
    text = PLATFORM.read_text()
    for tag in ("[PAPER]", "[REPO]", "[BELUGA]"):
        assert tag in text
    assert set(p.sources) >= {"PAPER", "REPO", "BELUGA"}
    assert p.validation["sac_vs_rdma_throughput"] == 2.1
    # the swap-in kernel of the authors' runs (their fork's LRU write-back), not 0.5.23's
    assert p.hisparse_kernel == "sac-fork"


@pytest.mark.parametrize("path, value, field", [
    ("nic.bandwidth_bytes_per_s", 0, "nic.bandwidth_bytes_per_s"),
    ("cxl.device_read_bytes_per_s", -5, "cxl.device_read_bytes_per_s"),
    ("dram.write_bytes_per_s", ".nan", "dram.write_bytes_per_s"),
    ("nic.per_message_s", "fast", "nic.per_message_s"),
    ("pcie.gpu_link_bytes_per_s", None, "pcie.gpu_link_bytes_per_s"),
    ("serving.attn_dp_size", 3, "serving.attn_dp_size"),
    ("serving.top_k", 1024, "serving.top_k"),
    ("serving.device_buffer_size", 1000, "serving.device_buffer_size"),
    ("workload.contexts", ["200k"], "workload.contexts"),
    ("model.kv_dtype", "int4", "model.kv_dtype"),
    ("workload.case", "warm", "workload.case"),
    ("serving.hisparse_kernel", "v9", "serving.hisparse_kernel"),
])
def test_bad_fields_are_named(path, value, field):
    d = _data()
    sect, key = path.split(".")
    if value is None:
        del d[sect][key]
    else:
        d[sect][key] = value
    with pytest.raises(RecordError) as e:
        from_data(d)
    assert field in e.value.message and e.value.hint


def test_missing_gather_point_field_names_it():
    d = _data()
    del d["gather"]["cxl"]["points"][1]["latency_s"]
    with pytest.raises(RecordError, match=r"gather.cxl.points\[1\].latency_s"):
        from_data(d)


def test_overrides_and_bad_overrides():
    p = load_platform(PLATFORM, ["nic.count=1", "rdma.layout_conversion_bytes_per_s=2e9"])
    assert p.nics == 1 and p.rdma_conversion_bytes_per_s == 2e9
    with pytest.raises(UsageError, match="no such platform field"):
        load_platform(PLATFORM, ["nic.speed=1"])
    with pytest.raises(UsageError):
        load_platform(PLATFORM, ["nic.count"])


def test_context_beyond_model_max_is_refused():
    p = load_platform(PLATFORM)
    with pytest.raises(UsageError, match="max_position_embeddings"):
        simulate(SimulationOptions(p, contexts=(163840,)))


def test_outputs_on_the_shipped_platform():
    """Run the real pipeline (workload model + LRU) on the paper platform and check its shape."""
    res = simulate(SimulationOptions(load_platform(PLATFORM), hotbuffer_steps=64))
    mean = [r for r in res.ratios if r.context_tokens is None][0]
    per = {r.context_tokens: r for r in res.ratios if r.context_tokens}
    # SAC beats the RDMA pool on all three metrics, more so at longer contexts (more prefix to move)
    assert mean.sac_vs_rdma_throughput > 1 and mean.rdma_vs_sac_ttft > 1 and mean.rdma_vs_sac_tbt > 1
    assert per[131072].rdma_vs_sac_ttft > per[16384].rdma_vs_sac_ttft
    assert per[131072].sac_vs_rdma_throughput > per[16384].sac_vs_rdma_throughput
    # ... and stays below local DRAM (the upper bound), within the paper's neighbourhood
    assert 0.8 < mean.sac_vs_dram_throughput < 1.0
    for ctx in (16384, 131072):
        s, r, d = (res.point(x, ctx, 64) for x in ("sac", "rdma", "dram"))
        # RDMA holds a fetched copy per request; DRAM (one shared prompt) the prefix once per rank
        # plus each request's 1024 own tokens
        assert s.local_memory_bytes == 0 and r.local_memory_bytes == 64 * ctx * 61 * 1152
        assert d.local_memory_bytes == 8 * ctx * 61 * 1152 + 64 * 1024 * 61 * 1152
        assert s.fits and r.fits and d.fits and not (s.capped or r.capped or d.capped)
        assert r.breakdown["nic_bytes_per_request"] == pytest.approx(ctx * 61 * 1152)
        assert s.ttft_p99_s >= s.ttft_mean_s and 0.9 < s.hit_rate < 1.0
    # the runs' 2 x 256 GiB pool, 68.7 GB per rank: one 128K prefix (9.21 GB) + 1024-token requests
    own, per_rank = 1024 * 61 * 1152, 2 * 256 * 2 ** 30 / 8
    assert res.point("sac", 131072, 64).max_concurrency == 8 * int((per_rank - 131072 * 61 * 1152) // own) == 6608
    data = res.to_data()
    assert data["kind"] == "simulation" and data["validation"]["rdma_vs_sac_ttft"] == 9.7


def test_gather_line_reproduces_the_micro_benchmark():
    """One request, one layer, 656 B records: the fitted line against the authors' measurements."""
    from sactool.simulate.api import _path

    p = load_platform(PLATFORM)
    for placement, curve in (("sac", p.gather_cxl), ("dram", p.gather_dram)):
        path = _path(p, placement, 656)
        for pt in curve.points:
            if pt.records >= 256:   # below that the kernel's fixed cost dominates and the line is rough
                assert path.fixed_s + pt.records * path.s_per_record == pytest.approx(pt.latency_s, rel=0.12)
    # BF16 records touch 18 cache lines instead of 11: the per-record time scales with them
    assert _path(p, "sac", 1152).s_per_record == pytest.approx(_path(p, "sac", 656).s_per_record * 18 / 11)
    # CXL costs more per record than DRAM (85.6 vs 49.7 us at top-2048)
    assert _path(p, "sac", 656).s_per_record > 1.5 * _path(p, "dram", 656).s_per_record


def test_progress_reports_every_point_then_done():
    calls = []
    p = load_platform(PLATFORM)
    simulate(SimulationOptions(p, contexts=(16384, 32768), concurrency=(8,), output_tokens=16, hotbuffer_steps=16,
                               progress=lambda what, done, total: calls.append((what, done, total))))
    assert [c[1] for c in calls] == list(range(6)) + [6] and {c[2] for c in calls} == {6}
    assert calls[0][0] == "16K c=8 sac" and calls[-1][0] == "done"


def test_inputs_read_from_the_authors_logs_follow_their_arithmetic():
    """The platform file's comments give the logged figures and the arithmetic; redo it here."""
    p = load_platform(PLATFORM)
    assert p.harness == "e2e_bench" and p.rdma_requests_per_concurrency == 8 and p.requests_per_concurrency == 2
    # RDMA fetch: steps at c = 8 vs prefix bytes, a least-squares line with its intercept (the fixed
    # cost of one fetch), the slope minus the wire = the CPU passes
    steps = {16384: 2.23, 32768: 4.00, 65536: 8.11, 131072: 16.0}
    b = {c: c * 61 * 1152 / 1e9 for c in steps}
    n = len(steps)
    mb, mt = sum(b.values()) / n, sum(steps.values()) / n
    s_per_gb = sum((b[c] - mb) * (steps[c] - mt) for c in steps) / sum((b[c] - mb) ** 2 for c in steps)
    assert s_per_gb == pytest.approx(1.7185, abs=0.001)
    assert p.rdma_fetch_fixed_s == pytest.approx(mt - s_per_gb * mb, abs=0.001)
    cpu = 1e9 / (s_per_gb - 1e9 / p.nic_bytes_per_s)
    assert p.rdma_conversion_bytes_per_s == pytest.approx(cpu, rel=0.002)
    # the CXL pool the runs mapped: 2 devices x 256 GiB ("size=274.88 GB" per device in the logs)
    assert p.cxl_capacity_bytes == 2 * 256 * 2 ** 30
    # front-end: 13 POSTs per second at 128K
    assert p.frontend_s_per_prompt_token == pytest.approx(1 / 13 / 131072, rel=0.002)
    # extend: c = 8 TTFT minus the 8-request backlog
    ttft8 = {16384: 0.41641, 32768: 0.46011, 65536: 0.56761, 131072: 0.85809}
    for c, x in p.extend_points:
        assert x == pytest.approx(ttft8[c] - 8 * p.frontend_s_per_prompt_token * c, abs=0.0005)
    # the calibration runs: 2 buffers x 2 placements x 4 contexts x 6 batches, no c = 64 run;
    # the 128K c = 8 DRAM point of dc_0502 = 43.77 ms (tbt_p50)
    pts = {(q.device_buffer_size, q.placement, q.context_tokens, q.requests_per_rank): q.step_time_s
           for q in p.calibration_runs}
    assert len(pts) == 96 and pts[(6144, "dram", 131072, 1)] == 0.04377
    assert not any(q.requests_per_rank == 8 for q in p.calibration_runs)


def test_logged_absolute_ttft_is_consistent_with_the_run_sets():
    """validation.ttft_s: the run-set mean is the request-weighted mean of the first burst (64) and
    the rest (128-request SAC/DRAM run sets, 512-request RDMA ones), as in round2.per_request."""
    v = load_platform(PLATFORM).validation["ttft_s"]
    assert v["concurrency"] == 64
    for pl, n in (("sac", 128), ("dram", 128), ("rdma", 512)):
        for ctx, x in v[pl].items():
            assert x["mean"] == pytest.approx((64 * x["first_wave"] + (n - 64) * x["later"]) / n, abs=0.002), (pl, ctx)
