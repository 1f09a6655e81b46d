"""Terminal view of a bench record: one table per test, compact text curves (loaded latency vs
bandwidth, gather bandwidth vs record size), buffer/placement line; warnings go to stderr.
``--plot FILE.png`` draws the same two curves with matplotlib (the ``plot`` extra)."""

from __future__ import annotations

from rich.markup import escape as esc

from sactool.units import format_bytes, format_rate

BAR = 28


def _ns(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _bar(v: float, vmax: float) -> str:
    if not vmax or v is None:
        return ""
    full = v / vmax * BAR
    return "█" * int(full) + ("▌" if full - int(full) >= 0.5 else "")


def _spread(r: dict) -> str:
    s = r["stats"]
    return f"{s['p05']:.3g}–{s['p95']:.3g} (n={s['n']})"


def _pair(r: dict) -> str:
    return f"{r.get('cpu_node') or '?'}→{r.get('memory_node') or '?'}"


def render_bench(rec, console=None, err=None) -> None:
    from rich.table import Table

    from sactool.render import stderr_console, stdout_console

    c = console or stdout_console()
    e = err or stderr_console()
    d = rec.data
    b = rec.buffer
    multi = len({_pair(r) for r in rec.results}) > 1
    c.print(f"[bold]sactool bench {d.get('command')}[/] — memory {d.get('memory_node')}, CPUs "
            f"{','.join(map(str, rec.cpus))} ({d.get('cpu_node')}), preset {d['protocol'].get('preset')}"
            + ("" if rec.complete else " [bold red](interrupted: partial)[/]"))
    if b:
        c.print(f"buffer {format_bytes(b.get('size_bytes'))}, {b.get('hugepages_requested')}: huge-page share "
                f"{(b.get('hugepage_fraction') or 0):.0%}, verified on node: {(b.get('verified_fraction') or 0):.1%} "
                f"of {b.get('pages_checked')} pages")
    if rec.stand_in:
        c.print(f"[yellow]{esc(rec.stand_in['node'])} stands in for CXL[/]: {esc(rec.stand_in.get('reason') or '')}")
    by: dict[str, list[dict]] = {}
    for r in rec.results:
        by.setdefault(r["test"], []).append(r)
    if "latency" in by:
        t = Table(title="Idle latency (pointer chase)", title_justify="left")
        for col in (["cpu→mem"] if multi else []) + ["chain", "latency ns", "p05–p95"]:
            t.add_column(col, justify="right")
        for r in by["latency"]:
            t.add_row(*([_pair(r)] if multi else []), r["params"]["variant"], _ns(r["derived"]["latency_ns"]), _spread(r))
        c.print(t)
    if "mlp" in by:
        t = Table(title="Memory-level parallelism (N independent chases)", title_justify="left")
        for col in ["chains", "ns per step", "ns per load", "bandwidth", ""]:
            t.add_column(col, justify="right" if col else "left")
        top = max(r["derived"]["bandwidth_bytes_per_s"] for r in by["mlp"])
        for r in by["mlp"]:
            dv = r["derived"]
            t.add_row(str(dv["outstanding_misses"]), _ns(dv["latency_ns"]), _ns(dv["latency_ns"] / dv["outstanding_misses"]),
                      format_rate(dv["bandwidth_bytes_per_s"]), _bar(dv["bandwidth_bytes_per_s"], top))
        c.print(t)
    if "loaded" in by:
        t = Table(title="Loaded latency (chaser + throttled readers; MLC-style sweep)", title_justify="left")
        for col in ["inject delay", "reader bandwidth", "latency ns", "latency"]:
            t.add_column(col, justify="right" if col != "latency" else "left")
        top = max(r["derived"]["latency_ns"] for r in by["loaded"])
        for r in by["loaded"]:
            dl = r["params"]["inject_delay_iterations"]
            t.add_row("idle" if dl is None else str(dl), format_rate(r["derived"]["reader_bandwidth_bytes_per_s"]),
                      _ns(r["derived"]["latency_ns"]), _bar(r["derived"]["latency_ns"], top))
        c.print(t)
    if "gather" in by:
        t = Table(title="Top-k gather (pf: prefetch distance in records; step µs: one top-k step on one thread)",
                  title_justify="left")
        for col in (["cpu→mem"] if multi else []) + ["record B", "thr", "pf", "indices", "bandwidth",
                                                     "ns/record", "step µs"]:
            t.add_column(col, justify="right", no_wrap=True)
        for r in by["gather"]:
            p, dv = r["params"], r["derived"]
            t.add_row(*([_pair(r)] if multi else []), str(p["record_bytes"]), str(p["threads"]),
                      str(p["prefetch_distance"]), p["index_pattern"], format_rate(dv["bandwidth_bytes_per_s"]),
                      _ns(dv["ns_per_record"]), f"{dv['topk_step_us']:.1f}")
        c.print(t)
    if "convert" in by:
        t = Table(title="RDMA-baseline layout conversion of one prefix (g/t/s: time shares of the gather, "
                        "page-first -> layer-first transpose and scatter passes)", title_justify="left")
        for col in (["cpu→mem"] if multi else []) + ["impl", "rec B", "L", "tokens", "thr", "rate",
                                                     "s/GB", "g/t/s"]:
            t.add_column(col, justify="right", no_wrap=True)
        for r in by["convert"]:
            p, dv = r["params"], r["derived"]
            sh = dv.get("pass_share") or {}
            t.add_row(*([_pair(r)] if multi else []), p.get("implementation", "numba"), str(p["record_bytes"]),
                      str(p["layers"]), str(p["tokens"]), str(p["threads"]), format_rate(dv["bandwidth_bytes_per_s"]),
                      f"{dv['seconds_per_gb']:.2f}",
                      "/".join("-" if sh.get(k) is None else f"{sh[k]:.0%}" for k in ("gather", "transpose", "scatter")))
        c.print(t)
    seq = [r for k in ("read", "write", "copy") for r in by.get(k, [])]
    if seq:
        t = Table(title="Sequential bandwidth", title_justify="left")
        for col in (["cpu→mem"] if multi else []) + ["op", "threads", "bandwidth", "p05–p95 GB/s", ""]:
            t.add_column(col, justify="right" if col else "left")
        top = max(r["derived"]["bandwidth_bytes_per_s"] for r in seq)
        for r in seq:
            s = r["stats"]
            t.add_row(*([_pair(r)] if multi else []), r["test"], str(r["params"]["threads"]),
                      format_rate(r["derived"]["bandwidth_bytes_per_s"]),
                      f"{s['p05'] / 1e9:.2f}–{s['p95'] / 1e9:.2f}", _bar(r["derived"]["bandwidth_bytes_per_s"], top))
        c.print(t)
    render_warnings(rec, e)


def plot_bench(rec) -> bytes:
    """Loaded-latency curve and gather bandwidth vs record size, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded = [r for r in rec.results if r["test"] == "loaded"]
    gathers = [r for r in rec.results if r["test"] == "gather"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    if loaded:
        pts = sorted((r["derived"]["reader_bandwidth_bytes_per_s"] / 1e9, r["derived"]["latency_ns"]) for r in loaded)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-")
    ax.set_xlabel("reader bandwidth (GB/s)")
    ax.set_ylabel("chase latency (ns)")
    ax.set_title(f"Loaded latency, {rec.data.get('memory_node')}")
    ax = axes[1]
    for th in sorted({r["params"]["threads"] for r in gathers}):
        pts = sorted((r["params"]["record_bytes"], r["derived"]["bandwidth_bytes_per_s"] / 1e9)
                     for r in gathers if r["params"]["threads"] == th)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{th} threads")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("record bytes")
    ax.set_ylabel("gather bandwidth (GB/s)")
    ax.set_title("Top-k gather")
    if gathers:
        ax.legend()
    fig.tight_layout()
    import io

    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    plt.close(fig)
    return out.getvalue()


def render_warnings(rec, err=None) -> None:
    from sactool.render import stderr_console

    e = err or stderr_console()
    for w in rec.warnings:
        e.print(f"[yellow]warning[/] {esc('[' + w['code'] + ']')} {esc(w['message'])}" + (f" — {esc(w['hint'])}" if w.get("hint") else ""))


def progress_reporter():
    """(callback, close) showing a rich progress line on stderr; silent when stderr is no terminal."""
    import sys

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sactool.render import stderr_console

    if not sys.stderr.isatty():
        return (lambda desc, done, total: None), (lambda: None)
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=stderr_console(), transient=True)
    prog.start()
    task = prog.add_task("starting", total=1)

    def cb(desc: str, done: int, total: int) -> None:
        prog.update(task, description=desc[:60], completed=done, total=max(total, 1))

    return cb, prog.stop
