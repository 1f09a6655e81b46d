"""sactool tune / profile in-process: exit codes, stdout purity, bad input, resume after Ctrl-C.

Small runs (one 16K context, few decode steps) keep this file fast; the gather figure comes from one
real quick measurement on node 0 (the stand-in here), saved as a bench record once per module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sactool.bench.sizing import CACHE_MULTIPLE
from sactool.cli import main
from sactool.errors import ExistsError, Interrupted
from sactool.profile import load_profile, settings_fields
from sactool.records import read_jsonl

FAST_ARGS = ["--context", "4k", "--steps", "6", "--replicates", "2"]


@pytest.fixture
def bench_file(fast_bench_record) -> Path:
    return fast_bench_record


@pytest.fixture
def FAST(machine) -> list[str]:
    """Small runs whose pool is sized from a recorded node 0 (MemFree as recorded), not from this
    host's momentary free memory."""
    return [*FAST_ARGS, "--sysfs-root", str(machine("this-machine"))]


def test_tune_writes_a_valid_profile_json_on_stdout(tmp_path, bench_file, capsys, FAST):
    out = tmp_path / "p.yaml"
    rc = main(["tune", *FAST, "--bench", str(bench_file), "--out", str(out), "--format", "json"])
    o, e = capsys.readouterr()
    assert rc == 0, e
    data = json.loads(o)                       # stdout is only the JSON document
    assert data["path"] == str(out)
    assert data["summary"]["stand_in"] is True        # no CXL here: node 0 stood in, and it says so
    p = load_profile(out)
    assert set(p.provenance) == set(settings_fields())      # every settings value has a provenance
    assert p.hisparse.device_buffer_size >= 2048 and p.sglang.max_total_tokens >= p.hisparse.device_buffer_size
    assert p.bench["digest"].startswith("sha256:") and p.pool.stand_in
    row = p.predictions["per_context"][0]
    assert row["context_tokens"] == 4096 and 0 < row["hit_rate"] <= 1
    assert row["rdma_full_prefix_bytes_per_request"] == 4096 * 656 * 61
    assert not out.with_name(out.name + ".points.jsonl").exists()   # removed once the profile is written
    # validate and show
    assert main(["profile", "validate", str(out)]) == 0
    o, e = capsys.readouterr()
    assert "valid profile" in o and e == ""
    assert main(["profile", "show", str(out), "--format", "yaml"]) == 0
    o, _ = capsys.readouterr()
    assert yaml.safe_load(o)["hisparse"]["device_buffer_size"] == p.hisparse.device_buffer_size
    # an existing profile is not overwritten without --force
    assert main(["tune", *FAST, "--bench", str(bench_file), "--out", str(out)]) == 5
    o, e = capsys.readouterr()
    assert o == "" and "already exists" in e and "--force" in e


@pytest.mark.parametrize("args, code, text", [
    (["--model", "nope"], 2, "known models: deepseek-v3.2"),
    (["--context", "200k"], 2, "max_position_embeddings"),
    (["--context", "1k"], 2, "shorter than top_k"),
    (["--tp", "8", "--attn-dp", "3"], 2, "must divide"),
    (["--concurrency", "lots"], 2, "not a number"),
    (["--kv-dtype", "int4"], 2, "'int4' is not one of 'fp8', 'bf16'"),
    (["--gpu", "a100"], 2, "'a100' is not one of"),
    (["--gpu-kv-budget", "100MiB"], 6, "too small for one request with top_k=2048"),
    (["--concurrency", "100000"], 6, "of pool memory"),
    (["--trace", "missing.npz"], 4, "does not exist"),
])
def test_bad_input(tmp_path, bench_file, capsys, FAST, args, code, text):
    rc = main(["tune", *FAST, "--bench", str(bench_file), "--out", str(tmp_path / "p.yaml"), *args])
    o, e = capsys.readouterr()
    assert rc == code, e
    assert o == "" and text in e and "hint:" in e and "Traceback" not in e


