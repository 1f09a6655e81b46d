"""``sactool bench``: option declarations, option values → :class:`sactool.bench.api.BenchOptions`,
early checks, run, write, render, exit code (the bench package itself never sees typer or rich)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from sactool.bench.protocol import PRESETS
from sactool.cli.common import (FormatOpt, QuietOpt, SysfsRootOpt, check_format, check_output, choices, example,
                                flag, value, write_result)
from sactool.errors import Interrupted, UsageError
from sactool.memory.placed import HUGEPAGE_CHOICES

from sactool.bench.catalog import TESTS  # light: no numpy/numba until something is measured

TEST_SETS = {**{t: (t,) for t in TESTS}, "all": TESTS}

PATTERNS = ("uniform", "clustered", "trace")
"""= :data:`sactool.bench.indices.PATTERNS` (that module imports numpy; a test keeps them equal)."""
PLOTTED = ("loaded", "gather")
"""The tests ``--plot`` draws (:func:`sactool.render.bench.bench_figure`)."""

if TYPE_CHECKING:   # choices() builds these str Enums from data at run time: the checker sees their base
    from enum import Enum as Hugepages, Enum as Pattern, Enum as Preset
else:
    Preset = choices("Preset", tuple(PRESETS))
    Pattern = choices("Pattern", PATTERNS)
    Hugepages = choices("Hugepages", HUGEPAGE_CHOICES)


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    from sactool.units import parse_int_list

    return None if text is None else parse_int_list(text, what=what)


def parse_node(text: str | None) -> int | str | None:
    """``None`` (pool node), ``"all"``, ``3``, ``node3``, or a devdax device (``dax0.0``, ``/dev/dax0.0``)."""
    if text is None:
        return None
    s = str(text).strip().lower()
    if s == "all":
        return "all"
    if s.rsplit("/", 1)[-1].startswith("dax"):
        return str(text).strip()
    s = s[4:] if s.startswith("node") else s
    if not s.isdigit():
        raise UsageError(f"--node {text!r} is not a node", "give a node id (2 or node2), a DAX device (dax0.0) or 'all'")
    return int(s)


def parse_cpus(text: str | None, topo) -> tuple[int, ...] | None:
    """``0-3,8`` (CPU ids) or ``nodeN`` (that node's CPUs; a CPU-less node is refused)."""
    if text is None:
        return None
    s = str(text).strip()
    if s.lower().startswith("node"):
        from sactool.memory.nodes import check_cpu_node

        n = parse_node(s)
        return tuple(check_cpu_node(topo, n).cpus)  # type: ignore[arg-type]
    from sactool.host.sysfs import parse_cpulist

    try:
        cpus = parse_cpulist(s)
    except ValueError as e:
        raise UsageError(f"--cpus {text!r} is not a CPU list ({e})", "write it like 0-3,8 or node0") from None
    if not cpus:
        raise UsageError("--cpus is empty", "give CPU ids like 0,1 or a node like node0")
    return cpus


def _check_outputs(test: str, out: Path | None, plot: Path | None, force: bool) -> None:
    """Outputs first: nothing is measured for a result that could not be written."""
    check_output(out, force)
    if plot is not None:
        if not any(t in PLOTTED for t in TEST_SETS[test]):
            raise UsageError(f"--plot draws loaded latency and gathers; 'bench {test}' measures neither",
                             "use --plot with bench loaded, gather or all")
        from sactool.render.figures import plot_format

        plot_format(plot)                 # .svg, .pdf or .png (and matplotlib), or refused: the one --plot rule
        check_output(plot, force, "--plot")


def run_command(test: str, *, node, cpus, size, threads, record_bytes, topk, prefetch, pattern, trace, hugepages,
                preset, seed, out: Path | None, force: bool, fmt: str, plot: Path | None,
                sysfs_root: Path | None = None, no_wait: bool = False, dry_run: bool = False) -> int:
    from sactool.bench.api import BenchOptions, run_bench, run_matrix
    from sactool.memory.nodes import topology
    from sactool.units import parse_size

    _check_outputs(test, out, plot, force)
    if trace is not None and pattern == "uniform":
        pattern = "trace"
    nd = parse_node(node)
    from sactool.host.sysfs import SysfsReader

    reader = SysfsReader(sysfs_root)   # a recording: bench plans there and says what it would measure
    topo = topology(reader)
    opts = BenchOptions(
        tests=TEST_SETS[test], node=nd if isinstance(nd, int) else None,
        dax=nd if isinstance(nd, str) and nd != "all" else None, cpus=parse_cpus(cpus, topo),
        size_bytes=parse_size(size, what="--size") if size else None, threads=_ints(threads, "--threads"),
        record_bytes=_ints(record_bytes, "--record-bytes"), topk=topk, prefetch=_ints(prefetch, "--prefetch"),
        pattern=pattern, trace=str(trace) if trace else None, hugepages=hugepages, preset=preset, seed=seed,
        command=test, wait=not no_wait)
    if dry_run:
        return _dry_run(opts, reader, out, plot, fmt)
    from sactool.fleet.mpi import detect

    fleet = detect()
    if fleet is not None:  # under mpirun: the contention sweep over the ranks
        from sactool.cli.fleet import bench_fleet

        return bench_fleet(fleet, opts, nd, out, force, fmt, plot)
    from sactool.render import note
    from sactool.render.bench import plot_bench, progress_reporter, render_bench

    cb, close = progress_reporter()
    try:
        rec = (run_matrix if nd == "all" else run_bench)(opts, reader=reader, progress=cb, notify=note)
    finally:
        close()
    from sactool import records
    from sactool.render import emit_data

    # show the result first: whatever happens to the files, what was measured is on the screen
    if fmt == "table":
        render_bench(rec)
    else:
        from sactool.render.bench import render_warnings

        render_warnings(rec)
        emit_data(rec.data, fmt)
    failed: list[tuple[str, Exception]] = []
    if out is not None:
        kind = "yaml" if out.suffix in (".yaml", ".yml") else "json"
        try:
            write_result(out, records.dumps(rec.data, kind), force=force, kind="bench", suffix=f".{kind}",
                         fallback_stdout=None if fmt != "table" else (lambda: emit_data(rec.data, "json")),
                         on_stdout=fmt != "table")
        except Exception as e:  # noqa: BLE001 - SactoolError; re-raised below, after the plot
            failed.append(("record", e))
    if plot is not None:
        try:
            from sactool.render.figures import plot_format

            fmt_plot = plot_format(plot)
            write_result(plot, plot_bench(rec, fmt_plot), force=force, kind="bench-plot", suffix=f".{fmt_plot}")
            note(f"plot: {plot}")
        except Exception as e:  # noqa: BLE001
            failed.append(("plot", e))
    if failed:
        raise _both(failed)
    if not rec.complete:
        kept = len(rec.results)
        raise Interrupted(f"interrupted: {kept} finished result{'s' if kept != 1 else ''} kept"
                          + (f" in {out}" if out else ""), "rerun to complete the measurement")
    return 0


def _dry_run(opts, reader, out: Path | None, plot: Path | None, fmt: str) -> int:
    """``--dry-run``: the plan (buffer rule, each gather's working set against the cache rule), no lock, no
    buffer, no measurement; on this machine or a recording."""
    from sactool.bench.api import plan_bench
    from sactool.render import emit_data
    from sactool.render.bench import render_plan

    if out is not None or plot is not None:
        raise UsageError("--dry-run measures nothing: there is no record or plot to write",
                         "drop --out/--plot, or drop --dry-run to measure")
    plan = plan_bench(opts, reader=reader)
    if fmt == "table":
        render_plan(plan)
    else:
        emit_data(plan, fmt)
    return 0


def _both(failed: list[tuple[str, Exception]]) -> Exception:
    """The error to raise when the record, the plot or both could not be written where asked: the
    first one, naming every fallback file (issue 27, R6: the plot's was left unsaid)."""
    from sactool.errors import SactoolError

    first = failed[0][1]
    if len(failed) == 1 or not all(isinstance(e, SactoolError) for _, e in failed):
        return first
    assert isinstance(first, SactoolError)   # checked just above
    first.message = "; ".join(f"{what}: {e}" for what, e in failed)
    first.hint = "; ".join(f"{what}: {e.hint}" for what, e in failed if isinstance(e, SactoolError) and e.hint)
    return first


bench_app = typer.Typer(
    help="Measure memory on a NUMA node: idle/loaded latency, MLP, bandwidth, KV top-k gathers. "
         "Without a subcommand: all tests on the pool node. Options go before or after the subcommand.",
    invoke_without_command=True,
    epilog=example("sactool bench --preset fast", "sactool bench gather --node 2 -r 656,1152 --out bench.json"),
)

_B_NODE = typer.Option(None, "--node", "-n", help="Memory node (2 or node2), a devdax device (dax0.0), or 'all' for "
                                                  "CPU-node × memory-node matrices. Default: the pool node.")
_B_CPUS = typer.Option(None, "--cpus", help="CPUs to run on: a list (0-3,8) or a node (node0). "
                                            "Default: the CPU node nearest the memory node.")
_B_SIZE = typer.Option(None, "--size", help="Buffer size with its unit, e.g. 4GiB. Default: 8x the last-level "
                                            "cache of the CPUs used, at least the preset's 512MiB / 1GiB / 4GiB, "
                                            "at most what the node holds.")
_B_THREADS = typer.Option(None, "--threads", "-t", help="Thread counts for bandwidth and gathers (e.g. 1,2).")
_B_RECORD = typer.Option(None, "--record-bytes", "-r", help="Gather record sizes in bytes (default 64,128,256,656,1152,4096).")
_B_TOPK = typer.Option(2048, "--topk", "-k", help="Records gathered per decode step.")
_B_PREFETCH = typer.Option(None, "--prefetch", help="Software-prefetch distances in records (default: per size).")
_B_PATTERN = typer.Option(Pattern("uniform"), "--pattern", case_sensitive=False, help="Gather indices.")
_B_TRACE = typer.Option(None, "--trace", help="Index trace (.npy, or text: one step per line).")
_B_HUGE = typer.Option(Hugepages("thp"), "--hugepages",
                       help="thp (MADV_HUGEPAGE), none, or a hugetlb pool (2MB, 1GB).")
_B_PRESET = typer.Option(Preset("default"), "--preset", case_sensitive=False,
                         help="Protocol: sample time and rounds (fast 20 ms × 3, default 50 ms × 5, rigorous 200 ms × 15).")
_B_SEED = typer.Option(1, "--seed", help="Seed for chains and indices.")
_B_OUT = typer.Option(None, "--out", "-o", help="Write the bench record here (JSON, or YAML by suffix).")
_B_FORCE = flag("--force", help="Overwrite --out / --plot.")
_B_PLOT = typer.Option(None, "--plot", help="Draw the loaded-latency and gather curves to this .svg, .pdf or .png "
                                            "(by the extension; needs matplotlib).")
_B_DRY = flag("--dry-run", help="Plan only: the buffer, each gather's working set against the cache rule, what "
                                  "would be measured (also on a --sysfs-root recording); nothing is placed or measured.")
_B_NO_WAIT = flag("--no-wait", help="Another sactool measurement running on this machine: refuse (exit 11) instead "
                                    "of waiting for it.")


def _given(ctx: typer.Context, kw: dict) -> dict:
    """The options of ``kw`` the user set on this command line (not defaults)."""
    out = {}
    for k, v in kw.items():
        src = ctx.get_parameter_source(k)
        if src is not None and getattr(src, "name", "") not in ("DEFAULT", "DEFAULT_MAP"):
            out[k] = v
    return out


def _merge(ctx: typer.Context, test: str, kw: dict) -> dict:
    """``sactool bench --node 2 latency`` = ``sactool bench latency --node 2``: options given
    before the subcommand apply to it; the same option given on both sides with different values
    is refused."""
    kw = {k: value(v) for k, v in kw.items()}
    mine = _given(ctx, kw)
    group = (ctx.obj or {}).get("bench_options", {})
    for k, v in group.items():
        if k in mine and mine[k] != v:
            opt = "--format" if k == "fmt" else "--" + k.replace("_", "-")
            raise UsageError(f"{opt} given twice: {v} before 'bench {test}' and {mine[k]} after it",
                             f"give {opt} once")
        if k not in mine:
            kw[k] = v
    return kw


def _bench(test: str, kw: dict) -> None:
    kw["fmt"] = check_format(kw["fmt"])
    run_command(test, **kw)


TEST_OPTIONS = {
    # what each test reads beyond node, cpus, size, hugepages, preset, out, force, format (runner.py, suite.py):
    # the chains' seed (latency, mlp, loaded), thread counts (bandwidth, gather, convert), the gather's records
    # and indices, convert's record sizes and seed, and --plot (loaded latency and gather curves)
    "latency": {"seed"},
    "mlp": {"seed"},
    "loaded": {"seed", "plot"},
    "bandwidth": {"threads"},
    "gather": {"threads", "record_bytes", "topk", "prefetch", "pattern", "trace", "seed", "plot"},
    "convert": {"threads", "record_bytes", "seed"},
}
"""The test-specific options each ``bench <test>`` uses; the others are not in its --help and are refused."""
SPECIFIC = set().union(*TEST_OPTIONS.values())


def _unused(test: str, given: dict) -> None:
    """Refuse an option ``bench <test>`` would ignore (given after the subcommand or before it)."""
    if test == "all":
        return
    bad = sorted(k for k in given if k in SPECIFIC and k not in TEST_OPTIONS[test])
    if bad:
        opt = "--" + bad[0].replace("_", "-")
        users = sorted(t for t, used in TEST_OPTIONS.items() if bad[0] in used)
        raise UsageError(f"{opt} does nothing for 'bench {test}': it is read by bench {', '.join(users)}",
                         f"drop {opt}, or run one of those tests (bench all runs every test)")


def _bench_cmd(test: str, doc: str, ex: str):
    def cmd(ctx: typer.Context, node: Optional[str] = _B_NODE, cpus: Optional[str] = _B_CPUS,
            size: Optional[str] = _B_SIZE, threads: Optional[str] = _B_THREADS,
            record_bytes: Optional[str] = _B_RECORD, topk: int = _B_TOPK, prefetch: Optional[str] = _B_PREFETCH,
            pattern: Pattern = _B_PATTERN, trace: Optional[Path] = _B_TRACE, hugepages: Hugepages = _B_HUGE,
            preset: Preset = _B_PRESET, seed: int = _B_SEED, out: Optional[Path] = _B_OUT, force: bool = _B_FORCE,
            fmt=FormatOpt, plot: Optional[Path] = _B_PLOT, quiet: bool = QuietOpt,
            sysfs_root: Optional[Path] = SysfsRootOpt, no_wait: bool = _B_NO_WAIT, dry_run: bool = _B_DRY) -> None:
        kw = dict(node=node, cpus=cpus, size=size, threads=threads, record_bytes=record_bytes, topk=topk,
                  prefetch=prefetch, pattern=pattern, trace=trace, hugepages=hugepages, preset=preset, seed=seed,
                  out=out, force=force, fmt=fmt, plot=plot, sysfs_root=sysfs_root, no_wait=no_wait, dry_run=dry_run)
        _unused(test, {**(ctx.obj or {}).get("bench_options", {}), **_given(ctx, kw)})
        _bench(test, _merge(ctx, test, kw))

    cmd.__doc__ = doc
    if test in TEST_OPTIONS:   # --help lists what this test reads: the other tests' options are hidden
        import copy

        names = [n for n in cmd.__code__.co_varnames[:cmd.__code__.co_argcount] if n != "ctx"]
        assert len(names) == len(cmd.__defaults__ or ()), "every parameter after ctx has a default"
        hidden = []
        for name, default in zip(names, cmd.__defaults__ or ()):
            if name in SPECIFIC and name not in TEST_OPTIONS[test]:
                default = copy.copy(default)
                default.hidden = True
            elif name == "force" and "plot" not in TEST_OPTIONS[test]:
                default = copy.copy(default)
                default.help = "Overwrite --out."
            hidden.append(default)
        cmd.__defaults__ = tuple(hidden)
    bench_app.command(name=test, epilog=example(ex))(cmd)


for _t, _doc, _ex in (
        ("latency", "Idle latency: pointer chase over page-local and fully random chains.",
         "sactool bench latency --node 2 --preset rigorous"),
        ("bandwidth", "Sequential read/write/copy bandwidth, 1 … all CPUs of the CPU node.",
         "sactool bench bandwidth --node 2 --threads 1,8,16"),
        ("mlp", "Memory-level parallelism: 1 … 32 independent chases (latency and bandwidth).",
         "sactool bench mlp --node 2"),
        ("gather", "KV top-k gather of R-byte records at uniform/clustered/trace indices.",
         "sactool bench gather --node 2 -r 656,1152 -k 2048 --threads 1,8 --out bench.json"),
        ("loaded", "Loaded latency: one chaser while throttled readers sweep from full load to idle.",
         "sactool bench loaded --node 2 --plot loaded.png"),
        ("convert", "The RDMA baseline's CPU work per fetched prefix: gather, page-first -> layer-first "
                    "transpose, scatter (DeepSeek-V3.2 shape, 61 layers; --record-bytes 1152 BF16).",
         "sactool bench convert --node 0 --record-bytes 1152 --out convert.json"),
        ("all", "Every test above, in one record.", "sactool bench all --node 2 --out bench.json")):
    _bench_cmd(_t, _doc, _ex)


@bench_app.callback()
def _bench_default(ctx: typer.Context, node: Optional[str] = _B_NODE, cpus: Optional[str] = _B_CPUS,
                   size: Optional[str] = _B_SIZE, threads: Optional[str] = _B_THREADS,
                   record_bytes: Optional[str] = _B_RECORD, topk: int = _B_TOPK, prefetch: Optional[str] = _B_PREFETCH,
                   pattern: Pattern = _B_PATTERN, trace: Optional[Path] = _B_TRACE, hugepages: Hugepages = _B_HUGE,
                   preset: Preset = _B_PRESET, seed: int = _B_SEED, out: Optional[Path] = _B_OUT,
                   force: bool = _B_FORCE, fmt=FormatOpt, plot: Optional[Path] = _B_PLOT,
                   quiet: bool = QuietOpt, sysfs_root: Optional[Path] = SysfsRootOpt,
                   no_wait: bool = _B_NO_WAIT, dry_run: bool = _B_DRY) -> None:
    kw = dict(node=node, cpus=cpus, size=size, threads=threads, record_bytes=record_bytes, topk=topk,
              prefetch=prefetch, pattern=pattern, trace=trace, hugepages=hugepages, preset=preset, seed=seed,
              out=out, force=force, fmt=fmt, plot=plot, sysfs_root=sysfs_root, no_wait=no_wait, dry_run=dry_run)
    if ctx.invoked_subcommand is None:
        _bench("all", {k: value(v) for k, v in kw.items()})
        return
    ctx.ensure_object(dict)["bench_options"] = {k: value(v) for k, v in _given(ctx, kw).items()}
