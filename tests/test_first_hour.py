"""A newcomer's first hour (issue 27, the N-numbered defects): each test fails on the behaviour the
walk-through found. The server tree is generated (tests/fixtures/servertree.py: 8 x H100, PCI id
10de:2330), the other machines are recordings."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

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


# ---- N5: serve checks the profile's pool against this machine's probe, and the machine itself ------

def _standin(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))


def test_serve_refuses_pool_nodes_that_are_dram_here(server_tree, monkeypatch, capsys):
    """A profile made for the SAC box (pool.nodes [2, 3], CXL there) on the server tree, whose nodes 2 and 3
    are DRAM sub-NUMA nodes with CPUs: refused, exit 3 (it dry-ran with exit 0, the pool bound to DRAM)."""
    import sys

    _standin(monkeypatch)
    rc = main(["serve", "--profile", str(REPO / "profiles/examples/cxl-two-nodes.yaml"), "--dry-run", "--python",
               sys.executable, "--sysfs-root", str(server_tree()), "--format", "json"])
    out, err = capsys.readouterr()
    problems = json.loads(out)["problems"]
    assert rc == 3 and problems[0]["exit_code"] == 3, problems
    assert "pool node2 is DRAM with CPUs 86-127,342-383 in the recording, not a CPU-less CXL node" \
        in problems[0]["message"]
    assert "node6, node7, node8, node9" in problems[0]["hint"]


def _with_machine(profile_path, root, out):
    """The example profile as if tuned on the recording ``root`` (its machine block)."""
    from dataclasses import replace

    from sactool.host.machine import machine_block
    from sactool.host.sysfs import SysfsReader
    from sactool.profile import load_profile, save_profile

    p = load_profile(profile_path)
    save_profile(replace(p, machine=machine_block(SysfsReader(root))), out, force=True)
    return out


def test_serve_warns_of_a_profile_from_another_machine_and_strict_refuses(machine, tmp_path, monkeypatch, capsys):
    _standin(monkeypatch)
    prof = _with_machine(REPO / "profiles/examples/cxl-one-node.yaml", machine("sac2s__30-system-ram"),
                         tmp_path / "p.yaml")
    here = machine("ram__30-system-ram")             # another QEMU machine: one socket, CXL node2
    import sys

    argv = ["serve", "--profile", str(prof), "--dry-run", "--python", sys.executable, "--sysfs-root", str(here),
            "--format", "json"]
    main(argv)
    out, err = capsys.readouterr()
    warned = [c for c in json.loads(out)["checks"] if "tuned on another machine" in c]
    assert warned and warned[0].startswith("warning: the profile was tuned on another machine than the recording: ")
    assert "NUMA layout differs" in warned[0]
    assert "tuned on another machine" in err          # a warning reaches stderr with --format json too (N11)
    rc = main([*argv, "--strict"])
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert rc == 4 and any(p["exit_code"] == 4 and "tuned on another machine" in p["message"] for p in problems)


def test_serve_finds_the_machine_a_profile_was_tuned_on(machine, tmp_path, monkeypatch, capsys):
    _standin(monkeypatch)
    root = machine("sac2s__30-system-ram")
    prof = _with_machine(REPO / "profiles/examples/cxl-two-nodes.yaml", root, tmp_path / "p.yaml")
    import sys

    main(["serve", "--profile", str(prof), "--dry-run", "--python", sys.executable, "--sysfs-root", str(root),
          "--format", "json", "--strict"])
    d = json.loads(capsys.readouterr().out)
    assert any(c.startswith("machine: the profile was tuned on the recording") for c in d["checks"])
    assert "node2: CXL, CPU-less in the recording, 512.00 MiB" in d["checks"]
    assert not any(p["exit_code"] == 4 for p in d["problems"])


def test_pool_targets_of_another_size_or_not_cxl_are_named(machine, server_tree):
    from types import SimpleNamespace as Pool

    from sactool.errors import TopologyError
    from sactool.host.sysfs import SysfsReader
    from sactool.pool.match import check_targets
    from sactool.topology import probe

    dax = probe(SysfsReader(server_tree("devdax")))
    pool = Pool(mode="devdax", dax_devices=("dax0.0",), nodes=(), stand_in=False)
    tuned = [{"name": "dax0.0", "capacity_bytes": 512 << 30, "source": "sys/bus/dax/devices/dax0.0/size"}]
    lines = check_targets(pool, dax, tuned)
    assert lines[0].startswith("dax0.0: CXL in the recording (region0), 256.00 GiB")
    assert lines[1].startswith("warning: dax0.0 is 256.00 GiB here, the profile was tuned for a 512.00 GiB device")
    ram = probe(SysfsReader(machine("sac2s__30-system-ram")))
    numa = Pool(mode="numa", dax_devices=(), nodes=(2,), stand_in=False)
    small = check_targets(numa, ram, [{"name": "node2", "capacity_bytes": 64 << 30, "source": "node2/meminfo"}])
    assert small[1].startswith("warning: node2 holds 512.00 MiB in all here, less than the 64.00 GiB free")
    with pytest.raises(TopologyError, match="pool node0 is DRAM with CPUs 0"):
        check_targets(Pool(mode="numa", dax_devices=(), nodes=(0,), stand_in=False), ram)
    assert "stood in" in check_targets(Pool(mode="numa", dax_devices=(), nodes=(0,), stand_in=True), ram)[0]


# ---- N4 and N5 for vLLM: `serve --engine vllm` runs the same checks of this machine ----------------

VLLM_TP8 = REPO / "profiles/examples/vllm-tp8-one-node.yaml"


def _vllm_profile(tmp_path, name="v.yaml", *, pool=None, machine=None, **vllm) -> Path:
    """The TP 8 vLLM example (one pool on node2, shared by the 8 TP ranks), its pool and settings
    changed as given, saved under ``tmp_path``."""
    from dataclasses import replace

    from sactool.profile import load_profile, save_profile

    p = load_profile(VLLM_TP8)
    p = replace(p, vllm=replace(p.vllm, **vllm), pool=replace(p.pool, **(pool or {})),
                machine=p.machine if machine is None else machine)
    return save_profile(p, tmp_path / name, force=True)


def _node0_vllm(tmp_path) -> Path:
    """A small vLLM pool on node 0 (standing in for CXL): every check of the dry run passes on the
    recording of this VM but the GPUs'."""
    return _vllm_profile(tmp_path, pool={"nodes": (0,), "rank_targets": ("node0",), "stand_in": True},
                         host_pool_gib=0.25, max_model_len=4096, max_num_seqs=1)


