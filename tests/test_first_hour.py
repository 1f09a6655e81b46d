"""A newcomer's first hour (issue 27, the N-numbered defects): each test fails on the behaviour the
walk-through found. The server tree is generated (tests/fixtures/servertree.py: 8 x H100, PCI id
10de:2330), the other machines are recordings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sactool.cli import main

QUICK = ("--context", "16k", "--steps", "4", "--replicates", "1")


# ---- N3: tune plans for the GPUs probe sees, --gpu over them, and names the GPU --------------------

def _tune(tree, out, bench, *extra) -> list[str]:
    return ["tune", "--sysfs-root", str(tree), "--bench", str(bench), "--out", str(out), *QUICK, *extra]


def test_tune_plans_for_the_gpus_probe_sees(tmp_path, server_tree, fast_bench_record, capsys):
    """8 x H100 (80 GB) cannot hold DeepSeek-V3.2's FP8 weights at tp 8: planned for the H100s probe
    sees, tune refuses (it used to plan for an H200's 141 GB, exit 0, no word of it)."""
    rc = main(_tune(server_tree("devdax"), tmp_path / "p.yaml", fast_bench_record))
    err = capsys.readouterr().err
    assert rc == 6, err
    assert "of a h100 (probe sees 8 x h100)" in err
    assert not (tmp_path / "p.yaml").exists()


def test_tune_gpu_option_overrides_probe_with_a_warning(tmp_path, server_tree, fast_bench_record, capsys):
    rc = main(_tune(server_tree("devdax"), tmp_path / "p.yaml", fast_bench_record, "--gpu", "h200",
                    "--format", "json"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    codes = [w["code"] for w in res["warnings"]]
    assert "gpu_mismatch" in codes and "--gpu h200 but probe sees 8 x h100" in err
    assert res["summary"]["gpu"] == "h200" and res["summary"]["gpu_from"]["source"] == "user"


def test_tune_summary_and_profile_show_name_the_gpu(tmp_path, server_tree, fast_bench_record, capsys):
    prof = tmp_path / "p.yaml"
    assert main(_tune(server_tree("devdax"), prof, fast_bench_record, "--gpu-kv-budget", "30GiB")) == 0
    out = capsys.readouterr().out
    assert "GPU: h100 (probe sees 8 x h100); KV budget 30.00 GiB per GPU (--gpu-kv-budget)" in " ".join(out.split())
    assert main(["profile", "show", str(prof)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "GPU: h100 (probe sees 8 x h100); KV budget 30.00 GiB per GPU" in shown


def test_tune_without_a_gpu_in_sight_says_the_gpu_is_a_default(tmp_path, machine, fast_bench_record, capsys):
    prof = tmp_path / "p.yaml"
    assert main(_tune(machine("this-machine"), prof, fast_bench_record)) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "GPU: h200 (default: probe sees no NVIDIA GPU" in out


def test_choose_gpu_mixed_unknown_and_absent():
    from types import SimpleNamespace as G

    from sactool.tune.gpu import choose_gpu

    def gpu(dev, vendor="0x10de"):
        return G(vendor=vendor, device=dev, excluded=None)

    mixed = choose_gpu(None, [gpu("0x2335"), gpu("0x2330")])
    assert (mixed.name, mixed.source) == ("h100", "probe") and [w["code"] for w in mixed.warnings] == ["gpu_mixed"]
    odd = choose_gpu(None, [gpu("0x26b9")])          # an L40S: a CUDA GPU the catalog cannot size
    assert (odd.name, odd.source) == ("h200", "default") and odd.warnings[0]["code"] == "gpu_unknown"
    amd = choose_gpu(None, [gpu("0x74a1", vendor="0x1002")])   # not a CUDA device: not counted
    assert (amd.name, amd.source, amd.warnings) == ("h200", "default", ())
    same = choose_gpu("h100", [gpu("0x2330")])
    assert (same.name, same.source, same.warnings) == ("h100", "user", ())


# ---- N4: serve --dry-run with fewer visible NVIDIA GPUs than ranks is exit 3 -----------------------

REPO = Path(__file__).resolve().parent.parent
STANDIN_SITE = REPO / "tests" / "standins" / "site"


def test_serve_dry_run_without_a_gpu_is_exit_3(machine, node0_pinned, monkeypatch, capsys):
    """A stand-in SGLang 0.5.23 installed, the recording of this VM (its PCI bus read: no GPU): the launch
    would be refused for want of CUDA devices, and the dry run says so in its exit code."""
    import sys

    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))
    rc = main(["serve", "--profile", str(node0_pinned()), "--dry-run", "--python", sys.executable,
               "--sysfs-root", str(machine("this-machine")), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and [p["exit_code"] for p in out["problems"]] == [3]
    assert "1 ranks from GPU 0 need 1 CUDA devices; in the recording no NVIDIA GPU is seen" in out["problems"][0]["message"]


def test_serve_dry_run_with_cuda_visible_devices_and_no_gpu_is_exit_3(machine, monkeypatch, capsys):
    """The SAC example (8 ranks) with CUDA_VISIBLE_DEVICES=0,1 on a machine whose PCI bus holds no GPU."""
    import sys

    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    rc = main(["serve", "--profile", str(REPO / "profiles/examples/sac-8rank-devdax.yaml"), "--dry-run",
               "--python", sys.executable, "--sysfs-root", str(machine("this-machine"))])
    err = capsys.readouterr().err
    assert rc == 3 and "would refuse (exit 3): 8 ranks from GPU 0 need 8 CUDA devices" in err
