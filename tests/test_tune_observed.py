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