def _vllm_serve(profile, python, root, *extra) -> list[str]:
    return ["serve", "--engine", "vllm", "--profile", str(profile), "--dry-run", "--python", python,
            "--sysfs-root", str(root), *extra]


def test_vllm_serve_dry_run_without_a_gpu_is_exit_3(machine, vllm_python, tmp_path, monkeypatch, capsys):
    """The SGLang check of N4, for vLLM: TP 8 x DP 1 needs 8 CUDA devices; the recording of this VM
    (its PCI bus read: no GPU) has none, so the launch would be refused — and only for that: the
    stand-in vLLM 0.34.0, its plug-in and hook table, the pool all pass."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rc = main(_vllm_serve(_node0_vllm(tmp_path), vllm_python, machine("this-machine"), "--format", "json"))
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and [p["exit_code"] for p in out["problems"]] == [3], out["problems"]
    assert out["problems"][0]["message"].startswith("8 ranks (TP 8 x DP 1) from GPU 0 need 8 CUDA devices; in the "
                                                    "recording no NVIDIA GPU is seen")
    assert any(c.startswith("vLLM 0.34.0 in ") for c in out["checks"])
    assert any(c.startswith("hook targets: vLLM 0.34.0, the >=0.34.0,<0.35 table: every symbol resolved")
               for c in out["checks"]), out["checks"]


def test_vllm_serve_with_fewer_visible_gpus_than_tp_x_dp_is_exit_3(gpu_root, vllm_python, tmp_path, monkeypatch,
                                                                   capsys):
    """8 H100s on the bus, CUDA_VISIBLE_DEVICES=0,1: 2 visible for 8 ranks, exit 3 with the hint; all 8
    visible, the same dry run passes (exit 0, no problem)."""
    root = gpu_root(8)
    prof = _node0_vllm(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    rc = main(_vllm_serve(prof, vllm_python, root))
    err = capsys.readouterr().err
    assert rc == 3 and "would refuse (exit 3): 8 ranks (TP 8 x DP 1) from GPU 0 need 8 CUDA devices; in the " \
        "recording 2 are visible" in " ".join(err.split()), err
    assert "CUDA_VISIBLE_DEVICES to at least 8 NVIDIA GPUs, or lower vllm.tp_size / vllm.dp_size" in " ".join(err.split())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    rc = main(_vllm_serve(prof, vllm_python, root, "--format", "json"))
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["problems"] == [], out["problems"]
    assert any(c.startswith("GPUs of ranks 0..7: ") for c in out["checks"]), out["checks"]


def test_vllm_serve_refuses_a_pool_node_that_is_dram_here(server_tree, vllm_python, monkeypatch, capsys):
    """The SGLang check of N5, for vLLM: the TP 8 example pools on node2 (CXL on the SAC box); on the
    server tree node2 is a DRAM sub-NUMA node with CPUs: refused, exit 3, the CXL nodes named."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rc = main(_vllm_serve(VLLM_TP8, vllm_python, server_tree(), "--format", "json"))
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert rc == 3 and problems[0]["exit_code"] == 3, problems
    assert "pool node2 is DRAM with CPUs 86-127,342-383 in the recording, not a CPU-less CXL node" \
        in problems[0]["message"]
    assert "node6, node7, node8, node9" in problems[0]["hint"]


