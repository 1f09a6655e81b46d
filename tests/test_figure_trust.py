"""One cache-and-noise rule for every figure that enters tune (sactool.bench.trust): bench records,
fleet records, GPU records and traces are flagged in tune's output and the profile when measured
inside the last-level cache or descheduled, with the direction of the error in words.

The records are real ones measured here (the session's quick gather), with the one field the rule
reads about the measuring machine set to another machine's figure (a 480 MiB L3, as Xeon 6 parts
report; a 1 MiB one): the test never reads this host's cache."""

from __future__ import annotations

import json

import pytest

from sactool.bench import trust
from sactool.cli import main
from sactool.profile import load_profile

MiB = 1 << 20


def _with_llc(data: dict, llc: int | None) -> dict:
    rule = dict(data.get("buffer_rule") or {})
    rule["llc"] = None if llc is None else {"bytes": llc, "level": 3, "instances": 1,
                                            "source": "sys/devices/system/cpu/cpu0/cache/index3/size"}
    return {**data, "buffer_rule": rule, "llc_bytes": llc or data.get("llc_bytes")}


def _tune(tmp_path, machine, rec: dict, capsys) -> tuple[dict, object, str]:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(rec))
    out = tmp_path / "p.yaml"
    rc = main(["tune", "--sysfs-root", str(machine("this-machine")), "--context", "4k", "--steps", "4", "--replicates",
               "1", "--tp", "1", "--pool-bytes", "1GiB", "--gpu-kv-budget", "4GiB", "--bench", str(path),
               "--format", "json", "--out", str(out)])
    o, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(o), load_profile(out), " ".join(err.split())


def test_tune_bench_on_a_record_inside_the_cache_says_its_figures_may_come_from_the_cache(
        tmp_path, machine, fast_bench_record, capsys):
    """A 64 MiB record measured under a 480 MiB L3: flagged (overstated); under a 1 MiB one: not."""
    data = json.loads(fast_bench_record.read_text())
    assert data["buffer"]["size_bytes"] == 64 * MiB
    res, prof, err = _tune(tmp_path, machine, _with_llc(data, 480 * MiB), capsys)
    codes = [w["code"] for w in res["warnings"]]
    assert "bench_in_cache" in codes
    w = next(w for w in prof.predictions["warnings"] if w["code"] == "bench_in_cache")
    assert "under 8x the 480.00 MiB last-level cache" in w["message"] and "overstated" in w["message"]
    assert "up to 100% of the reads may come from the cache" in w["message"]
    assert prof.bench["figure_flags"] and prof.bench["figure_flags"][0]["code"] == "bench_in_cache"
    assert "may come from the cache" in err          # in tune's own output too
    (tmp_path / "small").mkdir()
    res, prof, _ = _tune(tmp_path / "small", machine, _with_llc(data, 1 * MiB), capsys)
    assert "bench_in_cache" not in [w["code"] for w in res["warnings"]]
    assert "bench_in_cache" not in [f["code"] for f in prof.bench["figure_flags"]]


def test_tune_bench_on_a_descheduled_record_says_the_bandwidth_is_understated(
        tmp_path, machine, fast_bench_record, capsys):
    data = _with_llc(json.loads(fast_bench_record.read_text()), 1 * MiB)
    for r in data["results"]:
        r["on_cpu_fraction"] = 0.41
    res, prof, err = _tune(tmp_path, machine, data, capsys)
    w = next(w for w in res["warnings"] if w["code"] == "bench_descheduled")
    n = sum(r["test"] == "gather" for r in data["results"])
    assert f"{n} of {n} results" in w["message"] and "41% of the sample time" in w["message"]
    assert "understated" in w["message"] and "inflated" not in w["message"]
    assert any(f["code"] == "bench_descheduled" for f in prof.bench["figure_flags"])


def test_a_gather_trace_smaller_than_the_cache_is_flagged_whatever_the_buffer():
    """A trace's working set is its distinct records, not the buffer it indexes."""
    r = {"test": "gather", "key": "gather/656B/1t/d12/trace", "unit": "bytes_per_s",
         "params": {"record_bytes": 656, "indices": 2000, "footprint_bytes": 27 * MiB}}
    (w,) = trust.flags(r, llc_bytes=480 * MiB, buffer_bytes=4 << 30)
    assert w["code"] == "in_cache" and w["message"].startswith("gather/656B/1t/d12/trace: read a 27.00 MiB")
    assert "up to 100%" in w["message"] and "overstated" in w["message"]
    assert trust.flags(r, llc_bytes=1 * MiB, buffer_bytes=4 << 30) == []
    # a record from before footprints were recorded: the expected distinct records of its uniform stream
    old = {**r, "params": {"record_bytes": 656, "indices": 10_000_000}}
    assert trust.working_set_bytes(old, 256 * MiB) == pytest.approx(256 * MiB, rel=0.01)
    lat = {"test": "latency", "unit": "ns", "key": "latency/random", "on_cpu_fraction": 0.5, "params": {}}
    codes = {w["code"]: w["message"] for w in trust.flags(lat, llc_bytes=480 * MiB, buffer_bytes=256 * MiB)}
    assert "latency may be understated" in codes["in_cache"] and "latency is overstated" in codes["descheduled"]


def test_gpu_records_follow_the_same_rule():
    data = {"llc": {"bytes": 480 * MiB}, "buffer": {"size_bytes": 128 * MiB},
            "results": [{"test": "gpu_gather", "key": "gpu_gather/656B/1blk", "unit": "bytes_per_s",
                         "params": {"record_bytes": 656}}]}
    (w,) = trust.record_flags(data, where="bench record g.json")
    assert w["code"] == "bench_in_cache" and "1 of 1 results" in w["message"] and "128.00 MiB" in w["message"]


def test_fleet_records_are_flagged_per_host():
    """Hosts a (ranks 0, 1) and b (rank 2) of test_fleet's record: a's two 128 MiB buffers share a
    480 MiB cache (flagged), b's rank was descheduled."""
    from test_fleet import _fleet_record

    from sactool.fleet.split import plan, pool_source

    rec = _fleet_record(top=4, world=4)
    for r in rec["fleet"]["ranks"]:
        r.update(size_bytes=(128 if r["host"] == "a" else 8192) * MiB, llc_bytes=480 * MiB)
    rec["fleet"]["sweep"][0]["params"]["indices"] = 50_000_000
    rec["fleet"]["sweep"][0]["per_rank"][2]["on_cpu_fraction"] = 0.5
    shares, _ = plan(rec, 656, path="f.json")
    by = {s.host: s for s in shares}
    assert [w["code"] for w in by["a"].flags] == ["bench_in_cache"] and "256.00 MiB in all" in by["a"].flags[0]["message"]
    assert [w["code"] for w in by["b"].flags] == ["bench_descheduled"] and "understated" in by["b"].flags[0]["message"]
    assert by["c"].flags == ()
    gather = pool_source(by["a"]).gather
    assert gather.warnings == by["a"].flags and gather.info["figure_flags"][0]["code"] == "bench_in_cache"