def test_corrupt_and_foreign_bench(tmp_path, bench_file, capsys, FAST):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["tune", *FAST, "--bench", str(bad), "--out", str(tmp_path / "a.yaml")]) == 4
    assert "corrupt" in capsys.readouterr().err
    data = json.loads(bench_file.read_text())
    data["machine"]["hostname"] = "elsewhere"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    assert main(["tune", *FAST, "--bench", str(other), "--strict", "--out", str(tmp_path / "b.yaml")]) == 4
    assert "elsewhere" in capsys.readouterr().err
    assert main(["tune", *FAST, "--bench", str(other), "--out", str(tmp_path / "c.yaml")]) == 0
    o, e = capsys.readouterr()
    assert "warning [bench_other_machine] bench record" in e and "elsewhere" in e and "elsewhere" not in o


def test_unwritable_output(tmp_path, bench_file, capsys, FAST):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["tune", *FAST, "--bench", str(bench_file), "--out", str(f / "p.yaml")]) == 1
    assert "not a directory" in capsys.readouterr().err


def test_interrupt_then_resume(tmp_path, bench_file, machine):
    from sactool.tune.api import TuneOptions, tune

    out = tmp_path / "p.yaml"
    points = out.with_name(out.name + ".points.jsonl")
    # the pool's capacity comes from a recorded machine (this-machine: node 0, MemFree as recorded),
    # not from this host's momentary free memory, so both runs search the same buffer sizes
    root = machine("this-machine")
    opts = TuneOptions(contexts=(4096, 8192), concurrency=8, attn_dp=8, gpu_kv_budget_bytes=10 << 30, steps=6,
                       replicates=2, out=out, bench=bench_file, sysfs_root=root)
    seen: list[tuple[str, int]] = []

    def ctrl_c(label, done, total):
        seen.append((label, done))
        if label == "simulate" and done == 2:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as e:
        tune(opts, progress=ctrl_c)
    assert "--resume" in e.value.hint
    kept = read_jsonl(points)
    assert [p["kind"] for p in kept].count("sim") == 2
    with pytest.raises(ExistsError):          # neither --resume nor --force: the points are not thrown away
        tune(opts)
    again: list[tuple[str, int, int]] = []
    from dataclasses import replace

    r = tune(replace(opts, resume=True), progress=lambda lab, d, t: again.append((lab, d, t)))
    assert r.path == out and out.exists() and not points.exists()
    # the two finished simulations were not redone
    sims = [a for a in again if a[0] == "simulate"]
    assert sims and sims[-1][2] == 2


def test_trace_replay_and_corrupt_trace(tmp_path, bench_file, capsys, machine):
    from sactool.workload import generate_topk, save_trace

    tr = tmp_path / "t.npz"
    save_trace(tr, generate_topk(4096, 6, 61, 2048, seed=3), 4096, model="deepseek-v3.2", source="test")
    out = tmp_path / "p.yaml"
    root = str(machine("this-machine"))
    assert main(["tune", "--trace", str(tr), "--bench", str(bench_file), "--sysfs-root", root, "--out", str(out),
                 "-f", "json"]) == 0
    o, _ = capsys.readouterr()
    d = json.loads(o)
    assert d["profile"]["request"]["trace"] == str(tr)
    assert [r["context_tokens"] for r in d["summary"]["per_context"]] == [4096]
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip")
    assert main(["tune", "--trace", str(bad), "--bench", str(bench_file), "--sysfs-root", root,
                 "--out", str(tmp_path / "q.yaml")]) == 4
    assert "corrupt" in capsys.readouterr().err


