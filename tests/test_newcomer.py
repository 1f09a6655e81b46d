"""What a newcomer trips over (issue 18): each test fails on the behaviour the walk-through found."""

from __future__ import annotations

import json

import pytest

from sactool.cli import main


@pytest.mark.parametrize("arg", ["sac-paper", "sactool/data/platforms/sac-paper.yaml"])
def test_simulate_platform_by_packaged_name_or_readme_path_from_any_directory(arg, tmp_path, monkeypatch, capsys):
    """From a directory that holds no checkout: the packaged name, and the README's path form (which
    exists only inside a checkout) both give the installed package's platform file."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--platform", arg, "--context", "32k", "--concurrency", "8", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["points"] and "the packaged sac-paper.yaml" in err


def test_simulate_platform_unknown_name_lists_the_packaged_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--platform", "sac-papr", "--context", "32k"]) == 2
    err = capsys.readouterr().err
    assert "no packaged platform of that name" in err and "hint: give a platform file, or one of: sac-paper" in err


def _placement_lines(ax):
    return [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]


def test_simulate_plot_at_one_concurrency_puts_context_on_the_x_axis():
    """One concurrency, four contexts: each panel has one line per placement over the contexts (not a
    column of twelve points at x = 64), and the x axis says so."""
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    from sactool.data import paper_platform
    from sactool.render.simfigure import simulation_figure
    from sactool.simulate.api import SimulationOptions, simulate
    from sactool.simulate.platform import load_platform

    ctxs = (16384, 32768, 65536, 131072)
    res = simulate(SimulationOptions(load_platform(paper_platform(), None), contexts=ctxs, concurrency=(8,),
                                     hotbuffer_steps=2))
    fig = simulation_figure(res)
    for ax in fig.axes:
        lines = _placement_lines(ax)
        assert sorted(ln.get_label() for ln in lines) == ["RDMA pool", "SAC/CXL", "local DRAM"]
        assert all(list(ln.get_xdata()) == list(ctxs) for ln in lines)
        assert ax.get_xlabel() == "context (tokens), at concurrency 8"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["16K", "32K", "64K", "128K"]


def test_simulate_plot_local_dram_does_not_hide_sac_where_they_coincide():
    """DRAM's marker is see-through and larger than SAC's filled one, drawn over it: where the two
    coincide (always, with a stand-in profile) SAC's circle shows inside DRAM's diamond."""
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    from matplotlib.colors import to_rgba

    from sactool.render.simfigure import STYLE

    dram, sac = STYLE["dram"], STYLE["sac"]
    assert dram["markerfacecolor"] == "none" or to_rgba(dram["markerfacecolor"])[3] == 0
    assert dram["markersize"] > sac["markersize"] and dram["zorder"] > sac["zorder"]


def test_profile_show_keeps_every_setting_name_whole_at_80_columns(monkeypatch, capsys):
    """A setting's name is what one types to change it: at 80 columns none is cut ('hisparse.device_buf…')."""
    from sactool.profile import settings_fields

    from conftest import EXAMPLES

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["profile", "show", str(EXAMPLES / "sac-8rank-devdax.yaml")]) == 0
    out = capsys.readouterr().out
    names = [ln.split(" = ")[0] for ln in out.splitlines() if " = " in ln and not ln.startswith(" ")]
    assert set(names) == set(settings_fields())          # every one, each whole at its line's start
    assert "…" not in out


