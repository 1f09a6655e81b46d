"""``sactool tune --observed`` (issue 31): the workload refit so the hot-buffer simulation reproduces a
running engine's miss rate at the buffer it ran — from vLLM 0.34.0's exposition (recorded from the
installed vLLM's metric definitions) and from a ``sactool watch`` record — the profile records what it
was refit on, and every tune shows its choice with the misses ×2/×5/×10."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
BENCH = HERE / "fixtures" / "bench" / "node0-gather.json"
VLLM = HERE / "fixtures" / "engine" / "vllm-0.34.0-hisparse.prom"


def _tune(machine, tmp_path, *extra, name="p.yaml", rc=0, capsys=None):
    from sactool.cli import main

    out = tmp_path / name
    code = main(["-q", "tune", "--model", "deepseek-v3.2", "--sysfs-root", str(machine("this-machine")), "--bench",
                 str(BENCH), "--context", "16k", "--tp", "2", "--gpu-kv-budget", "20GiB", "--replicates", "1",
                 "--steps", "32", "--out", str(out), "--format", "json", *extra])
    assert code == rc, capsys.readouterr().err if capsys else code
    return yaml.safe_load(out.read_text()) if rc == 0 else None


def test_refit_reproduces_the_observed_miss_rate_at_the_running_buffer(machine, tmp_path, capsys):
    base = _tune(machine, tmp_path, name="base.yaml", capsys=capsys)
    capsys.readouterr()
    p = _tune(machine, tmp_path, "--observed", str(VLLM), "--observed-buffer", "4096", capsys=capsys)
    r = p["workload"]["refit"]
    assert r["observation"]["kind"] == "engine_metrics" and r["observation"]["naming"] == "vllm-0.34"
    assert r["observed_miss_rate"] == pytest.approx(0.08957) and r["device_buffer_size"] == 4096
    assert r["refit_miss_rate"] == pytest.approx(0.08957, rel=0.02)          # the simulation reproduces it
    assert r["rate_scale"] > 2 and r["observed_over_model"] > 3              # ~5x the model's misses
    assert "no held-out observation" in r["agreement"]
    hit = lambda prof: prof["predictions"]["per_context"][0]["hit_rate"]   # noqa: E731
    assert hit(p) < hit(base) - 0.02                                         # the refit workload misses more
    assert "workload_refit" in [w["code"] for w in p["predictions"]["warnings"]]
    rows = p["predictions"]["miss_sensitivity"]
    assert [x["miss_factor"] for x in rows] == [1.0, 2.0, 5.0, 10.0]
    assert rows[0]["device_buffer_size"] == p["hisparse"]["device_buffer_size"]
    assert rows[2]["fetch_time_per_token_s"] > 4 * rows[0]["fetch_time_per_token_s"]
    res = json.loads(capsys.readouterr().out)
    assert res["summary"]["miss_sensitivity"] == rows


def test_an_observation_below_the_model_refits_the_other_way(machine, tmp_path):
    low = tmp_path / "low.prom"
    text = VLLM.read_text()
    hits, misses = 31232000000 - 100000000, 100000000          # a 0.32 % miss rate, below the model's
    text = text.replace("2.843454976e+10", f"{hits:.10e}").replace("2.79745024e+09", f"{misses:.10e}")
    low.write_text(text)
    p = _tune(machine, tmp_path, "--observed", str(low), "--observed-buffer", "4096")
    r = p["workload"]["refit"]
    assert r["rate_scale"] < 1 and r["refit_miss_rate"] == pytest.approx(r["observed_miss_rate"], rel=0.02)


def test_a_watch_record_names_the_buffer_the_engine_ran(machine, tmp_path, capsys):
    import http.server
    import threading

    from sactool.watch.api import WatchOptions, watch_once

    prof_path = tmp_path / "base.yaml"
    _tune(machine, tmp_path, name="base.yaml", capsys=capsys)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(VLLM.read_bytes())

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s = watch_once(WatchOptions(profile=prof_path, metrics_url=f"http://127.0.0.1:{srv.server_address[1]}/metrics",
                                    interval_s=0.05))
    finally:
        srv.shutdown()
    from sactool.records import dumps

    seen = tmp_path / "seen.json"
    seen.write_text(dumps(s, "json"))
    p = _tune(machine, tmp_path, "--observed", str(seen), name="refit.yaml", capsys=capsys)
    r = p["workload"]["refit"]
    assert r["observation"]["kind"] == "watch_record" and r["device_buffer_size"] == s.prediction.device_buffer_size


def test_observations_tune_cannot_use_are_refused_before_it_works(machine, tmp_path, capsys):
    _tune(machine, tmp_path, "--observed", str(VLLM), rc=2)                 # metrics do not say the buffer
    assert "--observed-buffer" in capsys.readouterr().err
    sg = tmp_path / "sglang.prom"
    sg.write_text("# TYPE sglang:generation_tokens counter\nsglang:generation_tokens_total 100.0\n")
    _tune(machine, tmp_path, "--observed", str(sg), "--observed-buffer", "4096", rc=4)
    assert "SGLang 0.5.23's HiSparse exports no hit" in capsys.readouterr().err
    junk = tmp_path / "junk.json"
    junk.write_text('{"kind": "bench"}')
    _tune(machine, tmp_path, "--observed", str(junk), "--observed-buffer", "4096", rc=4)
    assert "neither a Prometheus exposition nor" in capsys.readouterr().err


def _gpu_bound(machine, tmp_path, *extra, name, capsys, fmt="json"):
    """A design the GPU budget binds (3 GiB per GPU beside 14 requests of 16K per rank): a larger hot
    buffer costs requests. The pool is pinned so the design does not follow free memory."""
    from sactool.cli import main

    out = tmp_path / name
    code = main(["-q", "tune", "--model", "deepseek-v3.2", "--sysfs-root", str(machine("this-machine")), "--bench",
                 str(BENCH), "--context", "16k", "--tp", "2", "--pool-bytes", "22GiB", "--gpu-kv-budget", "3GiB",
                 "--replicates", "1", "--steps", "32", "--out", str(out), "--format", fmt, *extra])
    assert code == 0, capsys.readouterr().err
    return yaml.safe_load(out.read_text()), capsys.readouterr().out


def test_an_observation_at_5x_the_model_s_misses_chooses_a_larger_buffer_and_says_why(machine, tmp_path, capsys):
    """tune's objective is tokens/s per rank: the hot buffer's GPU memory displaces requests, weighed
    against the engine's measured decode step (vLLM's inter-token latency). Without an observation the
    design's requests and the largest buffer beside them stay (nothing measured to trade them against);
    an observation at the model's own miss rate, with the same step, keeps them too; the same step at
    5x the model's misses makes the fetch a larger buffer saves outweigh the requests it turns away."""
    base, _ = _gpu_bound(machine, tmp_path, name="base.yaml", capsys=capsys)
    b0, n0 = base["hisparse"]["device_buffer_size"], base["sglang"]["max_running_requests"]
    rq = base["predictions"]["requests_vs_buffer"]
    assert rq["requests_per_rank"] == rq["design_requests_per_rank"] and rq["decode_step"] is None
    assert "measured decode step" in rq["why"] and rq["break_even_step_s"] > 0
    rows = base["predictions"]["miss_sensitivity"]
    assert {r["device_buffer_size"] for r in rows} == {b0}      # no measured step: the rows cannot move
    assert all("pays if the step without its fetch is under" in r["why"] for r in rows)

    one = tmp_path / "one.prom"   # the same engine, at the miss rate the model gives (1.79 %)
    lookups = 250000 * 61 * 2048
    misses = round(lookups * 0.0179)
    one.write_text(VLLM.read_text().replace("2.843454976e+10", f"{lookups - misses:.10e}")
                   .replace("2.79745024e+09", f"{misses:.10e}"))
    same, _ = _gpu_bound(machine, tmp_path, "--observed", str(one), "--observed-buffer", "4096", name="one.yaml",
                         capsys=capsys)
    assert same["workload"]["refit"]["observed_over_model"] == pytest.approx(1.0, abs=0.15)
    assert same["hisparse"]["device_buffer_size"] == b0 and same["sglang"]["max_running_requests"] == n0
    assert "fewer with a larger buffer decode fewer tokens/s" in same["predictions"]["requests_vs_buffer"]["why"]

    p, table = _gpu_bound(machine, tmp_path, "--observed", str(VLLM), "--observed-buffer", "4096", name="five.yaml",
                          capsys=capsys, fmt="table")
    assert p["workload"]["refit"]["observed_over_model"] > 4
    rq = p["predictions"]["requests_vs_buffer"]
    assert p["hisparse"]["device_buffer_size"] > b0                               # a larger buffer
    assert p["sglang"]["max_running_requests"] == 2 * rq["requests_per_rank"] < n0  # for fewer requests
    assert rq["requests_per_rank"] < rq["design_requests_per_rank"]
    assert "outweighs the requests it turns away" in rq["why"], rq["why"]          # and why
    step = rq["decode_step"]   # the engine's step (the fixture's 67.64 ms) minus tune's fetch there
    assert step["observed_step_s"] == pytest.approx(0.06764, rel=1e-4)
    assert step["compute_s"] == pytest.approx(step["observed_step_s"] - step["predicted_fetch_s"])
    line = " ".join(table.split())   # the summary says it: the reason line, what the profile holds, what lost
    assert (f"device_buffer_size {p['hisparse']['device_buffer_size']} for {rq['requests_per_rank']} request(s) per "
            "rank:") in line and "outweighs the requests it turns away" in line, table
    assert f"the profile holds {p['sglang']['max_running_requests']}" in line and "(the design's)" in line
    rows = p["predictions"]["miss_sensitivity"]
    assert rows[0]["device_buffer_size"] == p["hisparse"]["device_buffer_size"]
    assert rows[2]["device_buffer_size"] >= rows[0]["device_buffer_size"]    # more misses: no smaller buffer


