"""``tune`` consumes GPU swap-in figures (``bench gpu-gather`` records) and labels the CPU proxy.

No GPU has measured anything for this project yet, so the GPU bench records here are *synthetic*:
built with the record layout ``run_gpu_gather`` writes (the simulator test in
test_gpu_gather.py checks that layout on a real run), with bandwidths picked so that each choice
of the look-up is visible. They test how figures are picked and used, never what a GPU delivers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sactool import records
from sactool.bench import load_bench
from sactool.bench.gpufigure import gpu_gather_figure, has_gpu_figures
from sactool.errors import RecordError


def _result(rb: int, blocks: int, threads: int, bw: float, pattern: str = "uniform", topk: int = 2048) -> dict:
    step = blocks * topk * rb / bw
    return {"test": "gpu_gather", "key": f"gpu_gather/{rb}B/k{topk}/{pattern}/b{blocks}/t{threads}",
            "params": {"record_bytes": rb, "topk": topk, "blocks": blocks, "threads_per_block": threads,
                       "warps_per_block": threads // 32, "index_pattern": pattern, "load_bytes": 8},
            "unit": "bytes_per_s", "samples": [bw] * 5,
            "stats": {"median": bw, "mean": bw, "stdev": 0.0, "min": bw, "max": bw, "p05": bw, "p95": bw, "n": 5},
            "derived": {"bandwidth_bytes_per_s": bw, "topk_step_us": step * 1e6, "records_per_s": bw / rb,
                        "lines_in_flight": blocks * threads // 32 * 4, "ceiling_ratio": None}}


def gpu_record(path: Path, node: str = "node2", *, scale: float = 1.0, simulator: bool = False,
               sizes=(656,)) -> Path:
    """A synthetic gpu-gather record: bandwidth grows with blocks; 960 threads beat 512; clustered is
    faster than uniform (so picking uniform shows)."""
    res = []
    for rb in sizes:
        for b in (1, 8, 64):
            for t in (512, 960):
                bw = scale * 1e9 * b ** 0.5 * (1.2 if t == 960 else 1.0)
                res.append(_result(rb, b, t, bw))
                res.append(_result(rb, b, t, bw * 3, pattern="clustered"))
    data = records.header("bench", 1)
    data.update({"machine": {"hostname": "gpu-host"}, "command": "gpu-gather", "memory_node": node, "dax_device": None,
                 "cpu_node": "node0", "cpus": [0], "stand_in": None, "buffer": {},
                 "gpu": {"index": 0, "name": "synthetic", "simulator": simulator}, "results": res, "warnings": [],
                 "complete": True})
    path.write_text(json.dumps(data))
    return path


def test_figure_look_up(tmp_path):
    rec = load_bench(gpu_record(tmp_path / "g.json"))
    assert has_gpu_figures(rec)
    f = gpu_gather_figure(rec, 656, 8, threads=960)
    assert (f.blocks, f.threads_per_block, f.topk) == (8, 960, 2048)
    assert f.bandwidth_bytes_per_s == pytest.approx(1e9 * 8 ** 0.5 * 1.2)   # uniform, not the 3x clustered
    assert f.ns_per_record == pytest.approx(1e9 * 656 / f.bandwidth_bytes_per_s)
    near = gpu_gather_figure(rec, 656, 12, threads=960)
    assert near.blocks == 8 and "12 requests in flight not measured" in near.detail
    wide = gpu_gather_figure(rec, 656, 64, threads=1024)
    assert wide.threads_per_block == 960 and "1024 threads per block not measured" in wide.detail
    with pytest.raises(RecordError) as e:
        gpu_gather_figure(rec, 1152, 8)
    assert "1152" in e.value.message and "656" in e.value.message
    sim = load_bench(gpu_record(tmp_path / "s.json", simulator=True))
    assert not has_gpu_figures(sim)
    with pytest.raises(RecordError) as e:
        gpu_gather_figure(sim, 656, 8)
    assert "simulator" in e.value.message


def test_from_bench_takes_each_targets_record_gpu_first(tmp_path, machine, fast_bench_record):
    """sac2s (two sockets, CXL node2 and node3): node2 has a GPU record, node3 only a CPU one."""
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import topology
    from sactool.pool.discover import pool_info
    from sactool.tune.pool import from_bench

    pool = pool_info(topology(SysfsReader(machine("sac2s__30-system-ram"))))
    cpu = json.loads(Path(fast_bench_record).read_text())
    cpu["memory_node"] = "node3"   # the CPU gather measured on node 0 here, relabelled for the matching rule
    for r in cpu["results"]:
        r["memory_node"] = "node3"
    cpu_path = tmp_path / "cpu3.json"
    cpu_path.write_text(json.dumps(cpu))
    g = from_bench([gpu_record(tmp_path / "g2.json"), cpu_path], 656, pool, {}, strict=False, blocks=8,
                   swap_in_block=960, top_k=2048)
    (rnd,) = g.rounds
    assert rnd["node2"] == pytest.approx(1e9 * 8 ** 0.5 * 1.2)
    assert rnd["node3"] == pytest.approx(load_bench(cpu_path).results[0]["derived"]["bandwidth_bytes_per_s"])
    assert g.info["fetch_path"] == "mixed"
    assert [t["figure"] for t in g.info["targets"]] == ["gpu", "cpu_proxy"]
    proxy = [w for w in g.warnings if w["code"] == "cpu_proxy"]
    assert len(proxy) == 1 and "node3" in proxy[0]["message"] and "node2" not in proxy[0]["message"]
    both = from_bench([gpu_record(tmp_path / "a.json"), gpu_record(tmp_path / "b.json", "node3", scale=2)], 656,
                      pool, {}, strict=False, blocks=64, swap_in_block=960, top_k=2048)
    assert both.info["fetch_path"] == "gpu" and not [w for w in both.warnings if w["code"] == "cpu_proxy"]
    assert both.rounds[0]["node3"] == pytest.approx(2 * both.rounds[0]["node2"])
    with pytest.raises(RecordError):
        from_bench([gpu_record(tmp_path / "c.json", "node1")], 656, pool, {}, strict=True, blocks=8)


def test_tune_uses_the_gpu_figure_and_says_so(tmp_path, machine, capsys, fast_bench_record):
    from sactool.cli import main
    from sactool.profile import load_profile

    # node 0 of the dev VM as recorded (a DRAM node standing in for the pool); a GPU budget that keeps
    # the hot buffer below the 16K context, so records miss and the fetch figure matters
    root = machine("this-machine")
    args = ["tune", "--sysfs-root", str(root), "--tp", "1", "--context", "16k", "--gpu-kv-budget", "400MiB",
            "--steps", "6", "--replicates", "1"]
    outs = {}
    for name, bench in (("gpu1", gpu_record(tmp_path / "g1.json", "node0")),
                        ("gpu2", gpu_record(tmp_path / "g2.json", "node0", scale=2)),
                        ("cpu", fast_bench_record)):
        out = tmp_path / f"{name}.yaml"
        assert main([*args, "--bench", str(bench), "--out", str(out)]) == 0
        cap = capsys.readouterr()
        outs[name] = (load_profile(out), cap)
    p1, cap1 = outs["gpu1"]
    assert p1.bench["fetch_path"] == "gpu" and "GPU swap-in" in p1.bench["fetch_figure"]
    assert p1.bench["design_blocks"] == 1 and p1.bench["targets"][0]["blocks"] == 1   # tp 1: all requests, one rank
    assert "GPU swap-in" in cap1.out and "CPU proxy" not in cap1.err
    # twice the GPU bandwidth, half the predicted fetch time: the figure is what the cost model uses
    t1, t2 = (outs[k][0].predictions["fetch_time_per_token_s"] for k in ("gpu1", "gpu2"))
    assert t1 > 0 and t1 == pytest.approx(2 * t2)
    pc, capc = outs["cpu"]
    assert pc.bench["fetch_path"] == "cpu_proxy" and "CPU proxy" in pc.bench["fetch_figure"]
    err = " ".join(capc.err.split())   # rich wraps lines at the terminal width
    assert "a CPU proxy for the GPU swap-in" in err and "no GPU swap-in results" in err and "CPU proxy" in capc.out
    # simulate --profile reads the GPU record the profile names: 1 block for one request, 64 blocks for the pool
    assert main(["simulate", "--profile", str(tmp_path / "gpu1.yaml"), "--context", "16k", "--concurrency", "1",
                 "--output-tokens", "16", "--hotbuffer-steps", "8", "--format", "json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert any("GPU swap-in loads" in n for n in sim["notes"])
    assert sim["inputs"]["paths"]["sac"]["device_bytes_per_s"] == pytest.approx(1e9 * 64 ** 0.5 * 1.2)
    # profile show says which figure the profile used
    assert main(["profile", "show", str(tmp_path / "gpu1.yaml")]) == 0
    assert "fetch figure: GPU swap-in" in " ".join(capsys.readouterr().out.split())
    assert main(["profile", "show", str(tmp_path / "cpu.yaml")]) == 0
    assert "a CPU proxy for the GPU swap-in" in " ".join(capsys.readouterr().out.split())


def test_a_damaged_gpu_result_is_refused_on_load(tmp_path):
    p = gpu_record(tmp_path / "g.json")
    data = json.loads(p.read_text())
    del data["results"][0]["params"]["blocks"]
    p.write_text(json.dumps(data))
    with pytest.raises(RecordError) as e:
        load_bench(p)
    assert "params.blocks" in e.value.message


def test_a_target_with_no_usable_figure_says_why_for_both_paths(tmp_path, machine):
    """Records of the pool targets that hold neither a GPU figure at these record bytes nor a CPU
    gather: one error naming the target, the GPU figure's reason and the CPU gather's."""
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import topology
    from sactool.pool.discover import pool_info
    from sactool.tune.pool import from_bench

    pool = pool_info(topology(SysfsReader(machine("sac2s__30-system-ram"))))
    with pytest.raises(RecordError) as e:
        from_bench([gpu_record(tmp_path / "a.json"), gpu_record(tmp_path / "b.json", "node3")], 1152, pool, {},
                   strict=False, blocks=8, swap_in_block=960, top_k=2048)
    m = e.value.message
    assert m.startswith("no usable fetch figure for pool target node2: ")
    assert "do not include 1152 B records" in m and "no gather results" in m and "gpu-gather" in e.value.hint
