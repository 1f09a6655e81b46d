"""``sactool bench`` in-process: real (small) measurements on node 0, stdout purity, the record
loads back, exit codes for bad input, Ctrl-C keeps finished samples."""

from __future__ import annotations

import json
import os
import signal

import pytest

from fixtures.trees import unpack
from sactool.bench import gather_figure, load_bench, run_quick_gather
from sactool.cli import main
from sactool.errors import ExitCode, TopologyError
from sactool.host.sysfs import SysfsReader
from sactool.memory.nodes import topology

SMALL = ["--size", "64MiB", "--preset", "fast"]


def test_gather_json_stdout_is_data_and_record_loads(tmp_path, capsys):
    out = tmp_path / "b.json"
    code = main(["bench", "gather", "--node", "0", "--record-bytes", "656,1152", "--threads", "1", "--topk", "256",
                 "--prefetch", "8", "--format", "json", "--out", str(out)] + SMALL)
    cap = capsys.readouterr()
    assert code == 0, cap.err
    data = json.loads(cap.out)  # stdout carries only the record
    assert data["kind"] == "bench" and data["schema_version"] == 3 and data["machine"]["live"] is True
    # a NUMA node is its number (docs/reference/units.md); a mapping key stays nodeN
    assert data["memory_node"] == 0 and data["cpu_node"] == 0 and data["results"][0]["memory_node"] == 0
    assert data["buffer"]["memory_nodes"] == [0] and data["machine"]["numa_nodes"][0]["node"] == 0
    assert data["cpus"] and data["buffer"]["verified_fraction"] == 1.0
    assert data["buffer"]["node_pages"] == {"node0": data["buffer"]["pages_total"]}
    assert "hugepage_fraction" in data["buffer"] and data["stand_in"]["node"] == 0
    assert any(w["code"] == "stand_in" for w in data["warnings"])
    assert "stand_in" in cap.err  # warnings also on stderr
    rs = [r for r in data["results"] if r["test"] == "gather"]
    assert sorted(r["params"]["record_bytes"] for r in rs) == [656, 1152]
    for r in rs:
        assert r["stats"]["n"] == 3 and len(r["samples"]) == 3 and len(r["raw"]) == 3
        assert r["derived"]["bandwidth_bytes_per_s"] > 1e7 and r["kernel"]["copy"].startswith("memcpy")
        assert r["params"]["prefetch_distance"] == 8 and r["first_call_seconds"] is not None
        assert 0 < r["on_cpu_fraction"] <= 1.05 and len(r["on_cpu_samples"]) == 3
        assert all(len(x["thread_cpu_seconds"]) == 1 and 0 < x["thread_cpu_seconds"][0] <= x["seconds"] * 1.05
                   for x in r["raw"])
    rec = load_bench(out)
    f = gather_figure(rec, 656, threads=1)
    assert f.source == "measured" and f.memory_node == 0
    assert gather_figure(rec, 900).source == "interpolated"
    # the same file again without --force
    assert main(["bench", "gather", "--node", "0", "--out", str(out)] + SMALL) == ExitCode.EXISTS


