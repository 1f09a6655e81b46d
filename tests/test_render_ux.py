"""Renderers as a user reads them (issue 11 items 15, 21): bench warnings aggregated per kind with
the affected figures marked in the tables; plots with only the panels that have data, loaded
latency joined along bandwidth, one labelled tick per measured record size, p05–p95 error bars;
the simulate plot keeps every placement visible and shows TBT.

Inputs are records shaped like ``sactool bench`` / ``simulate`` output (built here so the test
controls which results are noisy); the figures are inspected as matplotlib objects, and the PNGs
were looked at as pictures while writing this."""

from __future__ import annotations

import pytest

from sactool import records
from sactool.bench.record import from_data


@pytest.fixture(autouse=True)
def _not_quiet():
    """An earlier in-process ``--quiet`` run must not silence these renderers."""
    from sactool.render import set_quiet

    set_quiet(False)


def _stats(median, p05, p95, n=5):
    return {"median": median, "mean": median, "stdev": (p95 - p05) / 4, "min": p05, "max": p95, "p05": p05,
            "p95": p95, "n": n}


def _res(test, key, params, derived, stats, unit):
    return {"test": test, "key": key, "params": params, "derived": derived, "unit": unit, "stats": stats,
            "memory_node": "node0", "cpu_node": "node0"}


def bench_record(tests=("latency", "loaded", "gather", "bandwidth"), noisy=()):
    rs = []
    if "latency" in tests:
        for v, ns in (("page_local", 95.0), ("random", 250.0)):
            rs.append(_res("latency", f"latency/{v}", {"variant": v}, {"latency_ns": ns}, _stats(ns, ns * .9, ns * 1.2),
                           "ns"))
    if "loaded" in tests:
        # delay order 0, 50, 100, …: the bandwidth is not monotonic in the delay (noise), as measured here
        for d, bw, lat in ((0, 28e9, 300.0), (50, 16e9, 280.0), (100, 18e9, 290.0), (200, 4e9, 260.0),
                           (400, 1e9, 255.0), (None, 0.0, 250.0)):
            rs.append(_res("loaded", f"loaded/{d}", {"inject_delay_iterations": d},
                           {"latency_ns": lat, "reader_bandwidth_bytes_per_s": bw}, _stats(lat, lat * .95, lat * 1.3),
                           "ns"))
    if "gather" in tests:
        for rb in (656, 1152):
            for th in (1, 2):
                bw = 4e9 * th * (1 + rb / 4096)
                rs.append(_res("gather", f"gather/{rb}B/{th}t/d8/uniform",
                               {"record_bytes": rb, "threads": th, "prefetch_distance": 8, "index_pattern": "uniform"},
                               {"bandwidth_bytes_per_s": bw, "ns_per_record": rb / bw * 1e9, "topk_step_us": 100.0},
                               _stats(bw, bw * .8, bw * 1.1), "bytes_per_s"))
    if "bandwidth" in tests:
        for th in (1, 2):
            rs.append(_res("read", f"read/{th}t", {"threads": th}, {"bandwidth_bytes_per_s": 14e9 * th},
                           _stats(14e9 * th, 13e9 * th, 15e9 * th), "bytes_per_s"))
    warnings = [{"code": "stand_in", "message": "node0 is dram memory standing in for CXL", "hint": "figures describe "
                 "this memory, not a CXL device"}]
    for r in rs:
        if r["key"] in noisy or "all" in noisy:
            warnings.append({"code": "descheduled", "message": f"{r['key']}: its threads ran 60% of the sample time "
                             "(other processes had the CPUs)", "hint": "wall-clock figures are inflated; rerun when idle"})
            warnings.append({"code": "high_variance", "message": f"{r['key']}: relative stdev 25%",
                             "hint": "the host is noisy: use --preset rigorous or rerun when idle"})
    d = records.header("bench", 1)
    d.update({"command": "all", "tests": list(tests), "protocol": {"preset": "fast"}, "memory_node": "node0",
              "cpu_node": "node0", "cpus": [0, 1], "stand_in": None, "buffer": {}, "results": rs,
              "warnings": warnings, "complete": True})
    return from_data(d)