def test_recorded_cxl_machine(tmp_path, bench_file, capsys, machine):
    """A recorded QEMU tree with CXL node2 (256 MiB): the pool goes there, not to a stand-in; the
    bench record measured node0 of this VM, which warns (or is refused with --strict)."""
    root = machine("ram__30-system-ram")
    args = ["tune", "--sysfs-root", str(root), "--tp", "1", "--context", "4k", "--gpu-kv-budget", "10GiB",
            "--steps", "6", "--replicates", "1"]
    assert main([*args, "--out", str(tmp_path / "a.yaml")]) == 3          # a recording cannot be measured
    assert "recording" in capsys.readouterr().err
    assert main([*args, "--bench", str(bench_file), "--strict", "--out", str(tmp_path / "b.yaml")]) == 4
    capsys.readouterr()
    out = tmp_path / "c.yaml"
    assert main([*args, "--bench", str(bench_file), "--out", str(out)]) == 0
    o, e = capsys.readouterr()
    assert "warning [bench_other_node] bench record" in " ".join(e.split())
    p = load_profile(out)
    assert p.pool.nodes == (2,) and p.pool.rank_targets == ("node2",) and not p.pool.stand_in
    row = p.predictions["per_context"][0]
    # 256 MiB hold one 4K request (4160 tokens x 40,016 B = 166 MB), not two
    assert row["max_concurrency"] == 1 and row["fits"]