def test_bench_gather_trace_is_one_step_per_line(tmp_path, capsys):
    """20 lines of 100 ids are 20 steps of top-100: with --topk 2048 no whole step exists (refused, exit 4,
    naming the --topk to pass) where it used to report 0 steps with a step time and a bandwidth; with
    --topk 100 the record has 20 steps; a trace of no steps is refused."""
    import random

    rng = random.Random(0)
    t = tmp_path / "steps.txt"
    t.write_text("".join(" ".join(str(i) for i in rng.sample(range(10000), 100)) + "\n" for _ in range(20)))
    common = ["bench", "gather", "--trace", str(t), "--size", "8MiB", "--record-bytes", "656", "--threads", "1",
              "--preset", "fast"]
    assert main([*common, "--topk", "2048"]) == 4
    err = capsys.readouterr().err
    assert "each of its 20 step(s) selects 100 records, and --topk is 2048" in err and "hint: pass --topk 100" in err
    out = tmp_path / "b.json"
    assert main([*common, "--topk", "100", "--out", str(out)]) == 0
    capsys.readouterr()
    (g,) = [r for r in json.loads(out.read_text())["results"] if r["test"] == "gather"]
    assert g["params"]["steps"] == 20 and g["params"]["indices"] == 2000 and g["params"]["index_pattern"] == "trace"
    # every pass of the trace lands at a fresh shift: the working set is the buffer's records, not the trace's
    assert g["params"]["footprint_bytes"] == g["params"]["records"] * 656 == (8 << 20) // 656 * 656
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["bench", "gather", "--trace", str(empty), "--size", "8MiB", "--topk", "4"]) == 4
    assert "holds no steps" in capsys.readouterr().err
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("1 2 3\n4 5\n")
    assert main(["bench", "gather", "--trace", str(ragged), "--size", "8MiB", "--topk", "3"]) == 4
    assert "every step must select the same number" in capsys.readouterr().err


