"""The bench record: load/upgrade/refuse, and gather figures for measured and derived sizes."""

from __future__ import annotations

import json

import pytest

from sactool import records
from sactool.bench import gather_figure, lines_touched, load_bench
from sactool.bench.record import from_data
from sactool.errors import RecordError, UsageError


def gather_result(R, threads, ns_per_record, prefetch=8, pattern="uniform", node="node2"):
    rps = 1e9 / ns_per_record
    return {"test": "gather", "memory_node": node, "params": {"record_bytes": R, "threads": threads,
            "prefetch_distance": prefetch, "index_pattern": pattern},
            "stats": {"median": rps * R, "mean": rps * R, "stdev": 0.0, "min": rps * R, "max": rps * R,
                      "p05": rps * R, "p95": rps * R, "n": 5}, "derived": {"ns_per_record": ns_per_record, "records_per_s": rps,
                                           "bandwidth_bytes_per_s": rps * R}}


def make_record(results, **top):
    d = records.header("bench", 1)
    d.update({"memory_node": "node2", "cpu_node": "node0", "cpus": [0, 1], "stand_in": None, "buffer": {},
              "results": results, "warnings": [], "complete": True})
    d.update(top)
    return from_data(d)


def test_lines_touched():
    assert lines_touched(64) == 1 and lines_touched(656) == 11 and lines_touched(1152) == 18
    assert lines_touched(100) == 2.5  # offsets 0,36,8,44,… cycle over 16 records: 8 touch 2 lines, 8 touch 3
    assert lines_touched(4096) == 64


def test_measured_and_best_prefetch():
    rec = make_record([gather_result(656, 2, 50.0, prefetch=8), gather_result(656, 2, 40.0, prefetch=16),
                       gather_result(656, 1, 90.0)])
    f = gather_figure(rec, 656)
    assert f.source == "measured" and f.threads == 2 and f.ns_per_record == 40.0
    assert f.bandwidth_bytes_per_s == pytest.approx(656 * 1e9 / 40.0) and f.memory_node == 2
    assert "prefetch 16" in f.detail
    assert gather_figure(rec, 656, threads=1).ns_per_record == 90.0
    g = gather_figure(rec, 656, threads=4)
    assert g.threads == 2 and "4 threads not measured" in g.detail


def test_interpolated_by_cache_lines():
    rec = make_record([gather_result(256, 1, 40.0), gather_result(1152, 1, 180.0)])  # 10 ns/line both
    f = gather_figure(rec, 656)
    assert f.source == "interpolated" and f.ns_per_record == pytest.approx(11 * 10.0)
    assert "256 B" in f.detail and "1152 B" in f.detail
    rec2 = make_record([gather_result(256, 1, 40.0), gather_result(1152, 1, 360.0)])  # 10 → 20 ns/line
    c = 10 + (20 - 10) * (11 - 4) / (18 - 4)
    assert gather_figure(rec2, 656).ns_per_record == pytest.approx(c * 11)


def test_extrapolated_is_marked():
    rec = make_record([gather_result(656, 1, 110.0)])
    f = gather_figure(rec, 4096)
    assert f.source == "extrapolated" and f.ns_per_record == pytest.approx(10.0 * 64)
    assert "outside the measured sizes" in f.detail


def test_uniform_preferred_and_other_nodes_ignored():
    rec = make_record([gather_result(656, 1, 100.0, pattern="clustered"), gather_result(656, 1, 200.0),
                       gather_result(656, 1, 10.0, node="node0")])
    assert gather_figure(rec, 656).ns_per_record == 200.0


def test_no_gather_results_and_bad_size():
    stats = {"median": 100.0, "mean": 100.0, "stdev": 0.0, "min": 100.0, "max": 100.0, "p05": 100.0, "p95": 100.0,
             "n": 3}
    rec = make_record([{"test": "latency", "params": {}, "stats": stats, "derived": {"latency_ns": 100}}])
    with pytest.raises(RecordError):
        gather_figure(rec, 656)
    with pytest.raises(UsageError):
        gather_figure(make_record([gather_result(656, 1, 1.0)]), 0)


def test_load_roundtrip_newer_and_corrupt(tmp_path):
    rec = make_record([gather_result(656, 1, 100.0)])
    p = tmp_path / "b.json"
    p.write_text(json.dumps(rec.data))
    back = load_bench(p)
    assert back.memory_node == 2 and back.cpus == (0, 1) and gather_figure(back, 656).source == "measured"
    newer = dict(rec.data, schema_version=99)
    p.write_text(json.dumps(newer))
    with pytest.raises(RecordError) as e:
        load_bench(p)
    assert "upgrade sactool" in e.value.hint
    p.write_text("{not json")
    with pytest.raises(RecordError):
        load_bench(p)
    p.write_text(json.dumps(dict(rec.data, results="x")))
    with pytest.raises(RecordError):
        load_bench(p)
    p.write_text(json.dumps(dict(rec.data, kind="profile")))
    with pytest.raises(RecordError):
        load_bench(p)
    with pytest.raises(RecordError):
        load_bench(tmp_path / "missing.json")


# ---- refusals (the schema, sactool/bench/record.py): where, which field, the hint ----------------
def _damaged(damage):
    d = make_record([gather_result(656, 1, 100.0), gather_result(1152, 2, 150.0)]).data
    d = json.loads(json.dumps(d))
    d["results"][1]["key"] = "gather/1152B/2t"
    damage(d)
    return d


