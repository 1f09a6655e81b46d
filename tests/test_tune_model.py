"""Cost, capacity, GPU budget and placement arithmetic against hand-computed, cited figures."""

from __future__ import annotations

import pytest

from sactool.errors import CapacityError, UsageError
from sactool.models import checkpoint_of, get_model
from sactool.hisparse import capacity, cost, gpus
from sactool.pool import rankplan as placement
from sactool.hisparse.capacity import Deployment
from sactool.pool.targets import Target


class Fig:  # a GatherFigure-shaped value (record size, bandwidth): input data, not the thing under test
    def __init__(self, record_bytes, bw):
        self.record_bytes, self.bandwidth_bytes_per_s = record_bytes, bw


DS = get_model("deepseek-v3.2")


def test_fetch_bytes_and_time():
    # docs/sources.md, design facts: one decode step of one layer reads 2048 records = 1.3 MB at 656 B
    assert cost.fetch_bytes_per_token(2048, 656, 1) == 1_343_488
    # docs/sources.md, SGLang §2.5: ~82 MB per request per step on DeepSeek-V3.2 if nothing hits
    assert cost.fetch_bytes_per_token(2048, 656, 61) == 81_952_768
    # 8 requests x 100 misses x 656 B x 61 layers at 1 GB/s
    t = cost.fetch_time_per_token(100, 656, 61, Fig(656, 1e9), 8)
    assert t == pytest.approx(8 * 100 * 656 * 61 / 1e9)
    with pytest.raises(ValueError):
        cost.fetch_time_per_token(100, 1152, 61, Fig(656, 1e9), 8)


def test_rdma_full_prefix_matches_design():
    # docs/sources.md, design facts: at 128K a DeepSeek-V3.2 request holds 9.2 GB of BF16 KV
    b = cost.rdma_full_prefix_bytes(131072, DS.record_bytes("bf16"), DS.num_layers)
    assert b == 131072 * 1152 * 61 and round(b / 1e9, 1) == 9.2


def test_step_time_is_slowest_target():
    assert cost.step_time_over_targets({"node2": 4e9, "node3": 1e9}, {"node2": 2e9, "node3": 2e9}) == 2.0


def test_rank_sizing_hand_computed():
    # docs/sources.md, SGLang §2.5: 61 x 656 = 40,016 B per logical token; 132 x 61 = 8,052 B of index keys
    p = capacity.rank_sizing(2, 4096, 3, layers=61, record_bytes=656, indexer_bytes=132)
    assert p.device_slots == 2 * (4096 + 64)
    assert p.host_tokens == 3 * 8320
    assert p.hot_buffer_bytes == 8320 * 40_016
    assert p.index_key_bytes == 24_960 * 8_052
    assert p.host_pool_bytes == (24_960 + 64) * 40_016
    assert capacity.min_ratio(1, 4096, 131072) == 32          # ceil(131072 / 4160)
    assert capacity.min_ratio(4, 2048, 16384) == 8            # ceil(4*16384 / (4*2112))


def test_fits_reports_each_limit():
    p = capacity.rank_sizing(1, 2048, 8, layers=61, record_bytes=656, indexer_bytes=132)
    assert capacity.fits(p, gpu_budget_bytes=p.gpu_bytes, pool_bytes_per_rank=p.host_pool_bytes) == []
    why = capacity.fits(p, gpu_budget_bytes=p.gpu_bytes - 1, pool_bytes_per_rank=p.host_pool_bytes - 1)
    assert len(why) == 2 and why[0].startswith("GPU") and why[1].startswith("pool")


def test_max_requests_per_rank_is_exact():
    kw = dict(gpu_budget_bytes=10**12, layers=61, record_bytes=656, indexer_bytes=132)
    one = (capacity.pages(16384) + 64) * 40_016          # host bytes of one 16K request (+ pad page)
    n = capacity.max_requests_per_rank(2048, 16384, pool_bytes_per_rank=10 * one, **kw)
    assert n == 9   # ten requests' rows + ten pad pages do not fit; 9 do (ratio rounding adds slack)
    p = capacity.rank_sizing(n, 2048, capacity.min_ratio(n, 2048, 16384), layers=61, record_bytes=656,
                           indexer_bytes=132)
    assert p.host_pool_bytes <= 10 * one
    assert capacity.max_requests_per_rank(2048, 16384, pool_bytes_per_rank=one // 2, **kw) == 0


def test_replication_with_plain_tp():
    # §2.5: with plain TP8 each rank holds a full copy; DP attention avoids it
    tp = Deployment(8, 1)
    dp = Deployment(8, 8)
    assert tp.requests_per_rank(64) == 64 and dp.requests_per_rank(64) == 8
    a = capacity.pool_bytes_needed(64, 16384, tp, layers=61, record_bytes=656)
    b = capacity.pool_bytes_needed(64, 16384, dp, layers=61, record_bytes=656)
    assert a == 8 * b == 8 * 64 * 16384 * 40_016


def test_gpu_budget():
    b = gpus.kv_budget(model_name="deepseek-v3.2", tp=8, gpu="h200", budget_bytes=None,
                       checkpoint=checkpoint_of("deepseek-v3.2"))
    assert b.bytes_per_gpu == int(141e9 * 0.85) - -(-(642 * 2**30) // 8)
    assert b.source == "derived"
    assert gpus.kv_budget(model_name="x", tp=1, gpu=None, budget_bytes=5).bytes_per_gpu == 5
    with pytest.raises(CapacityError):   # FP8 DeepSeek-V3.2 weights do not fit 8 x H20 at 0.85
        gpus.kv_budget(model_name="deepseek-v3.2", tp=8, gpu="h20", budget_bytes=None,
                       checkpoint=checkpoint_of("deepseek-v3.2"))
    with pytest.raises(UsageError, match="h100, h20, h200"):
        gpus.get_gpu("a100")
    for glm in ("glm-5", "glm-5.1"):   # checkpoint sizes ship in sactool/data/models/<name>.json
        g = gpus.kv_budget(model_name=glm, tp=8, gpu="h200", budget_bytes=None,
                       checkpoint=checkpoint_of(glm))
        assert g.bytes_per_gpu == int(141e9 * 0.85) - -(-(754 * 10**9) // 8)
        assert "754 GB" in g.detail
    with pytest.raises(UsageError, match="checkpoint size of my-model") as e:
        gpus.kv_budget(model_name="my-model", tp=8, gpu="h200", budget_bytes=None,
                       checkpoint=checkpoint_of("my-model"))
    assert "--gpu-kv-budget" in e.value.hint


def test_placement_round_robin_and_packed():
    rr = placement.round_robin(8, ["node2", "node3"])
    assert rr.rank_targets == ("node2", "node3") * 4          # SAC: tp_rank % num_devices
    pk = placement.packed(8, ["node2", "node3"], 1)
    assert set(pk.rank_targets) == {"node2"}
    targets = [Target("node2", "numa", 64 << 30, "t", node=2), Target("node3", "numa", 32 << 30, "t", node=3)]
    assert placement.pool_bytes_per_rank(rr, targets) == (32 << 30) // 4
    assert placement.pool_bytes_per_rank(pk, targets) == (64 << 30) // 8
    cands = placement.candidates(8, ["node2", "node3", "node4"])
    assert [c.label for c in cands] == ["round_robin", "packed/1", "packed/2"]
    assert [c.label for c in placement.candidates(4, ["node0"])] == ["round_robin"]