@pytest.mark.slow   # tune's own quick gathers at the size it picks here (8x the LLC: GiBs, per page kind)
def test_pool_page_size_is_chosen_by_measurement(tmp_path, capsys):
    """Without --bench tune measures the gather on each page kind node 0 can give (4 KiB, THP;
    hugetlb where reserved), rounds interleaved, and records the pick with its figures. The pool's
    capacity is pinned (--pool-bytes), so the plan does not follow this host's momentary free memory."""
    out = tmp_path / "p.yaml"
    rc = main(["tune", *FAST_ARGS, "--pool-bytes", "2GiB", "--gpu-kv-budget", "10GiB", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    p = load_profile(out)
    page = p.predictions["pool_page_size"]
    samples = page["samples_bytes_per_s"]
    assert {"none", "thp"} <= set(samples) and all(len(v) == 2 and min(v) > 0 for v in samples.values())
    assert p.pool.hugepages == page["chosen"] and p.pool.hugepages in samples
    assert p.provenance["pool.hugepages"].source == "measured" and "GB/s" in p.provenance["pool.hugepages"].detail
    assert p.pool.capacity_bytes == 2 << 30
    # no --gather-size: the buffer is sized from this machine (never refused), rule and figures recorded
    rule = p.bench["buffer_rule"]
    assert not rule["given"] and rule["size_bytes"] == p.bench["buffer_bytes"] >= 256 << 20
    if rule["llc"] is not None:
        assert rule["llc"]["source"].endswith("/size") and "last-level cache" in rule["rule"]
        from sactool.bench.sizing import ALIGN_BYTES

        want = max(256 << 20, CACHE_MULTIPLE * rule["llc"]["bytes"] + ALIGN_BYTES)   # whole records reach the multiple
        assert rule["size_bytes"] == want or "most the node holds" in rule["rule"]


def test_a_page_kind_other_than_thp_wins_only_when_faster_in_every_paired_round():
    """The page-size rule on its own (the measured pipeline around it: the slow test above)."""
    from sactool.tune.pagesize import choose

    assert choose({"none": [3.0, 1.0], "thp": [2.0, 2.0]}, {}).kind == "thp"
    assert choose({"none": [3.0, 3.0], "thp": [2.0, 2.0]}, {}).kind == "none"
    assert choose({"none": [1.0, 1.0], "thp": [2.0, 2.1]}, {}).kind == "thp"


def test_tune_warnings_are_one_line_per_kind(tmp_path, bench_file, capsys, machine):
    """Two bench records from another host (two ``bench_other_machine``), two contexts the pool
    cannot hold (two ``context_does_not_fit``): one stderr line per kind, as bench prints them; the
    JSON result keeps every warning."""
    data = json.loads(bench_file.read_text())
    data["machine"]["hostname"] = "elsewhere"
    recs = []
    for name in ("a.json", "b.json"):
        recs += ["--bench", str(tmp_path / name)]
        (tmp_path / name).write_text(json.dumps(data))
    args = ["tune", "--sysfs-root", str(machine("this-machine")), "--context", "4k,64k,128k", "--steps", "6",
            "--replicates", "1", "--tp", "1", "--pool-bytes", "1GiB", "--gpu-kv-budget", "4GiB", *recs,
            "--format", "json", "--out", str(tmp_path / "p.yaml")]
    assert main(args) == 0
    out, err = capsys.readouterr()
    kept = [w["code"] for w in json.loads(out)["warnings"]]
    assert kept.count("bench_other_machine") == 2 and kept.count("context_does_not_fit") == 2
    lines = " ".join(err.split()).split("warning [")[1:]   # rich wraps lines at the terminal width
    assert len(lines) == len(set(kept)), err
    ctx = [ln for ln in lines if "tokens" in ln and "fits" in ln]
    assert len(ctx) == 1 and "65536" in ctx[0] and "131072" in ctx[0]     # both contexts, one line
    other = [ln for ln in lines if "elsewhere" in ln]
    assert len(other) == 1 and "a.json" in other[0] and "b.json" in other[0]
    # the same message repeated (each host of a fleet) is one line saying how often
    from sactool.records import warning
    from sactool.render.tune import warning_lines

    same = [warning("stand_in", "node0 stands in", "DRAM figures")] * 3
    assert warning_lines(same) == [("stand_in", "node0 stands in (3 times)", "DRAM figures")]
    many = [warning("x", f"m{i}") for i in range(5)]
    assert warning_lines(many) == [("x", "m0; and 4 more of this kind (x: see --format json)", None)]


ABOVE_ANY_CACHE = "1280MiB"
"""A quick-gather size above every last-level cache CPUs report (at most 1.1 GiB: EPYC 3D V-Cache), so
tune accepts it on any host without the test reading the host's cache; 8x the cache is not needed."""


def test_gather_size_too_small_to_measure_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    # smaller than one top-k step of distinct records: refused with the options, before the probe
    assert main(["tune", *FAST_ARGS, "--gather-size", "1MiB", "--out", str(out)]) == 2
    o, err = capsys.readouterr()
    assert o == "" and err.startswith("error: --gather-size 1.00 MiB is too small to measure a gather: one top-k "
                                      "step reads 2048 distinct 656 B records") and "hint: drop --gather-size" in err
    assert "256MiB (the default)" not in err
    assert len(err.strip().splitlines()) == 2   # one error line, one hint line
    # inside the last-level cache of the CPUs that would gather (every CPU sactool runs on reports
    # more than 2 MiB): it would measure the cache — exit 3, the hardware makes it meaningless
    assert main(["tune", *FAST_ARGS, "--gather-size", "2MiB", "--out", str(out)]) == 3
    o, err = capsys.readouterr()
    assert o == "" and "last-level cache" in err and "would read the cache, not the pool" in err
    assert "hint: drop --gather-size: the default is sized from this machine" in err
    assert not out.exists() and not list(tmp_path.glob("*.points.jsonl"))
    assert main(["tune", *FAST_ARGS, "--gather-size", "64", "--out", str(out)]) == 2   # the one size parser: a unit
    assert "has no unit" in capsys.readouterr().err


@pytest.mark.slow   # quick gathers over a 1.25 GiB buffer, on each page kind
def test_gather_size_sizes_the_quick_gathers(tmp_path, capsys):
    """A given buffer is measured as given and recorded with the rule: warned exactly when it is under
    8x the gathering CPUs' cache (as the profile's rule block reads it, not as the test does)."""
    out = tmp_path / "p.yaml"
    size = 1280 << 20
    rc = main(["tune", "--context", "4k", "--steps", "4", "--replicates", "1", "--tp", "1", "--pool-bytes", "1GiB",
               "--gpu-kv-budget", "10GiB", "--gather-size", ABOVE_ANY_CACHE, "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    p = load_profile(out)
    assert p.bench["buffer_bytes"] == size and p.bench["source"] == "quick"
    rule = p.bench["buffer_rule"]
    assert rule["given"] and rule["size_bytes"] == size and "--gather-size" in p.bench["detail"]
    warned = "gather_size_cache" in {w["code"] for w in p.predictions["warnings"]}
    assert warned == (rule["llc"] is not None and size < CACHE_MULTIPLE * rule["llc"]["bytes"])


@pytest.fixture(scope="module")
def tuned_profile(tmp_path_factory, fast_bench_record) -> Path:
    """A profile tune wrote (one small run per module), for the whole-profile checks."""
    from fixtures.trees import unpack

    tmp = tmp_path_factory.mktemp("tuned")
    out = tmp / "p.yaml"
    assert main(["tune", *FAST_ARGS, "--sysfs-root", str(unpack("this-machine", tmp / "tree")),
                 "--bench", str(fast_bench_record), "--out", str(out), "-q"]) == 0
    return out


@pytest.mark.parametrize("percent", [15, 25, 50, 55, 95])
def test_a_tuned_profile_cut_short_is_refused(tuned_profile, tmp_path, capsys, percent):
    """A profile tune wrote, cut to part of its bytes (a full disk, an interrupted copy), is refused
    with exit 4 by profile validate and by serve --dry-run — it passed as "valid profile … 0
    provenance entries" when the cut fell between sections (issue 22)."""
    data = tuned_profile.read_bytes()
    cut = tmp_path / "cut.yaml"
    cut.write_bytes(data[:len(data) * percent // 100])
    assert main(["profile", "validate", str(cut)]) == 4
    _, err = capsys.readouterr()
    assert err.startswith("error: ") and "hint: " in err and "Traceback" not in err
    assert main(["serve", "--profile", str(cut), "--dry-run", "--", "--model-path", "x"]) == 4
    capsys.readouterr()


@pytest.mark.parametrize("field, value, message", [
    (("sglang", "max_running_requests"), 10 ** 30, "sglang.max_running_requests: 1000000000000000000000000000000 "
                                                   "is more than"),
    (("hisparse", "host_to_device_ratio"), 1000, "hisparse.host_to_device_ratio: 1000 asks"),
    (("model", "hf_id"), "--enable-hierarchical-cache", "model.hf_id: '--enable-hierarchical-cache' would reach"),
    (("bench", "ns_per_record"), float("nan"), "bench.ns_per_record: must be a finite number, got nan"),
    (("predictions", "fetch_time_per_token_s"), float("inf"), "must be a finite number, got inf"),
])
def test_profile_validated_as_a_whole(tuned_profile, tmp_path, capsys, field, value, message):
    """Numbers finite and within what a machine holds, values that cannot become SGLang flags (issue 22):
    each case was "valid profile" before."""
    d = yaml.safe_load(tuned_profile.read_text())
    d[field[0]][field[1]] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    assert main(["profile", "validate", str(bad)]) == 4
    _, err = capsys.readouterr()
    assert message in err and "hint: " in err
    good = tmp_path / "good.yaml"
    good.write_text(tuned_profile.read_text())
    assert main(["profile", "validate", str(good)]) == 0
    capsys.readouterr()


def test_time_left_is_measured_and_said_once_per_phase():
    # the second item's duration x the items left, said once per phase, only where it is a minute or more
    from sactool.render.tune import _Estimates

    said, now = [], [0.0]
    est = _Estimates(said.append, lambda: now[0])
    for done, t in ((1, 10.0), (2, 18.0), (3, 26.0)):
        now[0] = t
        est("gather", done, 100000)
    assert len(said) == 1 and "2 of 100000 done, 8 s each" in said[0] and "about 9 d 6 h left" in said[0]
    for done, t in ((1, 30.0), (2, 31.0)):   # 1 s x 10 left: no line
        now[0] = t
        est("simulate", done, 12)
    assert len(said) == 1


def test_many_replicates_say_their_cost_before_the_work(tmp_path):
    # tune --replicates 1000 started measuring with no word of the 20 min its gathers take at least
    # (past a day of measuring it is refused: tests/test_input_bounds.py)
    import signal
    import subprocess
    import sys

    from fixtures.progress import default_sigint

    out = tmp_path / "p.yaml"
    p = subprocess.Popen([sys.executable, "-c", "from sactool.entry import main; main()", "tune", "--context", "4k",
                          "--steps", "6", "--replicates", "1000", "--pool-bytes", "1GiB", "--out", str(out)],
                         stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    first = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    assert p.wait(timeout=60) == 130, rest
    assert first.startswith("tune: 1000 replicates measure for at least 20 min"), first
    assert not out.exists()