def test_profile_validate_json_reports_an_invalid_profile_on_stdout(tmp_path, capsys):
    from conftest import EXAMPLES

    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "cxl-one-node.yaml").read_text().replace("host_to_device_ratio: 8",
                                                                        "host_to_device_ratio: -1"))
    assert main(["profile", "validate", str(bad), "-f", "json"]) == 4
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert d["valid"] is False and d["exit_code"] == 4 and "hisparse.host_to_device_ratio" in d["error"]
    assert err.startswith("error: ") and "hint: " in err
    assert main(["profile", "validate", str(EXAMPLES / "cxl-one-node.yaml"), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True


def test_bench_convert_rows_are_marked_where_warned(capsys):
    """A descheduled convert result carries '*' in the convert table, as every other table marks it."""
    from test_render_ux import _res, _stats

    from sactool import records
    from sactool.bench.record import from_data
    from sactool.render import set_quiet
    from sactool.render.bench import render_bench

    set_quiet(False)
    rs = [_res("convert", f"convert/{impl}/1152B/61L/1t", {"implementation": impl, "record_bytes": 1152, "layers": 61,
                                                            "tokens": 238, "threads": 1},
               {"bandwidth_bytes_per_s": bw, "seconds_per_gb": 1e9 / bw,
                "pass_share": {"gather": 0.4, "transpose": 0.3, "scatter": 0.3}}, _stats(bw, bw * .9, bw * 1.1),
               "bytes_per_s") for impl, bw in (("numba", 0.74e9), ("numpy", 0.39e9))]
    d = records.header("bench", 1)
    d.update({"command": "convert", "tests": ["convert"], "protocol": {"preset": "fast"}, "memory_node": "node0",
              "cpu_node": "node0", "cpus": [0], "stand_in": None, "buffer": {}, "results": rs, "complete": True,
              "warnings": [{"code": "descheduled", "message": "convert/numba/1152B/61L/1t: its threads ran 40% of "
                            "the sample time", "hint": "rerun when idle"}]})
    render_bench(from_data(d))
    out = capsys.readouterr().out
    numba = next(ln for ln in out.splitlines() if "numba" in ln and "│" in ln)
    numpy = next(ln for ln in out.splitlines() if "numpy" in ln and "│" in ln)
    assert "0.74 GB/s*" in numba and "*" not in numpy
    assert "understated" in out           # the legend, with the direction of the error


from test_cachedir import _as_nobody, needs_root, shared_tmp  # noqa: E402,F401  (uid 65534, no HOME)


@needs_root
def test_quiet_plot_as_nobody_prints_nothing(shared_tmp):
    """A user without a writable HOME: matplotlib used to warn "created a temporary cache directory"
    on stderr even under -q (its own log); sactool points MPLCONFIGDIR at its cache directory first."""
    import sys

    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    png = shared_tmp / "x.png"
    r = _as_nobody([sys.executable, "-c", "from sactool.entry import main; main()", "-q", "simulate", "--platform",
                    "sac-paper", "--context", "16k", "--concurrency", "8", "--hotbuffer-steps", "2", "--placements",
                    "sac", "--plot", str(png)], shared_tmp)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and png.stat().st_size > 0
    assert (shared_tmp / "sactool-65534" / "matplotlib").is_dir()


def test_quiet_silences_matplotlib_s_own_font_cache_warning():
    """matplotlib warns "building the font cache" when that build takes over 5 s — a first plot on a busy
    machine (the run above printed it once under load): under --quiet its log says nothing below errors."""
    import logging

    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    from sactool.render import set_quiet
    from sactool.render.figures import require_matplotlib

    log = logging.getLogger("matplotlib")
    before = log.level
    log.setLevel(logging.NOTSET)   # a quiet run earlier in this process left it at ERROR
    try:
        set_quiet(False)
        require_matplotlib()
        assert log.getEffectiveLevel() <= logging.WARNING
        set_quiet(True)
        require_matplotlib()
        assert log.getEffectiveLevel() == logging.ERROR
    finally:
        set_quiet(False)
        log.setLevel(before)


def test_loaded_latency_plot_labels_do_not_overlap():
    """The delays of a real sweep (this VM's: readers' bandwidth from 3.2 GB/s down to 0.06 GB/s and idle,
    on a linear axis) used to pile their labels up at the low end; now no two labels overlap and idle
    and full load are named."""
    pytest.importorskip("matplotlib", reason="--plot needs the 'plot' extra")
    from test_render_ux import _res, _stats

    from sactool import records
    from sactool.bench.record import from_data
    from sactool.render.bench import bench_figure

    sweep = ((0, 3.18, 442.6), (25, 2.45, 764.4), (50, 1.98, 989.2), (100, 0.85, 974.7), (200, 0.70, 849.6),
             (400, 0.42, 1467.9), (800, 0.21, 798.3), (1600, 0.10, 977.7), (3200, 0.06, 879.3), (None, 0.0, 575.0))
    rs = [_res("loaded", f"loaded/{d if d is not None else 'idle'}", {"inject_delay_iterations": d},
               {"latency_ns": lat, "reader_bandwidth_bytes_per_s": bw * 1e9}, _stats(lat, lat * .9, lat * 1.1), "ns")
          for d, bw, lat in sweep]
    d = records.header("bench", 1)
    d.update({"command": "loaded", "tests": ["loaded"], "protocol": {"preset": "fast"}, "memory_node": "node0",
              "cpu_node": "node0", "cpus": [0, 1], "stand_in": None, "buffer": {}, "results": rs, "warnings": [],
              "complete": True})
    fig = bench_figure(from_data(d))
    (ax,) = fig.axes
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    labels = [t for t in ax.texts]
    boxes = [t.get_window_extent(r) for t in labels]
    assert all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    frame = ax.get_window_extent(r)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 for b in boxes)      # none cut at the panel's edge
    names = {t.get_text() for t in labels}
    assert {"idle", "delay 0"} <= names and len(names) >= 6


def test_gpu_gather_without_a_gpu_gives_a_hint(capsys):
    """No GPU here, and numba's CUDA simulator off: one error line and a hint line (there was no hint)."""
    from sactool.bench.gpuplace import gpu_runtime, simulated
    from sactool.errors import TopologyError

    if simulated():
        pytest.skip("numba's CUDA simulator is on in this process: a GPU 'exists'")
    try:
        gpu_runtime()
    except TopologyError as e:
        assert "no CUDA" in e.message and e.hint and ("NUMBA_ENABLE_CUDASIM=1" in e.hint or "sactool[gpu]" in e.hint)
    else:
        pytest.skip("this machine has a CUDA GPU: the refusal cannot happen here")


def test_fleet_headers_count_in_the_singular_too():
    from sactool.render.fleet import _n

    assert (_n(1, "host"), _n(2, "host"), _n(1, "rank"), _n(0, "rank")) == ("1 host", "2 hosts", "1 rank", "0 ranks")


def test_a_pinned_pool_is_not_called_free():
    from sactool.render.tune import _pool_cell

    pinned = {"name": "node0", "capacity_bytes": 1 << 30, "capacity_source": "--pool-bytes (node0)"}
    assert _pool_cell(pinned) == "node0 (1.00 GiB pinned by --pool-bytes)"
    free = {"name": "node0", "capacity_bytes": 1 << 30, "capacity_source": "node0/meminfo MemFree"}
    assert _pool_cell(free) == "node0 (1.00 GiB free)"
    assert _pool_cell({"name": "dax0.0", "capacity_bytes": 1 << 30}) == "dax0.0 (1.00 GiB device size)"
