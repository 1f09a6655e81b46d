"""``sactool simulate`` in-process: both input forms, formats, plot, explain, and bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from sactool.cli import main

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = str(ROOT / "sactool" / "data" / "platforms" / "sac-paper.yaml")
PROFILE = ROOT / "profiles" / "examples" / "cxl-one-node.yaml"
QUICK = ["--context", "16k", "--concurrency", "8", "--output-tokens", "64", "--hotbuffer-steps", "32"]


def test_platform_json(capsys):
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["kind"] == "simulation" and data["platform"] == "sac-paper"
    places = {p["placement"] for p in data["points"]}
    assert places == {"sac", "rdma", "dram"}
    for p in data["points"]:
        for k in ("ttft_mean_s", "ttft_p99_s", "tbt_mean_s", "throughput_tokens_per_s", "local_memory_bytes",
                  "max_concurrency"):
            assert p[k] is not None
    assert data["ratios"][0]["sac_vs_rdma_throughput"] > 0


def test_table_and_explain(capsys):
    assert main(["simulate", "--platform", PLATFORM, "--context", "16k", "--concurrency", "4,8",
                 "--output-tokens", "64", "--hotbuffer-steps", "32", "--explain"]) == 0
    out, err = capsys.readouterr()
    assert "ratios" in out and "drivers at 16K" in out and "lockstep wait (fetches)" in out and "paper" in out
    assert "TBT RDMA/SAC" in out and "RDMA minus SAC per token" in out
    # the harness is stated, and the sensitivity table names what drives each ratio
    assert "harness e2e_bench" in out and "first streamed chunk" in out and "overlap" in out
    # the logs' absolute TTFTs are at concurrency 64 only: no comparison rows at 4 and 8
    assert "model vs the authors' logs" not in out
    assert "sensitivity: each input at -50% / +50%" in out
    for ratio in ("throughput SAC/RDMA", "TTFT RDMA/SAC", "TBT RDMA/SAC", "throughput SAC/DRAM"):
        line = next(x for x in out.splitlines() if x.startswith(f"{ratio} is most sensitive to: "))
        assert line.count("%)") == 3
    assert "rdma.layout_conversion_bytes_per_s" in out


def test_explain_compares_absolute_ttft_with_the_logs(capsys):
    """At the logs' concurrency --explain sets the model's TTFT (run set, first burst, later
    requests) next to the authors' figures, so a ratio's miss is traced to the side that causes it."""
    assert main(["simulate", "--platform", PLATFORM, "--context", "128k", "--concurrency", "64",
                 "--output-tokens", "32", "--hotbuffer-steps", "8", "--placements", "sac",
                 "--explain"]) == 0
    out = capsys.readouterr().out
    assert "TTFT (s), model vs the authors' logs" in out
    row = next(x for x in out.splitlines() if "SAC/CXL" in x and "|" in x and "128K" in x)
    assert "3.77 | 5.00 | 2.54" in row      # dc_0502 p1_08 round2.per_request: mean | first 64 | rest


def test_explain_json_carries_the_sensitivity_rows(capsys):
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--explain", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    sens = data["sensitivity"]
    assert sens["delta"] == 0.5 and set(sens["base"]) == {"sac_vs_rdma_throughput", "rdma_vs_sac_ttft",
                                                           "rdma_vs_sac_tbt", "sac_vs_dram_throughput"}
    rows = {r["name"]: r for r in sens["rows"]}
    # a slower CPU conversion makes the RDMA pool slower: SAC's advantage grows at -50%, shrinks at +50%
    conv = rows["rdma.layout_conversion_bytes_per_s"]
    assert conv["low"]["sac_vs_rdma_throughput"] > sens["base"]["sac_vs_rdma_throughput"] \
        > conv["high"]["sac_vs_rdma_throughput"]


def test_convert_bench_replaces_the_logged_rate(tmp_path, capsys):
    rec = tmp_path / "c.json"
    assert main(["bench", "convert", "--node", "0", "--size", "64MiB", "--preset", "fast", "--threads", "1",
                 "--out", str(rec), "--format", "json"]) == 0
    capsys.readouterr()
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--convert-bench", str(rec), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    from sactool.bench import load_bench
    from sactool.bench.record import convert_figure

    bw, _ = convert_figure(load_bench(rec))
    assert data["inputs"]["rdma_conversion_bytes_per_s"] == bw
    assert any("measured here" in n and "0.61 GB/s" in n for n in data["notes"])


def test_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    png = tmp_path / "sim.png"
    assert main(["simulate", "--platform", PLATFORM, "--context", "16k", "--concurrency", "4,8",
                 "--output-tokens", "64", "--hotbuffer-steps", "32", "--plot", str(png)]) == 0
    out, err = capsys.readouterr()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "plot:" in err


def test_plot_refuses_overwrite_and_missing_matplotlib(tmp_path, capsys, monkeypatch):
    png = tmp_path / "sim.png"
    png.write_bytes(b"old")
    # an existing plot is not overwritten without --force, and nothing runs
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--plot", str(png)]) == 5
    out, err = capsys.readouterr()
    assert out == "" and "--force" in err and png.read_bytes() == b"old"
    # without the plot extra: a usage error naming it, and the old file untouched
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--plot", str(png), "--force"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "matplotlib" in err and "'plot' extra" in err and png.read_bytes() == b"old"


def test_profile_form(tmp_path, capsys):
    d = yaml.safe_load(PROFILE.read_text())
    d["bench"] = {"source": "file", "path": None, "memory_node": "node2", "record_bytes": 656, "threads": 8,
                  "bandwidth_bytes_per_s": 20e9, "ns_per_record": 32.8, "stand_in": False}
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(d))
    assert main(["simulate", "--profile", str(prof), "--context", "32k", "--concurrency", "8,16",
                 "--output-tokens", "64", "--hotbuffer-steps", "32", "--format", "json"]) == 0
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert data["kv_dtype"] == d["sglang"]["kv_cache_dtype"] and data["record_bytes"] == 656
    assert {p["concurrency"] for p in data["points"]} == {8, 16}
    assert any("stand in for local DRAM" in n for n in data["notes"])
    assert data["inputs"]["paths"]["sac"]["device_bytes_per_s"] == 20e9
    # a profile is served on SGLang 0.5.23: its LRU, not the SAC fork's of the paper platform
    assert data["inputs"]["hisparse_kernel"] == "sglang-0.5.23"


def test_profile_without_bench_says_which_command(capsys):
    assert main(["simulate", "--profile", str(PROFILE), *QUICK]) == 4
    out, err = capsys.readouterr()
    assert out == "" and "no bench figures" in err and "sactool bench gather" in err


def test_bad_input_exit_codes(tmp_path, capsys):
    assert main(["simulate"]) == 2                                           # neither form
    assert main(["simulate", "--platform", PLATFORM, "--context", "200k"]) == 2   # beyond max positions
    assert main(["simulate", "--platform", PLATFORM, "--concurrency", "x"]) == 2
    assert main(["simulate", "--platform", PLATFORM, "--placements", "ssd"]) == 2
    assert main(["simulate", "--platform", PLATFORM, "--case", "warm"]) == 2
    assert main(["simulate", "--platform", PLATFORM, "--output-tokens", "0"]) == 2
    assert main(["simulate", "--platform", PLATFORM, "--arrival-rate", "-1"]) == 2
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--set", "nic.bandwidth_bytes_per_s=0"]) == 4
    assert main(["simulate", "--platform", str(tmp_path / "none.yaml")]) == 4
    bad = tmp_path / "bad.yaml"
    d = yaml.safe_load(Path(PLATFORM).read_text())
    del d["cxl"]["device_read_bytes_per_s"]
    bad.write_text(yaml.safe_dump(d))
    assert main(["simulate", "--platform", str(bad), *QUICK]) == 4
    out, err = capsys.readouterr()
    assert out == "" and "cxl.device_read_bytes_per_s" in err and "Traceback" not in err
    assert main(["simulate", "--platform", PLATFORM, *QUICK, "--set", "dram.capacity_bytes=1e9",
                 "--set", "cxl.capacity_bytes=1e9"]) == 6
    out, err = capsys.readouterr()
    assert "fits in no placement" in err and "hint:" in err


def test_profile_form_takes_gpu_budget_and_pool_capacity_from_the_profile(tmp_path, capsys):
    d = yaml.safe_load(PROFILE.read_text())
    d["bench"] = {"source": "file", "path": None, "memory_node": "node2", "record_bytes": 656, "threads": 8,
                  "bandwidth_bytes_per_s": 20e9, "ns_per_record": 32.8, "stand_in": False}
    d["request"]["gpu"] = "h200"
    d["request"]["pool_targets"] = [{"name": "node2", "capacity_bytes": 60e9}]
    d["predictions"] = {"gpu_kv_budget_bytes": 5e9}
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(d))
    assert main(["simulate", "--profile", str(prof), "--context", "32k", "--concurrency", "8",
                 "--output-tokens", "32", "--hotbuffer-steps", "16", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr()[0])
    assert data["inputs"]["compute"].startswith("roofline") and data["inputs"]["hisparse_overhead_s"] == 0
    kv = 32768 * 61 * 656
    sac = [p for p in data["points"] if p["placement"] == "sac"][0]
    per_gpu = 5e9 // (4096 * 61 * 656 + 32768 * 61 * 132)       # hot buffer + index keys per request
    assert sac["max_concurrency"] == min(int(60e9 // kv), int(per_gpu) * 8)
    assert any("55.88 GiB: the profile's pool targets" in n for n in data["notes"])  # 60e9 B, IEC (units rule)


@pytest.mark.parametrize("width", [512, 768], ids=["measured", "not-measured"])
def test_profile_form_uses_the_profiles_swap_in_width(tmp_path, capsys, width):
    """A GPU swap-in record measured 256/512/960/1024 threads per CTA, 1024 the fastest: the
    simulated SAC placement takes the figure at the profile's hisparse.swap_in_block_size (what
    SGLang runs), not the fastest; a width the record lacks falls back to the fastest, said."""
    from test_tune_swap_in import _sweep, gpu_record

    rec = gpu_record(tmp_path / "g.json", _sweep(1024, 1024), "node2")
    d = yaml.safe_load(PROFILE.read_text())
    d["bench"] = {"source": "file", "path": str(rec), "memory_node": "node2", "record_bytes": 656, "threads": 1,
                  "bandwidth_bytes_per_s": 1e9, "stand_in": False, "fetch_path": "gpu"}
    d["hisparse"]["swap_in_block_size"] = width
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(d))
    args = ["simulate", "--profile", str(prof), "--context", "32k", "--concurrency", "8", "--output-tokens", "32",
            "--hotbuffer-steps", "16"]
    assert main([*args, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr()[0])
    at8 = {t: 1e9 * 8 ** 0.5 * (1.2 if t == 1024 else 1.0) for t in (256, 512, 960, 1024)}   # medians at 8 blocks
    used = width if width in at8 else 1024
    assert data["inputs"]["paths"]["sac"]["device_bytes_per_s"] == pytest.approx(at8[used])
    assert main([*args, "--explain"]) == 0
    out = " ".join(capsys.readouterr()[0].split())
    assert f"swap-in CTA width {width} threads, the profile's hisparse.swap_in_block_size" in out
    assert f"8 blocks × {used} threads {at8[used] / 1e9:.2f} GB/s" in out
    assert ("the GPU record did not measure it" in out) == (width not in at8)


def test_profile_form_without_the_gpu_record_says_whose_width_the_block_is(tmp_path, capsys):
    d = yaml.safe_load(PROFILE.read_text())
    d["bench"] = {"source": "file", "path": str(tmp_path / "gone.json"), "memory_node": "node2", "record_bytes": 656,
                  "threads": 1, "bandwidth_bytes_per_s": 20e9, "stand_in": False, "fetch_path": "gpu",
                  "swap_in": {"block_size": 960, "source": "measured"}}
    d["hisparse"]["swap_in_block_size"] = 512
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump(d))
    assert main(["simulate", "--profile", str(prof), *QUICK, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr()[0])
    assert data["inputs"]["paths"]["sac"]["device_bytes_per_s"] == 20e9
    assert any("bench block's figure stands (tune's, at 960 threads per CTA)" in n and "swap_in_block_size is 512" in n
               for n in data["notes"])


def _two_node_profile(tmp_path, name, rank_targets):
    d = yaml.safe_load((ROOT / "profiles" / "examples" / "cxl-two-nodes.yaml").read_text())
    d["bench"] = {"source": "file", "path": None, "memory_node": "node2", "record_bytes": 656, "threads": 8,
                  "bandwidth_bytes_per_s": 2e9, "ns_per_record": 32.8, "stand_in": False}
    d["pool"]["rank_assignment"], d["pool"]["rank_targets"] = "locality", rank_targets
    prof = tmp_path / f"{name}.yaml"
    prof.write_text(yaml.safe_dump(d))
    return prof


def test_profile_form_reads_the_rank_map_not_rank_mod_devices(tmp_path, capsys):
    """A locality profile whose GPUs sit unevenly (six on node2's socket, two on node3's): each
    rank's pool is where pool.rank_targets puts it, so node2 is shared by six ranks and SAC is
    slower than on the even map; rank % devices (the old rule) made the two runs the same (issue 19)."""
    from sactool.simulate.fromprofile import platform_from_profile

    base = [f"node{2 + r % 2}" for r in range(8)]
    uneven = ["node2"] * 6 + ["node3"] * 2
    runs = {}
    for name, targets in (("even", base), ("uneven", uneven)):
        prof = _two_node_profile(tmp_path, name, targets)
        assert main(["simulate", "--profile", str(prof), "--context", "32k", "--concurrency", "64",
                     "--output-tokens", "32", "--hotbuffer-steps", "16", "--placements", "sac",
                     "--format", "json"]) == 0
        runs[name] = json.loads(capsys.readouterr().out)["points"][0]
    assert runs["uneven"]["tbt_mean_s"] > runs["even"]["tbt_mean_s"] * 1.05
    from sactool.data import paper_platform
    from sactool.simulate.platform import load_platform

    p, _ = platform_from_profile(str(_two_node_profile(tmp_path, "u", uneven)), load_platform(paper_platform()))
    assert p.cxl_rank_devices == (0, 0, 0, 0, 0, 0, 1, 1) and p.cxl_devices == 2