# ---------------------------------------------------------------------------------------------
# item 15
# ---------------------------------------------------------------------------------------------
def test_bench_warnings_are_one_line_per_kind_and_marked_in_tables(capsys):
    from sactool.render.bench import render_bench

    rec = bench_record(noisy=("latency/random", "gather/656B/2t/d8/uniform", "read/1t", "loaded/50"))
    render_bench(rec)
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.startswith("warning")]
    codes = [ln.split()[1] for ln in lines]
    assert sorted(codes) == sorted({"[stand_in]", "[descheduled]", "[high_variance]"}), err
    desc = next(ln for ln in err.splitlines() if "[descheduled]" in ln)
    assert "4 results" in desc or "4 of" in desc                       # how many are affected
    # the tables mark exactly the affected figures, with a legend
    marked = [ln for ln in out.splitlines() if "*" in ln and "│" in ln or ("*" in ln and ln.strip()[:1].isdigit())]
    assert any("random" in ln for ln in marked) and not any("page_local" in ln and "*" in ln
                                                            for ln in out.splitlines())
    assert "* " in out and ("noisy" in out or "descheduled" in out)


def test_quiet_machine_bench_has_no_marks(capsys):
    from sactool.render.bench import render_bench

    render_bench(bench_record())
    out, err = capsys.readouterr()
    assert "*" not in out and err.count("warning") == 1


# ---------------------------------------------------------------------------------------------
# item 21
# ---------------------------------------------------------------------------------------------
pytest.importorskip("matplotlib", reason="plots need the 'plot' extra")


def _lines(ax):
    """The data lines of a panel (not error-bar caps or marker-only overlays)."""
    return [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1 and ln.get_linestyle() not in ("None", "none", "")]


def test_bench_plot_panels_follow_the_data():
    from sactool.render.bench import bench_figure

    assert [a.get_title().split(",")[0] for a in bench_figure(bench_record(("gather",))).axes] == ["Top-k gather"]
    assert [a.get_title().split(",")[0] for a in bench_figure(bench_record(("loaded",))).axes] == ["Loaded latency"]
    assert len(bench_figure(bench_record()).axes) == 2


def test_bench_plot_loaded_is_joined_by_bandwidth_with_error_bars():
    from sactool.render.bench import bench_figure

    fig = bench_figure(bench_record(("loaded",)))
    (ax,) = fig.axes
    (line,) = _lines(ax)
    xs = list(line.get_xdata())
    assert xs == sorted(xs) and len(xs) == 6
    assert ax.containers, "p05–p95 error bars"


def test_bench_plot_gather_ticks_name_each_record_size():
    from sactool.render.bench import bench_figure

    fig = bench_figure(bench_record(("gather",)))
    (ax,) = fig.axes
    fig.canvas.draw()
    labels = {t.get_text() for t in ax.get_xticklabels() if t.get_text()}
    assert {"656", "1152"} <= labels
    assert len(ax.containers) >= 2    # error bars per thread count


def test_bench_plot_without_plottable_tests_is_refused_before_the_work(tmp_path, capsys):
    from sactool.entry import main

    code = main(["bench", "latency", "--plot", str(tmp_path / "x.png"), "--size", "64MiB", "--preset", "fast"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--plot" in err and not (tmp_path / "x.png").exists()


def test_simulate_plot_shows_every_placement_and_tbt():
    from sactool.data import paper_platform
    from sactool.render.simfigure import simulation_figure
    from sactool.simulate.api import SimulationOptions, simulate
    from sactool.simulate.platform import load_platform

    plat = load_platform(paper_platform(), None)
    res = simulate(SimulationOptions(plat, contexts=(16384,), concurrency=(8, 16), hotbuffer_steps=2))
    fig = simulation_figure(res)
    titles = [a.get_title() for a in fig.axes]
    assert any("TBT" in t for t in titles) and any("throughput" in t for t in titles)
    ax = fig.axes[0]
    styles = {(ln.get_color(), ln.get_marker(), ln.get_linestyle()) for ln in _lines(ax)}
    assert len(styles) == len(_lines(ax)) == 3          # SAC, RDMA, DRAM each look different
    markers = {ln.get_label().split()[0]: (ln.get_marker(), ln.get_markerfacecolor()) for ln in _lines(ax)}
    assert len(set(markers.values())) == 3
