"""The serving model's mechanisms in isolation (no workload model, no LRU: given miss profiles)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sactool.errors import CapacityError
from sactool.simulate import engine
from sactool.simulate.api import SimulationOptions, simulate
from sactool.simulate.gpu import ComputeModel, measured_model
from sactool.simulate.misses import constant_profile
from sactool.simulate.platform import StepPoint, load_platform

PLATFORM = Path(__file__).resolve().parent.parent / "sactool" / "data" / "platforms" / "sac-paper.yaml"


def _compute(step_s=0.02):
    return measured_model((StepPoint(1, 1024, step_s),))


def _scenario(**kw):
    base = dict(
        placement="rdma", ranks=1, layers=4, record_bytes=1000, context=1_000_000, output_tokens=4,
        concurrency=64, limit=64, requests=8, arrival_rate_per_s=None, case="cache_hit",
        compute=_compute(), hisparse_overhead_s=0.0, prefetch=False,
        path=engine.PathModel(0.0, 1e-9, 1e12, None, 1), misses=constant_profile(100, 100),
        gpus_per_switch=1, switch_uplink_bytes_per_s=1e12, nics=1, nic_bytes_per_s=1e9,
        nic_chunk_bytes=1 << 30, nic_per_message_s=0.0, fetch_blocks_decode=False,
        conversion_bytes_per_s=None, prefill_s=0.0, pool_write_bytes_per_s=1e12)
    base.update(kw)
    return engine.Scenario(**base)


def _burst(sc):
    """All requests arrive (almost) at once: Poisson at a huge rate."""
    return dataclasses.replace(sc, arrival_rate_per_s=1e9)


def test_rdma_ttft_grows_with_queue_depth_at_nic_bandwidth():
    sc = _burst(_scenario())
    kv = sc.context * sc.layers * sc.record_bytes          # 4 GB per request
    fetch = kv / sc.nic_bytes_per_s                        # 4 s on one NIC
    res = engine.run(sc)
    ttft = sorted(res.ttft_s)
    # FIFO: the k-th request waits for k fetches (plus at most one decode step)
    for k, x in enumerate(ttft, start=1):
        assert k * fetch <= x <= k * fetch + 0.1
    # twice the NIC bandwidth halves the queueing
    fast = engine.run(dataclasses.replace(sc, nic_bytes_per_s=2e9))
    assert sum(fast.ttft_s) / len(fast.ttft_s) == pytest.approx(sum(res.ttft_s) / len(res.ttft_s) / 2, rel=0.03)
    # two NICs (requests spread rank % nics over two ranks) halve the queue too
    two = engine.run(dataclasses.replace(sc, nics=2, ranks=2, gpus_per_switch=1))
    assert max(two.ttft_s) < 0.6 * max(res.ttft_s)
    assert res.breakdown.ttft_fetch_queue_s > 0 and res.breakdown.nic_bytes_per_request == pytest.approx(kv)


def test_sac_fetch_time_scales_with_misses():
    # bandwidth-bound path: 1 request per step gathering from a 1 GB/s pool, no fixed cost
    sc = _scenario(placement="sac", requests=1, concurrency=1, limit=1, output_tokens=50,
                   path=engine.PathModel(0.0, 1e-12, 1e9, None, 1))
    one = engine.run(dataclasses.replace(sc, misses=constant_profile(100, 100))).breakdown
    two = engine.run(dataclasses.replace(sc, misses=constant_profile(200, 200))).breakdown
    assert one.swapin_s == pytest.approx(100 * 1000 * 4 / 1e9, rel=1e-6)
    assert two.swapin_s == pytest.approx(2 * one.swapin_s, rel=1e-6)
    assert two.pool_bytes_per_token == pytest.approx(2 * one.pool_bytes_per_token)
    # a fixed per-layer kernel cost adds once per layer whatever the misses
    fixed = engine.run(dataclasses.replace(sc, path=engine.PathModel(1e-5, 1e-12, 1e9, None, 1))).breakdown
    assert fixed.swapin_s == pytest.approx(one.swapin_s + 4 * 1e-5, rel=1e-6)


def test_shared_cxl_device_divides_bandwidth_between_ranks():
    sc = _burst(_scenario(placement="sac", ranks=2, requests=2, concurrency=2, limit=2, output_tokens=20,
                          path=engine.PathModel(0.0, 1e-12, 1e12, 1e9, 1)))
    shared = engine.run(sc).breakdown.swapin_s
    split = engine.run(dataclasses.replace(sc, path=engine.PathModel(0.0, 1e-12, 1e12, 1e9, 2))).breakdown.swapin_s
    assert shared == pytest.approx(2 * split, rel=0.05)   # (the first arrival decodes one step alone)


def test_pcie_uplink_shared_by_nic_and_swap_in():
    sc = _scenario(placement="rdma", ranks=2, gpus_per_switch=2, switch_uplink_bytes_per_s=30e9,
                   nic_bytes_per_s=12.5e9, path=engine.PathModel(0.0, 1e-12, 55e9, None, 1))
    counts, rec, mx = [4, 4], [400.0, 400.0], [100.0, 100.0]
    quiet = engine._step_time(sc, counts, rec, mx, [False], {})
    busy = engine._step_time(sc, counts, rec, mx, [True], {})
    # uplink 30 GB/s over 2 GPUs = 15 each; with the NIC taking 10 (fair share of 3 flows) -> 10 each
    assert quiet[3] == pytest.approx(4 * 400 * 1000 / 15e9)
    assert busy[3] == pytest.approx(4 * 400 * 1000 / 10e9)
    assert busy[0] > quiet[0]


def test_lockstep_step_is_the_slowest_rank_and_prefetch_overlaps():
    sc = _scenario(placement="sac", ranks=2, path=engine.PathModel(0.0, 1e-12, 1e9, None, 1))
    dt, comp, _, swap = engine._step_time(sc, [1, 1], [100.0, 300.0], [100.0, 300.0], [], {})
    assert swap == pytest.approx(4 * 300 * 1000 / 1e9) and dt == pytest.approx(comp + swap)
    pre = dataclasses.replace(sc, prefetch=True)
    dt2, comp2, _, _ = engine._step_time(pre, [1, 1], [100.0, 300.0], [100.0, 300.0], [], {})
    assert max(comp2, 4 * 300 * 1000 / 1e9) <= dt2 < dt


def test_synchronous_fetch_stalls_everyone_decoding():
    sc = _scenario(requests=16, concurrency=4, limit=4, output_tokens=200, nic_bytes_per_s=20e9)
    asyn = engine.run(sc)
    sync = engine.run(dataclasses.replace(sc, fetch_blocks_decode=True))
    assert asyn.breakdown.stall_s == 0 and sync.breakdown.stall_s > 0
    assert sum(sync.tbt_s) / 16 > sum(asyn.tbt_s) / 16
    assert sync.throughput_tokens_per_s < asyn.throughput_tokens_per_s


def test_measured_compute_model_lines():
    m = measured_model((StepPoint(1, 32768, 0.0211), StepPoint(2, 32768, 0.0232), StepPoint(4, 32768, 0.0263),
                        StepPoint(1, 131072, 0.0249)))
    assert m.step_s(1, 32768) == pytest.approx(0.0211)
    assert m.step_s(1, 131072) == pytest.approx(0.0249)
    assert m.step_s(1, 65536) == pytest.approx(0.0211 + (0.0249 - 0.0211) / 3)
    slope = (1 * 0.0021 + 3 * 0.0052) / (1 + 9)
    assert m.step_s(8, 32768) == pytest.approx(0.0211 + 7 * slope)
    assert isinstance(m, ComputeModel) and m.step_s(0, 32768) == 0


def _opts(plat, **kw):
    return SimulationOptions(plat, miss_fn=lambda ctx, buf: constant_profile(2048, 40, top_k=2048), **kw)


def test_capacity_caps_concurrency_and_local_memory():
    plat = load_platform(PLATFORM, ["dram.capacity_bytes=10e9", "workload.concurrency=[4]",
                                    "workload.contexts=[16k]", "workload.output_tokens=64",
                                    "workload.shared_prefix=false"])
    kv = 16384 * 61 * 1152
    res = simulate(_opts(plat))
    sac, rdma, dram = (res.point(p, 16384, 4) for p in ("sac", "rdma", "dram"))
    assert rdma.max_concurrency == dram.max_concurrency == int(10e9 // kv) == 8
    assert not rdma.capped and sac.local_memory_bytes == 0 and dram.local_memory_bytes == 4 * kv
    res = simulate(_opts(plat, concurrency=(16,)))
    rdma, sac = res.point("rdma", 16384, 16), res.point("sac", 16384, 16)
    assert rdma.capped and rdma.max_concurrency == 8 and rdma.local_memory_bytes == 16 * kv
    assert not sac.capped and sac.throughput_tokens_per_s > rdma.throughput_tokens_per_s
    assert rdma.breakdown["ttft_admission_wait_s"] > sac.breakdown["ttft_admission_wait_s"]


def test_concurrency_that_fits_nowhere():
    plat = load_platform(PLATFORM, ["dram.capacity_bytes=1e9", "cxl.capacity_bytes=1e9",
                                    "workload.contexts=[16k]", "workload.concurrency=[4]"])
    with pytest.raises(CapacityError, match="fits in no placement"):
        simulate(_opts(plat))


def test_cache_populate_pays_prefill_and_pool_write():
    plat = load_platform(PLATFORM, ["workload.contexts=[16k]", "workload.concurrency=[8]",
                                    "workload.output_tokens=32"])
    hit = simulate(_opts(plat))
    pop = simulate(_opts(plat, case="cache_populate"))
    for pl in ("sac", "rdma", "dram"):
        h, p = hit.point(pl, 16384, 8), pop.point(pl, 16384, 8)
        # the measured 16K prefill (25.9 s per request per rank) dominates TTFT
        assert p.breakdown["ttft_prefill_s"] >= 25.9 and p.ttft_mean_s > 25.9 > h.ttft_mean_s
    # populate: the RDMA pool does not fetch (the KV was just computed locally), it pushes it
    assert pop.point("rdma", 16384, 8).breakdown["ttft_fetch_s"] == 0


def test_roofline_when_no_step_time_was_measured():
    plat = load_platform(PLATFORM, ["gpu.decode_step.measured=[]", "gpu.hisparse_overhead_s=0",
                                    "workload.contexts=[16k]", "workload.concurrency=[8]",
                                    "workload.output_tokens=32"])
    res = simulate(_opts(plat))
    assert res.inputs["compute"].startswith("roofline")
    # H20 roofline: the FP8 checkpoint's weights / 8 GPUs read once per step at 4.0 TB/s
    from sactool.models import checkpoint_of

    floor = checkpoint_of("deepseek-v3.2")[0] / 8 / 4.0e12
    assert res.point("dram", 16384, 8).breakdown["compute_s"] >= floor
    with pytest.raises(Exception, match="roofline"):
        load_platform(PLATFORM, ["gpu.decode_step.measured=[]", "gpu.name=mi300x"])


def test_poisson_arrivals_below_capacity_are_served_at_their_rate():
    sc = _scenario(placement="dram", requests=200, concurrency=64, limit=64, output_tokens=10,
                   arrival_rate_per_s=2.0, misses=constant_profile(10, 10))
    res = engine.run(sc)
    # light load: no request waits for admission, and everything issued gets served
    assert res.breakdown.ttft_admission_wait_s < sc.compute.step_s(1, sc.context)
    assert len(res.ttft_s) == 200
    # output rate over the whole run ~ arrival rate x output tokens (the run lasts ~100 s)
    assert 200 * 10 / res.makespan_s == pytest.approx(2.0 * 10, rel=0.2)
    # overload: arrivals far above what 1 slot serves queue up for admission
    slow = engine.run(dataclasses.replace(sc, limit=1, concurrency=1, arrival_rate_per_s=50.0))
    assert slow.breakdown.ttft_admission_wait_s > 10 * res.breakdown.ttft_admission_wait_s + 1.0


def test_tbt_components_add_up():
    plat = load_platform(PLATFORM, ["workload.contexts=[64k]", "workload.concurrency=[16]",
                                    "workload.output_tokens=256"])
    res = simulate(_opts(plat))
    for pl in ("sac", "rdma", "dram"):
        p = res.point(pl, 65536, 16)
        b = p.breakdown
        parts = b["compute_s"] + b["overhead_s"] + b["swapin_s"] + b["stall_s"] + b["extend_stall_s"]
        assert parts == pytest.approx(p.tbt_mean_s, rel=0.03)
        assert sum(v for k, v in b.items() if k.startswith("ttft_")) == pytest.approx(p.ttft_mean_s, rel=1e-6)
    assert res.point("rdma", 65536, 16).breakdown["stall_s"] > 0 == res.point("sac", 65536, 16).breakdown["stall_s"]


def test_requests_arriving_during_a_prefill_start_their_own_in_parallel():
    # two ranks, 10 s prefills; the second request arrives 1 s into the first one's prefill
    sc = _scenario(placement="sac", ranks=2, requests=2, concurrency=2, limit=2, output_tokens=100,
                   case="cache_populate", prefill_s=10.0, compute=_compute(0.02))
    res = engine.run(sc)
    first, second = res.ttft_s
    # the second's prefill runs from its arrival (TTFT ~10 s, not the ~19 s of waiting for the first);
    # in lockstep the first's first token waits for the second's prefill to end (~11 s)
    assert 10.0 <= second < 10.5 and 10.5 < first < 11.5
