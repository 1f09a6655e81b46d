"""``sactool/bench/figures.py``, the one reader of bench figures: a record holding CPU gathers and GPU
swap-ins side by side (a mixed record) gives tune and simulate the same figure — the GPU one, the path
HiSparse runs — and a record whose GPU figure is unusable gives both the CPU proxy, saying why.

The GPU results are synthetic (the layout ``run_gpu_gather`` writes, test_gpu_tune.py); the CPU results
are a real quick gather on node 0 (the session's ``fast_bench_record``).
"""

from __future__ import annotations

import json

import pytest

from sactool.bench import load_bench
from sactool.bench.figures import fetch_figure, first_figure, request_and_total
from sactool.errors import RecordError
from test_gpu_tune import _result


def _mixed(tmp_path, fast_bench_record, *, simulator: bool = False, gpu_sizes=(656,)):
    """The CPU gather record of node 0 with GPU swap-in results added (1/8/64 blocks × 512/960 threads)."""
    data = json.loads(fast_bench_record.read_text())
    for rb in gpu_sizes:
        for b in (1, 8, 64):
            for t in (512, 960):
                data["results"].append(_result(rb, b, t, 1e9 * b ** 0.5 * (1.2 if t == 960 else 1.0)))
    data["gpu"] = {"index": 0, "name": "synthetic", "simulator": simulator}
    path = tmp_path / ("sim.json" if simulator else "mixed.json")
    path.write_text(json.dumps(data))
    return path


def _tune_figure(path, machine):
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import topology
    from sactool.pool.discover import pool_info
    from sactool.tune.pool import from_bench

    pool = pool_info(topology(SysfsReader(machine("this-machine"))))      # node 0 standing in for the pool
    g = from_bench([path], 656, pool, {}, strict=False, blocks=1, swap_in_block=960, top_k=2048)
    (row,) = g.info["targets"]
    return row, g


def _simulate_curve(path):
    from sactool.simulate.fromprofile import _bench_curve

    curve, node, note = _bench_curve(str(path), None, 656, "profile p.yaml", 960)
    return curve


def test_tune_and_simulate_take_the_same_figure_from_one_mixed_record(tmp_path, fast_bench_record, machine):
    path = _mixed(tmp_path, fast_bench_record)
    rec = load_bench(path)
    f = fetch_figure(rec, 656, blocks=1, width=960)
    assert f.path == "gpu" and f.blocks == 1 and f.threads == 960
    assert f.bandwidth_bytes_per_s == pytest.approx(1.2e9)
    cpu = fetch_figure(rec, 656, paths=("cpu_proxy",))
    assert cpu.path == "cpu_proxy" and cpu.bandwidth_bytes_per_s != pytest.approx(f.bandwidth_bytes_per_s)

    row, g = _tune_figure(path, machine)
    curve = _simulate_curve(path)
    # tune's fetch figure for one request in flight per rank = simulate's per-request rate: the same GPU figure
    assert row["figure"] == "gpu" and g.info["fetch_path"] == "gpu"
    assert row["ns_per_record"] == pytest.approx(f.ns_per_record)
    assert curve.points[-1].latency_s / curve.points[-1].records == pytest.approx(f.ns_per_record * 1e-9)
    assert "GPU swap-in record" in curve.source
    # and simulate's aggregate is the most blocks measured at that width, as request_and_total says
    one, total = request_and_total(rec, 656, width=960)
    assert (one.figure, total.blocks) == (f.figure, 64)
    assert curve.aggregate_bytes_per_s == pytest.approx(total.bandwidth_bytes_per_s)


def test_a_simulator_gpu_result_leaves_both_on_the_cpu_proxy(tmp_path, fast_bench_record, machine):
    """GPU results from numba's CUDA simulator are no figure: tune and simulate both take the CPU gather,
    and tune says why the GPU figure was not used."""
    path = _mixed(tmp_path, fast_bench_record, simulator=True)
    f = fetch_figure(load_bench(path), 656)
    assert f.path == "cpu_proxy" and "simulator" in f.gpu_not_used
    row, _ = _tune_figure(path, machine)
    curve = _simulate_curve(path)
    assert row["figure"] == "cpu_proxy" and row["bandwidth_bytes_per_s"] == pytest.approx(f.bandwidth_bytes_per_s)
    assert "simulator" in row["gpu_not_used"]
    one = fetch_figure(load_bench(path), 656, threads=1)
    assert curve.points[-1].latency_s / curve.points[-1].records == pytest.approx(one.ns_per_record * 1e-9)
    assert "bench record" in curve.source and "GPU" not in curve.source


def test_gpu_results_at_another_size_and_no_figure_at_all(tmp_path, fast_bench_record):
    """GPU results for 1152 B only: a 656 B fetch is the CPU proxy (GPU sizes are not derived); a target's
    records in order, GPU before CPU across them; no record serving it is one error with every reason."""
    path = _mixed(tmp_path, fast_bench_record, gpu_sizes=(1152,))
    rec = load_bench(path)
    assert fetch_figure(rec, 656).path == "cpu_proxy" and fetch_figure(rec, 1152).path == "gpu"
    (tmp_path / "x").mkdir()
    gpu_only = _mixed(tmp_path / "x", fast_bench_record)
    p, r, f = first_figure([("a", rec), ("b", load_bench(gpu_only))], 656)
    assert p == "b" and f.path == "gpu"                        # b's GPU figure before a's CPU one
    with pytest.raises(RecordError) as e:
        fetch_figure(rec, 656, paths=("gpu",))
    assert "do not include 656 B records" in e.value.message
