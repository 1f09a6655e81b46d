"""What ``sactool bench`` does between parsing and rendering (kept out of cli.py, which only
declares options): option values → :class:`BenchOptions`, early checks, run, write, exit code."""

from __future__ import annotations

from pathlib import Path

from sactool.errors import Interrupted, UsageError

TEST_SETS = {"latency": ("latency",), "bandwidth": ("bandwidth",), "mlp": ("mlp",), "gather": ("gather",),
             "loaded": ("loaded",), "all": ("latency", "mlp", "loaded", "gather", "bandwidth")}


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise UsageError(f"{what} {text!r} is not a list of integers", f"write it like {what} 1,2") from None
    if not out:
        raise UsageError(f"{what} {text!r} is empty", "give one or more comma-separated values")
    return tuple(out)


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


def run_command(test: str, *, node, cpus, size, threads, record_bytes, topk, prefetch, pattern, trace, hugepages,
                preset, seed, out: Path | None, force: bool, fmt: str, plot: Path | None) -> int:
    from sactool.bench.api import BenchOptions, run_bench, run_matrix
    from sactool.memory.nodes import topology
    from sactool.units import parse_size

    if out is not None and out.exists() and not force:
        from sactool.errors import ExistsError

        raise ExistsError(f"{out} already exists", "pass --force to overwrite it, or choose another --out")
    if plot is not None:
        if plot.exists() and not force:
            from sactool.errors import ExistsError

            raise ExistsError(f"{plot} already exists", "pass --force to overwrite it")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib", "pip install 'sactool[plot]'") from None
    if trace is not None and pattern == "uniform":
        pattern = "trace"
    nd = parse_node(node)
    topo = topology()
    opts = BenchOptions(
        tests=TEST_SETS[test], node=nd if isinstance(nd, int) else None,
        dax=nd if isinstance(nd, str) and nd != "all" else None, cpus=parse_cpus(cpus, topo),
        size_bytes=parse_size(size, what="--size") if size else None, threads=_ints(threads, "--threads"),
        record_bytes=_ints(record_bytes, "--record-bytes"), topk=topk, prefetch=_ints(prefetch, "--prefetch"),
        pattern=pattern, trace=str(trace) if trace else None, hugepages=hugepages, preset=preset, seed=seed,
        command=test)
    from sactool.render.bench import plot_bench, progress_reporter, render_bench

    cb, close = progress_reporter()
    try:
        rec = (run_matrix if nd == "all" else run_bench)(opts, progress=cb)
    finally:
        close()
    from sactool import records

    if out is not None:
        records.atomic_write(out, records.dumps(rec.data, "yaml" if out.suffix in (".yaml", ".yml") else "json"),
                             force=True)
    if plot is not None:
        records.atomic_write(plot, plot_bench(rec), force=True)
    if fmt == "table":
        render_bench(rec)
    else:
        from sactool.render import emit_data
        from sactool.render.bench import render_warnings

        render_warnings(rec)
        emit_data(rec.data, fmt)
    if not rec.complete:
        kept = len(rec.results)
        raise Interrupted(f"interrupted: {kept} finished result{'s' if kept != 1 else ''} kept"
                          + (f" in {out}" if out else ""), "rerun to complete the measurement")
    return 0