HINT = "the record was edited or damaged: re-run 'sactool bench … --out'"
R1 = "bench record: results[1] (gather/1152B/2t)"


@pytest.mark.parametrize("damage, message, hint", [
    (lambda d: d["results"][1].update(test=7), "bench record: results[1] (gather/1152B/2t) has no test name", HINT),
    (lambda d: d["results"][1].pop("params"), f"{R1} has no 'params' mapping", HINT),
    (lambda d: d["results"][1].update(stats=[1]), f"{R1} has no 'stats' mapping", HINT),
    (lambda d: d["results"][1].pop("derived"), f"{R1} has no 'derived' mapping", HINT),
    (lambda d: d["results"][1]["stats"].pop("p05") and d["results"][1]["stats"].pop("n"), f"{R1}: stats lacks p05, n", HINT),
    (lambda d: d["results"][1]["stats"].update(mean=float("nan")), f"{R1}: stats.mean is nan, not a finite number", HINT),
    (lambda d: d["results"][1]["stats"].update(max=True), f"{R1}: stats.max is True, not a finite number", HINT),
    (lambda d: d["results"][1]["stats"].update(n=2.5), f"{R1}: stats.n is 2.5, not a finite number >= 1", HINT),
    (lambda d: d["results"][1]["derived"].update(extra_ns="x"), f"{R1}: derived.extra_ns is 'x', not a finite number", HINT),
    (lambda d: d["results"][1]["params"].update(threads=0), f"{R1}: params.threads is 0, not a positive integer", HINT),
    (lambda d: d["results"][1]["derived"].update(ns_per_record=-1.0),
     f"{R1}: derived.ns_per_record is -1.0, not a positive number", HINT),
    (lambda d: d.update(results={"a": 1}), "bench record has no valid 'results' list", "re-run 'sactool bench'"),
    (lambda d: d.pop("results"), "bench record has no valid 'results' list", "re-run 'sactool bench'"),
    (lambda d: d["results"][0].pop("test"), "bench record has no valid 'results' list", "re-run 'sactool bench'"),
    (lambda d: d.update(cpus=[0, "one"]), "bench record: cpus holds 'one', not a CPU number", HINT),
    (lambda d: d.update(cpus="0-3"), "bench record: cpus is '0-3', not a list of CPU numbers", HINT),
])
def test_each_refusal_names_the_result_and_field(damage, message, hint):
    with pytest.raises(RecordError) as e:
        from_data(_damaged(damage))
    assert (e.value.message, e.value.hint) == (message, hint)
    assert e.value.exit_code == 4


def test_gpu_gather_figures_are_checked_and_other_tests_not():
    g = gather_result(656, 1, 100.0)
    gpu = dict(g, test="gpu_gather", params={"record_bytes": 656, "topk": 8, "blocks": 1, "threads_per_block": 0},
               derived={"bandwidth_bytes_per_s": 1e9, "topk_step_us": 3.0, "records_per_s": 1e6})
    with pytest.raises(RecordError, match=r"params.threads_per_block is 0, not a positive integer"):
        make_record([gpu])
    # a latency result has no gather params; an empty derived block (an interrupted gather) is kept
    lat = dict(g, test="latency", params={}, derived={"latency_ns": 90.0})
    rec = make_record([lat, dict(g, derived={})])
    assert rec.results[0]["derived"] == {"latency_ns": 90.0} and rec.cpus == (0, 1) and rec.complete


def test_what_the_schema_does_not_read_is_kept_as_stored():
    d = _damaged(lambda d: d["results"][0].update(raw=[{"seconds": 1}], on_cpu_fraction=0.97))
    d["results"][0]["stats"]["extra"] = "kept"
    rec = from_data(json.loads(json.dumps(d)))
    assert rec.results[0]["raw"] == [{"seconds": 1}] and rec.results[0]["stats"]["extra"] == "kept"
    assert rec.data["results"] == d["results"]


def test_schema_2_gathers_are_upgraded_with_their_working_set():
    """A schema-2 gather repeated one stored stream: a recorded footprint is kept (and said to be the
    stream's), a missing one is the expected distinct records of its uniform stream (said so); nothing
    recorded what else ran (null), nor a lock."""
    with_fp = gather_result(656, 1, 90.0)
    with_fp["params"].update(indices=2000, footprint_bytes=1_000_000)
    without = gather_result(1152, 1, 90.0)
    without["params"].update(indices=100_000)
    d = records.header("bench", 2)
    d.update({"memory_node": 2, "cpu_node": 0, "cpus": [0], "buffer": {"size_bytes": 256 << 20},
              "results": [with_fp, without], "warnings": [], "complete": True})
    rec = from_data(d)
    a, b = rec.results
    assert rec.data["schema_version"] == 3 and rec.data["measurement_lock"] is None and rec.data["measured"] is None
    assert a["params"]["footprint_bytes"] == 1_000_000 and a["params"]["index_shift"] == "none"
    assert "counted when measured" in a["params"]["footprint_source"] and a["other_cpu_busy"] is None
    n = (256 << 20) // 1152
    assert b["params"]["footprint_bytes"] == pytest.approx(n * (1 - pytest.importorskip("math").exp(-100_000 / n)) * 1152,
                                                           rel=1e-6)
    assert "estimated on upgrade from schema 2" in b["params"]["footprint_source"]
    assert from_data(rec.data).results == rec.results           # a schema-3 record loads as it is