def test_one_measurement_round_cannot_trade_requests_and_a_record_s_samples_are_its_rounds():
    """The trade is taken only when significant over paired measurement rounds; one round cannot tell, so
    the design's requests stay. A bench record's samples are rounds when every target's figure comes from
    that one record (its protocol takes sample i of every configuration in one rotated round); figures of
    two records, measured at different times, give one round of their medians."""
    from types import SimpleNamespace as NS

    from sactool.tune.pool import _rounds
    from sactool.tune.requests import StepTime, _decide

    step = StepTime(0.040, 8, 0.0, 0.0676, 0.0276, 4096, "test", "test")
    ev = lambda b, f: NS(candidate=NS(device_buffer_size=b), mean_s=f)   # noqa: E731
    best = {8: ev(3264, 0.030), 7: ev(4672, 0.020)}
    one = {8: [(0.040 + 0.030) / 8], 7: [(0.040 + 0.020) / 7]}           # 7 requests: more tokens/s
    pick, why, _ = _decide(7, 8, best, one, step)
    assert pick == 8 and why.startswith("not significant (one measurement round)")
    three = {b: [t * k for k in (0.99, 1.0, 1.01)] for b, (t,) in one.items()}
    assert _decide(7, 8, best, three, step)[0] == 7

    row = lambda t, p, s: {"target": t, "path": p, "bandwidth_bytes_per_s": 2.0, "samples": s}   # noqa: E731
    assert _rounds([row("node2", "a.json", [1.0, 2.0, 3.0])]) == ({"node2": 1.0}, {"node2": 2.0}, {"node2": 3.0})
    assert _rounds([row("node2", "a.json", [1.0, 2.0, 3.0]), row("node3", "b.json", [1.0, 2.0, 3.0])]) == (
        {"node2": 2.0, "node3": 2.0},)
    assert _rounds([row("node2", "a.json", [1.0])]) == ({"node2": 2.0},)
