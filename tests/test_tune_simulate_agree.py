"""tune's hot-buffer search and simulate charge a miss the same way: same inputs, same gain over 4096 slots."""

from __future__ import annotations

import pytest

from sactool.data import paper_platform
from sactool.hisparse.capacity import Deployment
from sactool.pool.targets import Target
from sactool.hisparse.cost import common_miss_time_per_token, per_missed_record_cost
from sactool.pool.rankplan import round_robin
from sactool.models import get_model
from sactool.simulate.api import calibration_of
from sactool.simulate.engine import path_model
from sactool.simulate.misscheck import _scenario, step_s
from sactool.simulate.platform import load_platform
from sactool.tune import search


def _paper():
    p = load_platform(paper_platform())
    spec = get_model(p.model)
    rb, layers = spec.record_bytes(p.kv_dtype), spec.num_layers
    return p, spec, rb, layers, calibration_of(p, rb, layers)


def test_packaged_per_miss_cost_is_the_calibration_fit():
    """The copy tune reads (sactool/data/costs/) is the value simulate fits on the calibration runs."""
    *_, cal = _paper()
    pm = per_missed_record_cost()
    assert pm.seconds == pytest.approx(cal.per_missed_record_s, rel=5e-3)
    assert "calibration" in pm.source and pm.to_data()["file"].startswith("sactool/data/costs/")


def test_tune_gain_over_4096_equals_simulate_on_the_same_inputs():
    """SAC on the paper platform at 32K and c = 64 (8 requests per rank, two CXL devices, four ranks
    each), the calibration's misses at 4096 and 6144 slots: the fetch time tune saves per token at
    6144 equals the decode-step time simulate's engine saves, both with the per-missed-record cost."""
    p, spec, rb, layers, cal = _paper()
    ctx, b, ranks = 32768, 8, p.attn_dp_size
    m4, m6 = cal.misses[(ctx, 4096)], cal.misses[(ctx, 6144)]
    path = path_model(p, "sac", rb, common_s=cal.per_missed_record_s)
    sc = _scenario(p, "sac", path, layers, rb, ctx, None)
    sim_gain = step_s(sc, b, m4) - step_s(sc, b, m6)

    # the same share of the path per rank as the engine's: link, switch uplink, device / ranks on it
    on_dev = ranks // p.cxl_devices
    share = min(path.link_bytes_per_s, p.switch_uplink_bytes_per_s / p.gpus_per_switch,
                path.device_bytes_per_s / on_dev)
    names = [f"cxl{i}" for i in range(p.cxl_devices)]
    targets = tuple(Target(n, "numa", 1 << 40, "test", node=2 + i) for i, n in enumerate(names))
    x = search.Inputs(contexts=(ctx,), concurrency=b * ranks, deployment=Deployment(ranks, ranks), targets=targets,
                      layers=layers, record_bytes=rb, indexer_bytes=spec.indexer_bytes, top_k=p.top_k,
                      gpu_budget_bytes=1 << 40, misses={ctx: [{4096: m4, 6144: m6}]},
                      hit_rate={ctx: [{4096: 0.9, 6144: 0.9}]}, bandwidth=[{n: share * on_dev for n in names}],
                      per_miss=search.per_miss_for({"fetch_path": "cpu_proxy"}))
    pl = round_robin(ranks, names)
    ev = {buf: search.evaluate(search.Candidate(buf, 8, 960, True, pl), x) for buf in (4096, 6144)}
    tune_gain = ev[4096].mean_s - ev[6144].mean_s
    assert tune_gain == pytest.approx(sim_gain, rel=1e-3)
    # the per-miss term is a real part of it (not a rounding): without it the gains differ
    common = common_miss_time_per_token(m4 - m6, b, layers, cal.per_missed_record_s)
    assert common > 0.2 * sim_gain
    bare = search.Inputs(**{**x.__dict__, "per_miss": None})
    bare_gain = search.evaluate(search.Candidate(4096, 8, 960, True, pl), bare).mean_s \
        - search.evaluate(search.Candidate(6144, 8, 960, True, pl), bare).mean_s
    assert bare_gain == pytest.approx(sim_gain - common, rel=1e-3)


def test_tune_choice_on_the_filler_workload_and_its_gain_equal_simulate():
    """The paper runs' workload (the filler replay simulate uses, life means at every coarse size):
    tune's search over those sizes picks one, and its fetch time saved over 4096 there is the
    decode-step time simulate's engine saves with the same misses."""
    from sactool.simulate.fillerfit import profile

    p, spec, rb, layers, cal = _paper()
    ctx, b, ranks = 32768, 8, p.attn_dp_size
    bufs = search.coarse_buffers(p.top_k)
    life = {buf: (1.0 - profile(p.filler, ctx, buf, p.top_k, kernel=p.hisparse_kernel, steps=1024).hit_rate) * p.top_k
            for buf in bufs}
    path = path_model(p, "sac", rb, common_s=cal.per_missed_record_s)
    sc = _scenario(p, "sac", path, layers, rb, ctx, None)
    on_dev = ranks // p.cxl_devices
    share = min(path.link_bytes_per_s, p.switch_uplink_bytes_per_s / p.gpus_per_switch,
                path.device_bytes_per_s / on_dev)
    names = [f"cxl{i}" for i in range(p.cxl_devices)]
    x = search.Inputs(contexts=(ctx,), concurrency=b * ranks, deployment=Deployment(ranks, ranks),
                      targets=tuple(Target(n, "numa", 1 << 40, "test", node=2 + i) for i, n in enumerate(names)),
                      layers=layers, record_bytes=rb, indexer_bytes=spec.indexer_bytes, top_k=p.top_k,
                      gpu_budget_bytes=1 << 40, misses={ctx: [life]}, hit_rate={ctx: [{k: 0.9 for k in bufs}]},
                      bandwidth=[{n: share * on_dev for n in names}],
                      per_miss=search.per_miss_for({"fetch_path": "cpu_proxy"}))
    evals = [search.evaluate(c, x) for c in search.candidates_for(list(bufs), x, [round_robin(ranks, names)])]
    chosen, _ = search.choose(evals)
    best = chosen.candidate.device_buffer_size
    assert best == max(bufs)                 # misses fall with the buffer and every size fits
    at = {buf: min(e.mean_s for e in evals if e.candidate.device_buffer_size == buf) for buf in bufs}
    tune_gain = at[4096] - chosen.mean_s
    sim_gain = step_s(sc, b, life[4096]) - step_s(sc, b, life[best])
    assert tune_gain == pytest.approx(sim_gain, rel=1e-3)
    assert at[4096] > at[6144] > at[best]


def test_per_miss_cost_applies_to_a_cpu_proxy_not_to_a_gpu_swap_in_figure():
    assert search.per_miss_for({"fetch_path": "gpu"}) is None
    for path in ("cpu_proxy", "mixed", None):
        pm = search.per_miss_for({"fetch_path": path} if path else {})
        assert pm is not None and pm.seconds > 0