def test_vllm_serve_warns_of_a_profile_from_another_machine_and_strict_refuses(machine, vllm_python, tmp_path,
                                                                               monkeypatch, capsys):
    from sactool.host.machine import machine_block
    from sactool.host.sysfs import SysfsReader

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    prof = _vllm_profile(tmp_path, machine=machine_block(SysfsReader(machine("sac2s__30-system-ram"))),
                         host_pool_gib=0.25, max_model_len=4096, max_num_seqs=1)
    argv = _vllm_serve(prof, vllm_python, machine("ram__30-system-ram"), "--format", "json")
    main(argv)
    out, err = capsys.readouterr()
    d = json.loads(out)
    warned = [c for c in d["checks"] if "tuned on another machine" in c]
    assert warned and warned[0].startswith("warning: the profile was tuned on another machine than the recording: ")
    assert "node2: CXL, CPU-less in the recording" in " ".join(d["checks"])
    assert "tuned on another machine" in err
    rc = main([*argv, "--strict"])
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert rc == 4 and problems[0]["exit_code"] == 4 and "tuned on another machine" in problems[0]["message"], problems


# ---- N10: a GPU link trained below its capability is warned in probe and serve ----------------------

def test_probe_and_serve_warn_of_a_gpu_link_trained_at_x8(server_tree, tmp_path, fast_bench_record, capsys):
    tree = server_tree("devdax")              # GPU 6 (0000:1e:00.0) trained at x8 of x16
    assert main(["probe", "--sysfs-root", str(tree), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    w = [x for x in json.loads(out)["warnings"] if x["code"] == "gpu-link-degraded"]
    assert len(w) == 1 and w[0]["message"] == ("GPU 0000:1e:00.0 link trained at 32.0 GT/s x8, both ends capable of "
                                               "32.0 GT/s x16: its ceiling is 31.5 of 63.0 GB/s per direction")
    assert "warning [gpu-link-degraded] GPU 0000:1e:00.0" in err
    prof = tmp_path / "p.yaml"
    assert main(_tune(tree, prof, fast_bench_record, "--gpu-kv-budget", "30GiB", "-q")) == 0
    capsys.readouterr()
    main(["serve", "--profile", str(prof), "--dry-run", "--sysfs-root", str(tree)])
    out, err = capsys.readouterr()
    assert "warning [gpu-link-degraded] rank 6's GPU 6 (0000:1e:00.0) link trained at 32.0 GT/s x8" in " ".join(err.split())
    assert "gpu-link-degraded" not in out


# ---- N11: with --format json|yaml every command prints its warnings on stderr; -q silences them ------

@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_probe_and_serve_data_formats_print_warnings_on_stderr(fmt, server_tree, capsys):
    tree = server_tree("devdax")
    for argv in (["probe", "--sysfs-root", str(tree)],
                 ["serve", "--profile", str(REPO / "profiles/examples/sac-8rank-devdax.yaml"), "--dry-run",
                  "--sysfs-root", str(tree)]):
        main([*argv, "--format", fmt])
        out, err = capsys.readouterr()
        assert "warning [gpu-link-degraded]" in err, (argv, err)
        assert isinstance(yaml.safe_load(out), dict)             # stdout: the data alone (JSON is YAML too)
        main([*argv, "--format", fmt, "-q"])
        assert "warning" not in capsys.readouterr().err


# ---- N25: one form for every command's warnings ------------------------------------------------------

def test_every_renderer_prints_warnings_in_one_form(capsys):
    """probe, bench, tune and fleet each printed warnings their own way (``warning [c] m``, ``warning [c] m — h``,
    ``warning: m (h)``, ``warning c: m``); now all as ``warning [code] message`` and ``  hint: …``."""
    from types import SimpleNamespace as NS

    from sactool.render import bench, fleet, probe, set_quiet, tune
    from sactool.records import Warning

    set_quiet(False)        # an earlier command's -q in this process must not hide them

    w = {"code": "stand_in", "message": "node0 is dram memory standing in for CXL", "hint": "figures describe DRAM"}
    printers = [lambda: probe.render_warnings(NS(warnings=(Warning(**w),))),
                lambda: bench.render_warnings(NS(results=[], warnings=[w])),
                lambda: tune.render_warnings([w]),
                lambda: fleet.render_warnings({"warnings": [w]})]
    for show in printers:
        show()
        assert capsys.readouterr().err == ("warning [stand_in] node0 is dram memory standing in for CXL\n"
                                           "  hint: figures describe DRAM\n")


# ---- N20: "GPUs: none" must not read as if an AMD accelerator were found -----------------------------

def test_probe_without_a_gpu_says_what_it_looked_for(machine, capsys):
    assert main(["probe", "--sysfs-root", str(machine("this-machine"))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("GPUs: none — none of the 6 PCI devices in sys/bus/pci/devices is a GPU (looked for display classes "
            "0x0300/0x0302/0x0380 from NVIDIA, AMD or Intel, and AMD's processing-accelerator class 0x1200)") in out


# ---- N7: one rule for --plot in bench, simulate, probe and serve -------------------------------------

MAGIC = {"svg": b"<?xml", "pdf": b"%PDF-", "png": b"\x89PNG\r\n\x1a\n"}


@pytest.mark.parametrize("fmt", sorted(MAGIC))
def test_simulate_and_probe_plot_write_the_format_their_extension_names(fmt, tmp_path, machine, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    sim, pic = tmp_path / f"sim.{fmt}", tmp_path / f"machine.{fmt}"
    assert main(["simulate", "--platform", "sac-paper", "--context", "16k", "--concurrency", "8",
                 "--hotbuffer-steps", "2", "--placements", "sac", "--plot", str(sim), "-q"]) == 0
    assert main(["probe", "--sysfs-root", str(machine("sac2s__30-system-ram")), "--plot", str(pic), "-q"]) == 0
    capsys.readouterr()
    assert sim.read_bytes().startswith(MAGIC[fmt]) and pic.read_bytes().startswith(MAGIC[fmt])


@pytest.mark.parametrize("fmt", sorted(MAGIC))
def test_bench_plot_writes_the_format_its_extension_names(fmt):
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    from sactool.bench import load_bench
    from sactool.render.bench import plot_bench
    from sactool.render.figures import plot_format

    rec = load_bench(REPO / "tests/fixtures/bench/node0-gather.json")
    assert plot_bench(rec, plot_format(f"b.{fmt}")).startswith(MAGIC[fmt])   # what bench --plot b.<fmt> writes


@pytest.mark.parametrize("argv", [["bench", "gather", "--node", "0", "--preset", "fast"],
                                  ["simulate", "--platform", "sac-paper", "--context", "16k"],
                                  ["probe"],
                                  ["serve", "--profile", str(REPO / "profiles/examples/cxl-one-node.yaml"), "--dry-run"]])
def test_plot_with_another_extension_is_refused_before_the_work(argv, tmp_path, capsys):
    for name in ("x.jpg", "x", "x.svgz"):
        rc = main([*argv, "--plot", str(tmp_path / name)])
        cap = capsys.readouterr()
        assert rc == 2 and "the picture is written as SVG, PDF or PNG, by the file's extension" in cap.err, cap.err
        assert cap.out == "" and not (tmp_path / name).exists()


# ---- N8: the no-GPU hint finishes, and a long run shows progress off a terminal ----------------------

def test_the_no_gpu_hint_runs_a_small_sweep_in_the_simulator(tmp_path):
    """``NUMBA_ENABLE_CUDASIM=1 sactool bench gpu-gather --preset fast`` exactly as the hint prints it (it did
    not finish in 300 s: the full default sweep in a simulator that runs each GPU thread in Python)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    p = subprocess.run([sys.executable, "-m", "sactool.cli", "bench", "gpu-gather", "--preset", "fast", "--format",
                        "json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "options not given take a small sweep (blocks 1, threads 32, record_bytes 656, topk 64" in p.stderr
    res = json.loads(p.stdout)["results"]
    assert [(r["params"]["blocks"], r["params"]["threads_per_block"], r["params"]["record_bytes"]) for r in res
            if r["test"] == "gpu_gather"] == [(1, 32, 656)]


def test_progress_off_a_terminal_is_a_plain_line_now_and_then(monkeypatch, capsys):
    from sactool.render import set_quiet
    from sactool.render.bench import progress_reporter

    set_quiet(False)
    assert not __import__("sys").stderr.isatty()
    cb, close = progress_reporter(0.0)      # every step (the CLI: PLAIN_PROGRESS_S)
    cb("gather/656B/1t", 1, 4)
    cb("gather/656B/2t", 2, 4)
    close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("progress: gather/656B/1t 1/4, ") and err[1].startswith("progress: gather/656B/2t 2/4")
    cb, close = progress_reporter(3600.0)   # a run shorter than the interval: silent
    cb("x", 1, 2)
    close()
    assert capsys.readouterr().err == ""
    cb, close = progress_reporter()         # the commands that do not ask for it: silent off a terminal
    cb("x", 1, 2)
    close()
    assert capsys.readouterr().err == ""


# ---- N9/N24: at 80 columns a table never cuts a value; profile show is readable ---------------------

def test_gpu_gather_table_at_80_columns_cuts_no_value(tmp_path, capsys):
    from test_gpu_tune import gpu_record

    from sactool.bench import load_bench
    from sactool.render.gpugather import render_gpu_gather

    path = gpu_record(tmp_path / "g.json")
    data = json.loads(path.read_text())
    data["protocol"] = {"preset": "fast"}
    for r in data["results"]:
        r["derived"].update(full_prefix_us=3711895.2, full_prefix_over_topk=1812.4, ceiling_ratio=0.42)
    path.write_text(json.dumps(data))
    render_gpu_gather(load_bench(path))
    out = capsys.readouterr().out
    assert "…" not in out and max(map(len, out.splitlines())) <= 80
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert rows and all("2048" in r and ("uniform" in r or "clustered" in r) for r in rows)
    assert all("3711895.2" in r for r in rows) or "not shown at 80 columns: " in out   # whole, or dropped and said


@pytest.mark.parametrize("argv", [["probe", "--sysfs-root", "{srv}"], ["probe", "--sysfs-root", "{dax}"],
                                  ["serve", "--profile", "{examples}/sac-8rank-devdax.yaml", "--dry-run",
                                   "--sysfs-root", "{dax}"],
                                  ["simulate", "--platform", "sac-paper", "--context", "16k,128k", "--concurrency", "64"],
                                  ["profile", "show", "{examples}/sac-8rank-devdax.yaml"]])
def test_tables_at_80_columns_cut_no_value(argv, server_tree, capsys):
    where = {"srv": server_tree(), "dax": server_tree("devdax"), "examples": REPO / "profiles/examples"}
    main([a.format(**where) for a in argv])
    out = capsys.readouterr().out
    assert "…" not in out, out


def test_profile_show_is_one_block_per_setting(capsys):
    """227 lines for 34 settings at 80 columns, digests and paths split mid-token in a 27-column strip: now a
    line per setting (name = value (source)) and its detail wrapped at spaces under it."""
    from sactool.profile import settings_fields

    assert main(["profile", "show", str(REPO / "profiles/examples/sac-8rank-devdax.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    heads = [ln for ln in out if " = " in ln and not ln.startswith(" ")]
    assert len(heads) == len(settings_fields()) and len(out) <= 4.5 * len(heads)   # was 6.7 per setting
    assert "pool.dax_devices = [dax0.0, dax1.0]  (user)" in heads or any(
        h.startswith("pool.dax_devices = [dax0.0, dax1.0]  (") for h in heads)


# ---- N12: the DP-attention hint only where DP attention is not already on -----------------------------

@pytest.mark.parametrize("attn_dp, offered", [("1", True), ("8", False)])
def test_dp_attention_hint_only_when_it_would_change_something(attn_dp, offered, tmp_path, machine, capsys):
    rc = main(["tune", "--sysfs-root", str(machine("this-machine")), "--bench",
               str(REPO / "tests/fixtures/bench/node0-gather.json"), "--context", "32k", "--concurrency", "256",
               "--tp", "8", "--attn-dp", attn_dp, "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 6 and "such requests fit" in err, err
    assert ("use DP attention (--attn-dp = --tp)" in err) == offered


# ---- N14: bench's refusal on a recording names what is there, in words that parse ---------------------

def test_bench_on_a_recording_names_the_device_or_the_missing_node(machine, capsys):
    dev = machine("sac2s__20-devdax")        # CXL as devdax devices: no node2 in this phase
    assert main(["bench", "gather", "--node", "dax0.0", "--sysfs-root", str(dev)]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "there bench would measure DAX device dax0.0 (devdax, 512.00 MiB) from CPUs 0 (node0): gather with 1 thread" \
        in err and "node2" not in err
    assert "less than the 1.00 GiB wanted (the 1.00 GiB floor, as the last-level cache of node0's CPUs is not " \
           "reported)" in err
    assert main(["bench", "gather", "--node", "2", "--sysfs-root", str(dev)]) == 3
    assert "there node2 does not exist (NUMA nodes: node0, node1)" in capsys.readouterr().err


# ---- N15: in serve's picture red means a downgraded link, never a rank line ---------------------------

def test_rank_line_colours_are_neither_red_nor_orange():
    import colorsys

    from sactool.render.machine import TARGET_COLOURS

    for c in TARGET_COLOURS:
        r, g, b = (int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))
        h, _, s = colorsys.rgb_to_hls(r, g, b)
        assert s < 0.2 or 50 / 360 < h < 340 / 360, f"{c} reads as red/orange (hue {h * 360:.0f})"


# ---- N16: every picture in the pages links to its full size ------------------------------------------

def test_every_picture_in_the_pages_links_to_its_full_size():
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    bare = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in pages
            for m in re.finditer(r"(?<!\[)!\[[^\]]*\]\(([^)\s]+)\)", p.read_text())]
    assert bare == [], "a picture shown at the page's width cannot be read: link it to itself\n" + "\n".join(bare)
    linked = [(m.group(1), m.group(2)) for p in pages
              for m in re.finditer(r"\[!\[[^\]]*\]\(([^)\s]+)\)\]\(([^)\s]+)", p.read_text())]
    assert linked and all(img == target for img, target in linked)


# ---- N18: the built site navigates and searches from file:// ----------------------------------------------

def test_the_site_is_built_for_file_urls():
    import yaml

    cfg = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)   # names only, no tags resolved
    assert cfg["use_directory_urls"] == "false"           # links name page.html, not page/ (a directory on file://)
    assert "offline" in cfg["plugins"]                     # search without a server
    assert cfg["theme"]["font"] == "false"                 # no fonts fetched


# ---- N19: docs slips — bench <test> --help lists what the test reads, the pages cite no issue numbers ----

@pytest.mark.parametrize("test, absent, present", [("latency", ["--record-bytes", "--topk", "--threads", "--plot"],
                                                    ["--seed", "--size"]),
                                                   ("bandwidth", ["--record-bytes", "--pattern", "--seed"],
                                                    ["--threads"]),
                                                   ("gather", [], ["--record-bytes", "--topk", "--prefetch", "--plot"])])
def test_bench_test_help_lists_only_the_options_it_reads(test, absent, present, capsys):
    import re

    assert main(["bench", test, "--help"]) == 0
    listed = set(re.findall(r"^│ (--[a-z][a-z-]+)", capsys.readouterr().out, re.M))   # the options column
    assert not listed & set(absent) and set(present) <= listed


@pytest.mark.parametrize("argv", [["bench", "latency", "--record-bytes", "656"],
                                  ["bench", "--topk", "64", "mlp"]])
def test_bench_refuses_an_option_the_test_would_ignore(argv, capsys):
    assert main([*argv, "--node", "0"]) == 2
    err = capsys.readouterr().err
    assert "does nothing for 'bench" in err and "it is read by bench convert, gather" in err or \
        "it is read by bench gather" in err, err


def test_the_pages_cite_no_issue_tracker_numbers():
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    cited = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in pages for m in re.finditer(r"\bissue \d+", p.read_text())]
    assert cited == [], "a reader has no issue tracker: say what was measured instead\n" + "\n".join(cited)


def _plot_commands() -> list[tuple[str, ...]]:
    """Every command path whose --help lists --plot, read from the CLI itself (a new command with --plot is
    checked without editing this test)."""
    import typer

    from sactool.cli.app import app

    found = []

    def walk(cmd, path):
        if any("--plot" in p.opts and not getattr(p, "hidden", False) for p in cmd.params):
            found.append(path)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):   # a group (typer carries its own click)
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_every_plot_option_says_the_extension_rule_in_the_real_help(capsys):
    """N19: `bench --help` said "to this PNG" after --plot learnt .svg and .pdf (7249c6a changed only the
    code). Each command's real help, with rich's boxes and wrapping taken out, states the rule."""
    import re

    paths = _plot_commands()
    assert {p[0] for p in paths} >= {"bench", "probe", "serve", "simulate"} and ("bench",) in paths, paths
    wrong = []
    for path in paths:
        assert main([*path, "--help"]) == 0
        text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", capsys.readouterr().out).split())
        if ".svg, .pdf or .png" not in text or "to this PNG" in text:
            wrong.append(" ".join(path))
    assert wrong == [], f"--plot help without the .svg/.pdf/.png rule: {wrong}"


def test_files_page_lists_every_command_that_writes_a_plot():
    """N19: docs/reference/files.md's plots row named only `bench --plot` and `simulate --plot`; probe and
    serve --dry-run draw too. The commands are those whose CLI takes --plot (bench's tests count as bench)."""
    import re

    rows = [line for line in (REPO / "docs/reference/files.md").read_text().splitlines()
            if line.startswith("| plots")]
    assert len(rows) == 1, rows
    listed = set(re.findall(r"`(?:sactool )?([a-z-]+)[^`]*--plot`", rows[0]))
    assert {p[0] for p in _plot_commands()} <= listed, rows[0]
    assert "SVG, PDF or PNG" in rows[0], rows[0]


def test_no_page_ends_a_paragraph_on_a_colon_with_nothing_after_it():
    """N19: probe.md had "The CXL port tree shows … On the two-socket recording:" and then the next
    paragraph, about DAX. A paragraph that ends on a colon introduces a list, table, code block or
    picture; anything else (or the page's end) is the dangling sentence."""
    import re

    introduced = re.compile(r"\s*(```|[-*+] |\d+\. |\||!\[|\[!\[|<|    |>|\$\$)")
    bad = []
    for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        lines = p.read_text().splitlines() + [""]
        fenced = False
        for n, line in enumerate(lines[:-1]):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if fenced or not line.rstrip().endswith(":") or lines[n + 1].strip():
                continue
            nxt = next((x for x in lines[n + 1:] if x.strip()), "")
            if not introduced.match(nxt):
                bad.append(f"{p.relative_to(REPO)}:{n + 1}: …{line[-60:]}")
    assert bad == [], "a paragraph ends on a colon and nothing it introduces follows:\n" + "\n".join(bad)


# ---- N21: a timing claim in the pages says the machine (and its load) it was measured on --------------

def test_timing_claims_beside_commands_name_the_machine_and_load():
    """`sactool bench  # … (< 1 min here)` took 239 s on a busy 2-vCPU VM, `simulate --explain (~11 s)` 149 s:
    a duration beside a command says what it was measured on, or that it is an estimate."""
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    duration = re.compile(r"\d+(\.\d+)?\s?(s|min|minutes|seconds)\b")
    bad = []
    for p in pages:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if not re.match(r"\s*(sactool|mpirun|python|\$)", line) or "#" not in line:
                continue
            comment = line.split("#", 1)[1]
            if duration.search(comment) and not re.search(r"\bload\b|CPU time|estimate", comment):
                bad.append(f"{p.relative_to(REPO)}:{n}: {line.strip()}")
    assert bad == [], "\n".join(bad)


# ---- N23: tune's fits column says why a size does not fit ------------------------------------------

def test_tune_fits_column_says_why_not(tmp_path, machine, capsys):
    rc = main(["tune", "--sysfs-root", str(machine("this-machine")), "--bench",
               str(REPO / "tests/fixtures/bench/node0-gather.json"), "--context", "16k,32k", "--tp", "1",
               "--gpu-kv-budget", "3GiB", "--concurrency", "8", "--steps", "4", "--replicates", "1",
               "--out", str(tmp_path / "p.yaml"), "-q"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = [ln for ln in out.splitlines() if ln.rstrip().endswith(("yes", "no: GPU", "no: pool", "no: ratio"))]
    assert any(r.rstrip().endswith("no: GPU") for r in rows), out
    why = [ln for ln in out.splitlines() if ln.startswith("fits no: GPU — at ")]
    assert len(why) == 1 and "slots, GPU: needs" in why[0] and "budget 3.00 GiB" in " ".join(out.split())


@pytest.mark.parametrize("shape", ["empty PCI bus", "driver names a GPU"])
def test_serve_does_not_call_an_unreadable_gpu_list_none(shape, machine, node0_pinned, monkeypatch, capsys):
    """An empty sys/bus/pci/devices (a sandbox) or a GPU the NVIDIA driver names but the PCI scan missed:
    the GPUs are unknown, not absent, so no exit 3 for them."""
    import shutil
    import sys

    root = machine("this-machine")
    if shape == "empty PCI bus":
        pci = root / "sys/bus/pci/devices"
        shutil.rmtree(pci)
        pci.mkdir()
    else:
        (root / "proc/driver/nvidia/gpus/0000:18:00.0").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))
    main(["serve", "--profile", str(node0_pinned()), "--dry-run", "--python", sys.executable,
          "--sysfs-root", str(root), "--format", "json"])
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert not any("CUDA devices" in p["message"] for p in problems), problems