def test_latency_mlp_bandwidth_loaded_table(capsys):
    code = main(["bench", "latency", "--node", "node0", "--size", "128MiB", "--preset", "fast"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "Idle latency" in cap.out and "page_local" in cap.out and "random" in cap.out
    code = main(["bench", "bandwidth", "--threads", "1", "--format", "yaml"] + SMALL)
    cap = capsys.readouterr()
    assert code == 0 and "bandwidth_bytes_per_s" in cap.out and "Sequential" not in cap.out


def test_loaded_and_mlp_results(tmp_path, capsys):
    out = tmp_path / "l.json"
    assert main(["bench", "loaded", "--size", "128MiB", "--preset", "fast", "--format", "json", "--out", str(out)]) == 0
    rec = load_bench(out)
    delays = [r["params"]["inject_delay_iterations"] for r in rec.results]
    if len(rec.cpus) >= 2:
        assert delays[0] == 0 and delays[-1] is None and len(delays) >= 5
        assert rec.results[0]["derived"]["reader_bandwidth_bytes_per_s"] > 0
    else:
        assert delays == [None] and any(w["code"] == "loaded_needs_cpus" for w in rec.warnings)
    capsys.readouterr()


@pytest.mark.parametrize("argv,code", [
    (["bench", "latency", "--node", "9"], ExitCode.UNAVAILABLE),
    (["bench", "latency", "--node", "x1"], ExitCode.USAGE),
    (["bench", "gather", "--size", "2XB"], ExitCode.USAGE),
    (["bench", "gather", "--size", "100TiB"], ExitCode.CAPACITY),
    (["bench", "gather", "--record-bytes", "0"], ExitCode.USAGE),
    (["bench", "gather", "--size", "1MiB", "--record-bytes", "2MiB"], ExitCode.USAGE),
    (["bench", "gather", "--size", "1MiB", "--record-bytes", "4096", "--topk", "2048"], ExitCode.USAGE),
    (["bench", "gather", "--trace", "/nonexistent/trace.npy", "--size", "8MiB"], ExitCode.RECORD),
    (["bench", "gather", "--threads", "64", "--size", "8MiB"], ExitCode.USAGE),
    (["bench", "gather", "--cpus", "0-999", "--size", "8MiB"], ExitCode.USAGE),
    (["bench", "gather", "--cpus", "node7", "--size", "8MiB"], ExitCode.UNAVAILABLE),
    (["bench", "gather", "--preset", "slow", "--size", "8MiB"], ExitCode.USAGE),
    (["bench", "gather", "--format", "xml"], ExitCode.USAGE),
])
def test_bad_input_exit_codes(argv, code, capsys):
    assert main(argv) == code
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("error: ") and "hint: " in cap.err
    assert "Traceback" not in cap.err


def test_recorded_topology_refused(tmp_path, monkeypatch, capsys):
    root = unpack("ram__30-system-ram", tmp_path / "t")
    monkeypatch.setenv("SACTOOL_SYSFS_ROOT", str(root))
    assert main(["bench", "latency", "--node", "2", "--size", "8MiB"]) == ExitCode.UNAVAILABLE
    assert "record" in capsys.readouterr().err


def test_cpu_less_node_as_cpu_source(tmp_path):
    from sactool.cli.bench import parse_cpus

    topo = topology(SysfsReader(unpack("hmat-only__00-boot", tmp_path / "t")))
    with pytest.raises(TopologyError):
        parse_cpus("node1", topo)
    assert parse_cpus("node0", topo) == topo.node(0).cpus


def test_ctrl_c_keeps_finished_samples(tmp_path, capsys, monkeypatch, python_ctrl_c):
    """A real SIGINT mid-rounds. The moment is bench's own progress line, not a delay: the real
    progress reporter, whose callback also sends the signal once the third latency sample is done."""
    import sactool.render.bench as render_bench

    out = tmp_path / "partial.json"
    real = render_bench.progress_reporter
    sent = []

    def reporter():
        cb, close = real()

        def cb_then_sigint(desc, done, total):
            cb(desc, done, total)
            if desc.startswith("latency: latency/") and done >= 3 and not sent:
                sent.append(done)
                os.kill(os.getpid(), signal.SIGINT)

        return cb_then_sigint, close

    monkeypatch.setattr(render_bench, "progress_reporter", reporter)
    code = main(["bench", "latency", "--size", "128MiB", "--preset", "rigorous", "--out", str(out),
                 "--format", "json"])
    cap = capsys.readouterr()
    assert sent and code == ExitCode.INTERRUPTED, cap.err
    rec = load_bench(out)
    assert rec.complete is False and any(w["code"] == "interrupted" for w in rec.warnings)
    assert all(r["stats"]["n"] == len(r["samples"]) < 15 for r in rec.results)
    assert sum(len(r["samples"]) for r in rec.results) >= sent[0]   # every sample taken before it is kept
    assert json.loads(cap.out)["complete"] is False


def test_quick_gather_for_tune():
    rec = run_quick_gather(0, 656, 512, threads=1, size_bytes=64 << 20, seconds=0.3)
    assert [r["test"] for r in rec.results] == ["gather"] and rec.buffer["verified_fraction"] == 1.0
    f = gather_figure(rec, 656)
    assert f.source == "measured" and f.threads == 1 and f.records_per_s > 0


def test_node_all_matrix(capsys):
    assert main(["bench", "latency", "--node", "all", "--size", "128MiB", "--preset", "fast", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    topo = topology()
    mems = [n for n in topo.nodes if n.mem_total_bytes]
    assert data["matrix"] is True and len(data["pairs"]) == len(mems) * len([n for n in topo.nodes if n.cpus])
    assert {(r["cpu_node"], r["memory_node"]) for r in data["results"]} == \
        {(p["cpu_node"], p["memory_node"]) for p in data["pairs"]}


def test_plot_and_terminal_curves(tmp_path, capsys):
    from sactool.bench.record import from_data
    from sactool.render.bench import plot_bench, render_bench

    rec = load_bench_fixture()
    png = plot_bench(rec)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    render_bench(rec)
    out = capsys.readouterr().out
    assert "Loaded latency" in out and "█" in out and "Top-k gather" in out
    assert from_data(rec.data).results == rec.results


def load_bench_fixture():
    """A small synthetic record with loaded and gather results (render/plot input only)."""
    from sactool import records
    from sactool.bench.record import from_data

    def res(test, params, derived):
        return {"test": test, "key": test, "params": params, "derived": derived, "unit": "ns",
                "stats": {"median": 1, "mean": 1, "stdev": 0, "min": 1, "max": 1, "p05": 1, "p95": 1, "n": 1}}

    rs = [res("loaded", {"inject_delay_iterations": d}, {"latency_ns": lat, "reader_bandwidth_bytes_per_s": bw})
          for d, lat, bw in ((0, 400.0, 9e9), (100, 250.0, 2e9), (None, 210.0, 0.0))]
    rs += [res("gather", {"record_bytes": r, "threads": 1, "prefetch_distance": 8, "index_pattern": "uniform"},
               {"bandwidth_bytes_per_s": bw, "ns_per_record": r / bw * 1e9, "topk_step_us": 10.0})
           for r, bw in ((64, 4e9), (656, 9e9), (1152, 10e9))]
    d = records.header("bench", 1)
    d.update({"command": "all", "protocol": {"preset": "fast"}, "memory_node": "node0", "cpu_node": "node0",
              "cpus": [0], "stand_in": None, "buffer": {}, "results": rs, "warnings": [], "complete": True})
    return from_data(d)


def test_devdax_node_missing(capsys):
    assert main(["bench", "gather", "--node", "dax9.0", "--size", "8MiB"]) == ExitCode.UNAVAILABLE
    assert "dax9.0" in capsys.readouterr().err
