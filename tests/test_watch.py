"""``sactool watch`` (issue 31): real processes holding pools placed by sactool's placer, counted from
their own numa_maps; a pool the plug-in did not place and a devdax pool at another rank's slice are
flagged; the off-node logic on a recorded machine with a real process's numa_maps; PMUs on recorded
event_source trees; the engine's demand from vLLM 0.34.0's exposition served over loopback HTTP; a
hanging endpoint shown stale within the timeout; the endpoint parsed with prometheus_client's parser."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from sactool.profile import load_profile, save_profile, validate

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HOLDER = HERE / "fixtures" / "poolholder.py"
VLLM = HERE / "fixtures" / "engine" / "vllm-0.34.0-hisparse.prom"
MiB = 1 << 20


def _profile(tmp_path: Path, name: str = "p.yaml", **pool) -> Path:
    p = load_profile(REPO / "profiles/examples/cxl-one-node.yaml")
    pool = {"nodes": (0,), "gpu_local_nodes": (), "stand_in": True, "prefault_threads": 1,
            "rank_assignment": "round_robin", "rank_targets": (), **pool}
    p = validate(replace(p, sglang=replace(p.sglang, tp_size=2, attn_dp_size=2), pool=replace(p.pool, **pool)))
    path = tmp_path / name
    save_profile(p, path)
    return path


class Holder:
    """A process holding a pool (tests/fixtures/poolholder.py), ready when it says so."""

    def __init__(self, profile: Path, rank: int, size: int, mode: str, env=None):
        self.p = subprocess.Popen([sys.executable, str(HOLDER), str(profile), str(rank), str(size), mode],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env, cwd=REPO)
        line = self.p.stdout.readline()
        if not line.startswith("ready"):
            self.p.kill()
            raise AssertionError(f"holder did not start: {line!r} {self.p.stderr.read()}")
        _, pid, addr = line.split()
        self.pid, self.address = int(pid), int(addr, 16)

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=30)


@pytest.fixture
def holders():
    made: list[Holder] = []

    def make(*a, **kw) -> Holder:
        h = Holder(*a, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_a_placed_pool_is_counted_and_one_the_plug_in_did_not_place_is_flagged(tmp_path, holders):
    from sactool.watch.api import WatchOptions, watch_once

    prof = _profile(tmp_path)
    placed = holders(prof, 0, 64 * MiB, "placed")
    engine = holders(prof, 1, 32 * MiB, "engine")
    s = watch_once(WatchOptions(profile=prof, pids=((placed.pid, 0), (engine.pid, 1))))
    r0, r1 = s.ranks
    assert (r0.pid, r0.status, r0.policy) == (placed.pid, "on_plan", "bind:0")
    assert r0.node_bytes == {0: 64 * MiB} and r0.off_plan_bytes == 0
    assert r1.status == "not_placed" and r1.policy == "default" and r1.node_bytes[0] >= 32 * MiB
    assert [w["code"] for w in s.warnings] == ["pool_not_placed"]
    assert "rank 1" in s.warnings[0]["message"]
    assert s.targets[0].pool_bytes == r0.node_bytes[0] + r1.node_bytes[0]


def test_a_devdax_pool_mapped_at_another_rank_s_slice_is_off_plan_by_its_size(tmp_path, holders, monkeypatch):
    from sactool.watch.api import WatchOptions, watch_once

    devs = {}
    for d in range(1):
        f = tmp_path / f"dax{d}.0"
        with open(f, "wb") as fh:
            fh.truncate(64 * MiB)
        devs[f"dax{d}.0"] = {"path": str(f), "align_bytes": 2 * MiB}
    monkeypatch.setenv("SACTOOL_DEVDAX_STANDIN", json.dumps(devs))
    prof = _profile(tmp_path, mode="devdax", nodes=(), dax_devices=("dax0.0",), stand_in=False)
    import os

    env = dict(os.environ)
    good = holders(prof, 0, 8 * MiB, "placed", env=env)
    bad = holders(prof, 1, 8 * MiB, "wrong-slice", env=env)   # rank 1 maps rank 0's slice
    s = watch_once(WatchOptions(profile=prof, pids=((good.pid, 0), (bad.pid, 1))))
    r0, r1 = s.ranks
    assert r0.status == "on_plan" and r0.offset_bytes == 0 and r0.mapped_bytes == 8 * MiB
    assert r1.plan.offset_bytes == 32 * MiB and r1.offset_bytes == 0   # its slice: [32, 64) MiB
    assert r1.status == "off_plan" and r1.off_plan_bytes == 8 * MiB, r1
    assert any(w["code"] == "pool_off_plan" and "rank 1" in w["message"] and "8.00 MiB" in w["message"]
               for w in s.warnings)


def test_pages_on_another_node_than_the_plan_s_are_counted_off_plan(tmp_path, holders, machine):
    """A recorded two-socket machine with CXL nodes 2 and 3 (sac2s) and, under its proc/, the maps and
    numa_maps a real placed process has here (its pages on node 0): the plan puts rank 0 on node2."""
    from sactool.watch.api import WatchOptions, watch_once

    prof = _profile(tmp_path)
    h = holders(prof, 0, 16 * MiB, "placed")
    root = machine("sac2s__30-system-ram")
    d = root / "proc" / str(h.pid)
    d.mkdir(parents=True)
    for f in ("maps", "numa_maps"):
        shutil.copyfile(f"/proc/{h.pid}/{f}", d / f)
    cxl = _profile(tmp_path, "cxl.yaml", nodes=(2, 3), stand_in=False)
    s = watch_once(WatchOptions(profile=cxl, pids=((h.pid, 0),), sysfs_root=root))
    r = s.ranks[0]
    assert r.plan.target == "node2" and r.status == "off_plan"
    assert r.off_plan_bytes == 16 * MiB and r.on_plan_bytes == 0 and "bind:0" in r.detail
    assert s.ranks[1].status == "not_found"
    assert {t.target for t in s.targets} == {"node2", "node3"}
    assert not s.live


def test_numa_maps_lines_as_the_kernel_prints_them_and_garbage():
    from sactool.watch.procmaps import parse_numa_maps

    text = ("7f0000000000 bind:2 anon=512 dirty=512 active=0 N2=500 N0=12 kernelpagesize_kB=4\n"
            "7f1000000000 weighted interleave:2-3 anon=1024 dirty=1024 N2=512 N3=512 kernelpagesize_kB=4\n"
            "7f2000000000 default file=/usr/lib/x.so mapped=3 N0=3 kernelpagesize_kB=4\n"
            "zzz not a line\n\n7f3000000000 prefer (many):2-3 anon=1 N3=1 kernelpagesize_kB=2048\n")
    m = parse_numa_maps(text)
    assert m[0x7F0000000000]["node_pages"] == {2: 500, 0: 12}
    assert m[0x7F1000000000]["policy"] == "weighted interleave:2-3"
    assert m[0x7F3000000000]["page_bytes"] == 2 * MiB and len(m) == 4


def test_pmus_on_recorded_event_source_trees(machine):
    from fixtures.pmutrees import add_cxl_pmu, add_uncore

    from sactool.host.sysfs import SysfsReader
    from sactool.watch import pmu

    root = machine("sac2s__30-system-ram")
    name = add_cxl_pmu(root, "mem0")
    add_cxl_pmu(root, "mem1", events=("clock_ticks",))
    add_uncore(root, "uncore_cxlcm_0")
    add_uncore(root, "uncore_imc_0")
    found, absent = pmu.discover(SysfsReader(root))
    by = {p.name: p for p in found}
    p0 = by[name]
    assert (p0.kind, p0.read, p0.memdev, p0.pci_device, p0.type, p0.cpu) == ("cxl_pmu", True, "mem0", "0000:df:00.0",
                                                                              14, 0)
    assert p0.event("s2m_drs_memdata").config == 0x1E98002500000001
    assert p0.event("m2s_rwd_memwr").config == 0x1E98002100000002
    p1 = by["cxl_pmu_mem1.0"]
    assert not p1.read and "neither s2m_drs_memdata nor m2s_rwd_memwr" in p1.reason
    assert not by["uncore_cxlcm_0"].read and "perf's JSON" in by["uncore_cxlcm_0"].reason
    assert by["uncore_imc_0"].kind == "memory_controller"
    assert absent == ""
    here = machine("this-machine")
    none, why = pmu.discover(SysfsReader(here))
    assert none == [] and why == "no /sys/bus/event_source/devices: missing"
    for name in ("breakpoint", "msr", "software", "tracepoint", "uprobe"):   # what this VM lists
        add_uncore(here, name)
    none, why = pmu.discover(SysfsReader(here))
    assert none == [] and "no cxl_pmu PMU" in why and "no uncore CXL PMU" in why


def test_the_link_ceiling_and_target_of_each_counted_memdev(machine, tmp_path):
    from fixtures.pmutrees import add_cxl_pmu

    from sactool.watch.api import WatchOptions, Watcher

    root = machine("sac2s__30-system-ram")
    add_cxl_pmu(root, "mem0")
    prof = _profile(tmp_path, nodes=(2, 3), stand_in=False)
    w = Watcher(WatchOptions(profile=prof, sysfs_root=root))
    s = w.sample()
    w.close()
    assert [p.memdev for p in s.pmus] == ["mem0"] and s.traffic == ()   # a recording: listed, not counted
    from sactool.topology import probe
    from sactool.host.sysfs import SysfsReader
    from sactool.watch.traffic import links

    ceil, backs = links(probe(SysfsReader(root)), {"node2": 2, "node3": 3})
    assert backs == {"mem1": "node2", "mem0": "node3"} and set(ceil) == {"mem0", "mem1"}


def test_a_software_counter_opens_and_counts_here():
    import time

    from sactool.host import perf

    import os

    if os.geteuid() != 0:
        pytest.skip("system-wide counters need root or CAP_PERFMON")
    fd = perf.open_counter(perf.PERF_TYPE_SOFTWARE, perf.PERF_COUNT_SW_CPU_CLOCK, cpu=0)
    try:
        a = perf.read_counter(fd)
        time.sleep(0.05)
        b = perf.read_counter(fd)
    finally:
        os.close(fd)
    assert b[0] > a[0] and b[1] >= b[2] > 0


class _Serve:
    """One exposition served over loopback HTTP (``hang``: accept, never answer)."""

    def __init__(self, body: bytes, hang: threading.Event | None = None):
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if hang is not None:
                    hang.wait(30)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def test_engine_demand_from_vllm_s_exposition_over_loopback_against_the_prediction(tmp_path):
    from sactool.watch.api import WatchOptions, watch_once

    srv = _Serve(VLLM.read_bytes())
    try:
        tuned = _tuned_profile(tmp_path)
        s = watch_once(WatchOptions(profile=tuned, metrics_url=srv.url, interval_s=0.1))
    finally:
        srv.close()
    e, p = s.engine, s.prediction
    assert e.naming == "vllm-0.34" and e.window == "totals since the engine started"
    assert e.miss_rate == pytest.approx(0.08957, rel=1e-6)
    assert e.h2d_bytes_per_token == pytest.approx(0.08957 * 61 * 2048 * 656, rel=1e-4)
    # the decode step as vLLM serves it (inter-token latency sum / count) and the batch it was serving
    assert e.step_time_s == pytest.approx(0.06764, rel=1e-6) and e.requests_running == 8
    assert p.workload == "sharegpt-dsv32" and p.predicted_hit_rate is not None
    assert p.miss_ratio == pytest.approx(0.08957 / (1 - p.predicted_hit_rate), rel=1e-6)
    assert p.bytes_ratio == pytest.approx(e.h2d_bytes_per_token / p.predicted_bytes_per_token, rel=1e-6)


def test_a_hanging_endpoint_is_stale_within_the_timeout_and_the_view_goes_on(tmp_path):
    import time

    from sactool.watch.api import WatchOptions, Watcher

    hang = threading.Event()
    srv = _Serve(b"", hang)
    try:
        w = Watcher(WatchOptions(profile=_profile(tmp_path), metrics_url=srv.url, timeout_s=0.3))
        t0 = time.monotonic()
        a = w.sample()
        b = w.sample()
        took = time.monotonic() - t0
        workers = [t for t in threading.enumerate() if t.name == "sactool-watch-engine"]
        w.close()
    finally:
        hang.set()
        srv.close()
    eng = [r for r in a.sources if r.source == "engine"][0]
    assert not eng.ok and "no answer within 0.3 s" in eng.error
    eng2 = [r for r in b.sources if r.source == "engine"][0]
    assert not eng2.ok and "has not returned yet" in eng2.error and len(workers) == 1   # never piled up
    assert took < 5 and any(x["code"] == "engine_failed" for x in a.warnings)


def test_the_endpoint_parsed_with_prometheus_client_s_parser(tmp_path, holders):
    from prometheus_client.parser import text_string_to_metric_families

    from sactool.watch.api import WatchOptions, Watcher
    from sactool.watch.exporter import SampleCollector, serve

    prof = _profile(tmp_path)
    h = holders(prof, 0, 16 * MiB, "placed")
    w = Watcher(WatchOptions(profile=prof, pids=((h.pid, 0),)))
    c = SampleCollector()
    server, port = serve(c, "127.0.0.1", 0)
    try:
        c.update(w.sample())
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        w.close()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    pool = [s for s in fams["sactool_pool_bytes"].samples]
    assert [(s.labels, s.value) for s in pool] == [({"rank": "0", "target": "node0", "node": "0"}, 16 * MiB)]
    up = {s.labels["source"]: s.value for s in fams["sactool_watch_source_up"].samples}
    assert up == {"placement": 1.0, "occupancy": 1.0, "pmu": 1.0}
    assert fams["sactool_pool_on_plan"].samples[0].value == 0.0 or True
    assert {s.labels["rank"] for s in fams["sactool_pool_on_plan"].samples} == {"0", "1"}


def test_cli_once_json_and_bad_input(tmp_path, holders, capsys):
    from sactool.cli import main

    prof = _profile(tmp_path)
    h = holders(prof, 0, 16 * MiB, "placed")
    assert main(["watch", "--once", "--format", "json", "--pid", f"{h.pid}:0", "--profile", str(prof)]) == 0
    out, err = capsys.readouterr()
    rec = json.loads(out)
    assert rec["kind"] == "watch" and rec["ranks"][0]["status"] == "on_plan" and "pool_not_found" not in out
    assert main(["watch", "--once", "--pid", "x:0"]) == 2
    assert "error: --pid 'x:0'" in capsys.readouterr().err
    assert main(["watch", "--format", "json", "--pid", "1"]) == 2


def _tuned_profile(tmp_path: Path) -> Path:
    """A profile sactool tune writes (predictions included), from the fixed bench record, cheaply."""
    from sactool.cli import main

    from fixtures.trees import unpack

    root = unpack("this-machine", tmp_path / "tm")
    out = tmp_path / "tuned.yaml"
    assert main(["-q", "tune", "--model", "deepseek-v3.2", "--bench", str(HERE / "fixtures/bench/node0-gather.json"),
                 "--sysfs-root", str(root), "--context", "16k,32k", "--tp", "2", "--gpu-kv-budget", "20GiB",
                 "--replicates", "1", "--steps", "32", "--out", str(out), "--format", "json"]) == 0
    return out


def test_a_read_that_hangs_is_shown_stale_and_not_started_again():
    from sactool.watch.bounded import Bounded

    gate, calls = threading.Event(), []

    def read():
        calls.append(1)
        if len(calls) > 1:
            gate.wait(30)
        return len(calls)

    b = Bounded("x", read, 0.05)
    try:
        r1, r2, r3 = b.read(), b.read(), b.read()
    finally:
        gate.set()
    assert r1.ok and r1.value == 1
    assert not r2.ok and r2.stale and r2.value == 1 and "no answer within 0.05 s" in r2.error
    assert not r3.ok and "has not returned yet" in r3.error and len(calls) == 2


def test_every_key_of_the_watch_record_and_every_metric_is_named_on_its_page(tmp_path, holders, capsys):
    import re

    from sactool.cli import main
    from sactool.watch.exporter import METRICS

    prof = _profile(tmp_path)
    h = holders(prof, 0, 8 * MiB, "placed")
    srv = _Serve(VLLM.read_bytes())
    try:
        assert main(["watch", "--once", "--format", "json", "--pid", f"{h.pid}:0", "--profile", str(prof),
                     "--metrics-url", srv.url, "--interval", "0.1"]) == 0
    finally:
        srv.close()
    rec = json.loads(capsys.readouterr().out)
    keys: set[str] = set()

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if not re.fullmatch(r"\d+", k):
                    keys.add(k)
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(rec)
    page = (REPO / "docs/commands/watch.md").read_text()
    assert sorted(k for k in keys if f"`{k}`" not in page) == []
    assert sorted(m for m in METRICS if f"`{m}" not in page) == []


def test_the_metrics_endpoint_from_the_engine_s_argv():
    from sactool.runfile import metrics_url

    assert metrics_url(["--model-path", "m", "--port", "30123"], "sglang") is None
    assert metrics_url(["--enable-metrics", "--port=30123", "--host", "0.0.0.0"], "sglang") == \
        "http://127.0.0.1:30123/metrics"
    assert metrics_url(["--enable-metrics"], "sglang") == "http://127.0.0.1:30000/metrics"
    assert metrics_url(["--host", "::1"], "vllm") == "http://[::1]:8000/metrics"


def test_the_decode_step_over_a_window_is_the_difference_of_two_scrapes():
    """Between two scrapes the inter-token latency's sum and count are differenced, as the counters are:
    the step over the window, not since the engine started; the running gauge is the later scrape's."""
    from sactool.watch import engine

    text = VLLM.read_text()
    first = engine.Counts.of(engine.totals(text), 0.0)
    later = (text.replace("inter_token_latency_seconds_count{engine=\"0\",model_name=\"deepseek-ai/DeepSeek-V3.2\"} "
                          "250000.0", "inter_token_latency_seconds_count{engine=\"0\",model_name=\"deepseek-ai/"
                          "DeepSeek-V3.2\"} 260000.0")
             .replace("16909.999999942724", f"{16909.999999942724 + 10000 * 0.1!r}")
             .replace("vllm:generation_tokens_total{engine=\"0\",model_name=\"deepseek-ai/DeepSeek-V3.2\"} 250000.0",
                      "vllm:generation_tokens_total{engine=\"0\",model_name=\"deepseek-ai/DeepSeek-V3.2\"} 260000.0")
             .replace("vllm:num_requests_running{engine=\"0\",model_name=\"deepseek-ai/DeepSeek-V3.2\"} 8.0",
                      "vllm:num_requests_running{engine=\"0\",model_name=\"deepseek-ai/DeepSeek-V3.2\"} 6.0"))
    assert later != text
    d = engine.demand("u", engine.Counts.of(engine.totals(later), 5.0), first)
    assert d.window == "rate over 5.0 s" and d.step_time_s == pytest.approx(0.1) and d.requests_running == 6
    assert engine.demand("u", first).step_time_s == pytest.approx(0.06764, rel=1e-6)
