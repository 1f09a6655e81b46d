"""Terminal view of a bench record: one table per test, compact text curves (loaded latency vs
bandwidth, gather bandwidth vs record size), buffer/placement line; warnings go to stderr.
``--plot FILE.png`` draws the same two curves with matplotlib (the ``plot`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape as esc

from sactool.bench.sizing import CACHE_MULTIPLE
from sactool.units import format_bytes, format_rate, node_name

if TYPE_CHECKING:   # matplotlib is imported only where a picture is drawn
    from matplotlib.transforms import Bbox

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
    return f"{node_name(r.get('cpu_node'))}→{node_name(r.get('memory_node'))}"



MARKS = {"descheduled": "*", "high_variance": "~", "in_cache": "^", "cpus_shared": "&"}
"""Per-result warning kinds and the mark each puts beside the affected figure in the tables."""

LEGEND = {"descheduled": "its threads were descheduled (on a CPU < 90% of the sample): a wall-clock bandwidth is "
                          "understated, a latency overstated",
          "high_variance": "noisy: relative stdev of its samples > 10%",
          "in_cache": f"its reads cycled over less than {CACHE_MULTIPLE}x the last-level cache: a bandwidth may be "
                      "overstated",
          "cpus_shared": "other work kept the CPUs its threads did not use busy: memory bandwidth and caches were "
                         "shared, a bandwidth may be understated"}


def _result_key(message: str, keys) -> str | None:
    """The result a per-result warning is about: messages start with ``<result key>: ``."""
    head = message.split(": ", 1)[0]
    return head if head in keys else None


def affected(rec) -> dict[str, set[str]]:
    """result key -> the per-result warning codes raised for it."""
    keys = {r.get("key") for r in rec.results}
    out: dict[str, set[str]] = {}
    for w in rec.warnings:
        k = _result_key(w.get("message") or "", keys)
        if k is not None:
            out.setdefault(k, set()).add(w["code"])
    return out


def _header(c, rec) -> None:
    """What was measured where: command, memory node, CPUs, preset, buffer and placement, stand-in."""
    d, b = rec.data, rec.buffer
    dax = d.get("dax_device")
    where = (f"{esc(str(dax.get('name')))} (device-DAX, target node{dax.get('target_node')}"
             + ("" if dax.get("target_node_online") else ", not online as a node") + ")"
             if isinstance(dax, dict) else node_name(d.get('memory_node'), 'None'))
    c.print(f"[bold]sactool bench {d.get('command')}[/] — memory {where}, CPUs "
            f"{','.join(map(str, rec.cpus))} ({node_name(d.get('cpu_node'), 'None')}), preset {d['protocol'].get('preset')}"
            + ("" if rec.complete else " [bold red](interrupted: partial)[/]"))
    m = b.get("mapping") if b else None
    if isinstance(m, dict):
        c.print(f"buffer {format_bytes(b.get('size_bytes'))} mapped from {esc(str(m.get('path')))} at offset "
                f"{m.get('offset_bytes')}, align {format_bytes(m.get('align_bytes'))}: "
                + ("mapping verified (/proc/self/maps)" if m.get("verified") else
                   f"[bold red]mapping not as asked[/]: {esc(str(m.get('reason')))}"))
    elif b:
        c.print(f"buffer {format_bytes(b.get('size_bytes'))}, {b.get('hugepages_requested')}: huge-page share "
                f"{(b.get('hugepage_fraction') or 0):.0%}, verified on node: {(b.get('verified_fraction') or 0):.1%} "
                f"of {b.get('pages_checked')} pages")
    if rec.stand_in:
        c.print(f"[yellow]{esc(node_name(rec.stand_in['node']))} stands in for CXL[/]: {esc(rec.stand_in.get('reason') or '')}")


def render_bench(rec, console=None, err=None) -> None:
    from sactool.render import stderr_console, stdout_console

    c = console or stdout_console()
    e = err or stderr_console()
    multi = len({_pair(r) for r in rec.results}) > 1
    hit = affected(rec)

    def m(r: dict, text: str) -> str:
        """The figure with the marks of the warnings raised for its result (legend below the tables)."""
        key = r.get("key")
        codes = hit.get(key, set()) if key is not None else set()
        return text + "".join(MARKS[k] for k in MARKS if k in codes)
    _header(c, rec)
    by: dict[str, list[dict]] = {}
    for r in rec.results:
        by.setdefault(r["test"], []).append(r)
    for test, table in (("latency", _latency_table), ("mlp", _mlp_table), ("loaded", _loaded_table),
                        ("gather", _gather_table), ("convert", _convert_table)):
        if test in by:
            c.print(table(by[test], multi, m))
    seq = [r for k in ("read", "write", "copy") for r in by.get(k, [])]
    if seq:
        c.print(_sequential_table(seq, multi, m))
    for k in (k for k in MARKS if any(k in v for v in hit.values())):
        c.print(f"{MARKS[k]} {LEGEND[k]} (warning {k} below)", markup=False, highlight=False)
    render_warnings(rec, e)


# One table per kind of bench result: ``rs`` its results, ``multi`` whether the record holds more than
# one CPU→memory pair (then a first column names it), ``m`` the figure with its warning marks.
def _latency_table(rs: list[dict], multi: bool, m):
    from rich.table import Table

    t = Table(title="Idle latency (pointer chase)", title_justify="left")
    for col in (["cpu→mem"] if multi else []) + ["chain", "latency ns", "p05–p95"]:
        t.add_column(col, justify="right")
    for r in rs:
        t.add_row(*([_pair(r)] if multi else []), r["params"]["variant"], m(r, _ns(r["derived"]["latency_ns"])),
                  _spread(r))
    return t


def _mlp_table(rs: list[dict], multi: bool, m):
    from rich.table import Table

    t = Table(title="Memory-level parallelism (N independent chases)", title_justify="left")
    for col in ["chains", "ns per step", "ns per load", "bandwidth", ""]:
        t.add_column(col, justify="right" if col else "left")
    top = max(r["derived"]["bandwidth_bytes_per_s"] for r in rs)
    for r in rs:
        dv = r["derived"]
        t.add_row(str(dv["outstanding_misses"]), m(r, _ns(dv["latency_ns"])),
                  _ns(dv["latency_ns"] / dv["outstanding_misses"]),
                  m(r, format_rate(dv["bandwidth_bytes_per_s"])), _bar(dv["bandwidth_bytes_per_s"], top))
    return t


def _loaded_table(rs: list[dict], multi: bool, m):
    from rich.table import Table

    t = Table(title="Loaded latency (chaser + throttled readers; MLC-style sweep)", title_justify="left")
    for col in ["inject delay", "reader bandwidth", "latency ns", "latency"]:
        t.add_column(col, justify="right" if col != "latency" else "left")
    top = max(r["derived"]["latency_ns"] for r in rs)
    for r in rs:
        dl = r["params"]["inject_delay_iterations"]
        t.add_row("idle" if dl is None else str(dl), format_rate(r["derived"]["reader_bandwidth_bytes_per_s"]),
                  m(r, _ns(r["derived"]["latency_ns"])), _bar(r["derived"]["latency_ns"], top))
    return t


def _gather_table(rs: list[dict], multi: bool, m):
    from rich.table import Table

    # the working set each gather reached (the generated stream's: the buffer's records); an upgraded older
    # record's estimate of its stored stream is in the record, not shown as a measured figure
    sets = sorted({r["params"]["footprint_bytes"] for r in rs
                   if r["params"].get("index_shift") == "per pass" and r["params"].get("footprint_bytes")})
    lo, hi = (format_bytes(sets[0]), format_bytes(sets[-1])) if sets else ("", "")
    ws = f"; working set {lo}" + (f"–{hi}" if hi != lo else "") if sets else ""
    t = Table(title=f"Top-k gather (pf: prefetch distance in records; step µs: one top-k step on one thread{ws})",
              title_justify="left")
    for col in (["cpu→mem"] if multi else []) + ["record B", "thr", "pf", "indices", "bandwidth",
                                                 "ns/record", "step µs"]:
        t.add_column(col, justify="right", no_wrap=True)
    for r in rs:
        p, dv = r["params"], r["derived"]
        t.add_row(*([_pair(r)] if multi else []), str(p["record_bytes"]), str(p["threads"]),
                  str(p["prefetch_distance"]), p["index_pattern"], m(r, format_rate(dv["bandwidth_bytes_per_s"])),
                  _ns(dv["ns_per_record"]), f"{dv['topk_step_us']:.1f}")
    return t


def _convert_table(rs: list[dict], multi: bool, m):
    from rich.table import Table

    t = Table(title="RDMA-baseline layout conversion of one prefix (g/t/s: time shares of the gather, "
                    "page-first -> layer-first transpose and scatter passes)", title_justify="left")
    for col in (["cpu→mem"] if multi else []) + ["impl", "rec B", "L", "tokens", "thr", "rate",
                                                 "s/GB", "g/t/s"]:
        t.add_column(col, justify="right", no_wrap=True)
    for r in rs:
        p, dv = r["params"], r["derived"]
        sh = dv.get("pass_share") or {}
        t.add_row(*([_pair(r)] if multi else []), p.get("implementation", "numba"), str(p["record_bytes"]),
                  str(p["layers"]), str(p["tokens"]), str(p["threads"]), m(r, format_rate(dv["bandwidth_bytes_per_s"])),
                  m(r, f"{dv['seconds_per_gb']:.2f}"),
                  "/".join("-" if sh.get(k) is None else f"{sh[k]:.0%}" for k in ("gather", "transpose", "scatter")))
    return t


def _sequential_table(rs: list[dict], multi: bool, m):
    from rich.table import Table

    t = Table(title="Sequential bandwidth", title_justify="left")
    for col in (["cpu→mem"] if multi else []) + ["op", "threads", "bandwidth", "p05–p95 GB/s", ""]:
        t.add_column(col, justify="right" if col else "left")
    top = max(r["derived"]["bandwidth_bytes_per_s"] for r in rs)
    for r in rs:
        s = r["stats"]
        t.add_row(*([_pair(r)] if multi else []), r["test"], str(r["params"]["threads"]),
                  m(r, format_rate(r["derived"]["bandwidth_bytes_per_s"])),
                  f"{s['p05'] / 1e9:.2f}–{s['p95'] / 1e9:.2f}", _bar(r["derived"]["bandwidth_bytes_per_s"], top))
    return t


def _gather_series(gathers: list[dict]) -> dict[tuple, list[dict]]:
    """Gather results grouped into lines: by thread count, and by CPU→memory pair, index pattern or
    prefetch distance where a record size was measured with more than one of them."""
    def base(r):
        p = r["params"]
        return (r["params"]["record_bytes"], p["threads"], _pair(r), p["index_pattern"])

    multi = {}
    for name, f in (("pair", _pair), ("pattern", lambda r: r["params"]["index_pattern"]),
                    ("prefetch", lambda r: r["params"]["prefetch_distance"])):
        seen: dict = {}
        for r in gathers:
            seen.setdefault(base(r)[:2], set()).add(f(r))
        multi[name] = any(len(v) > 1 for v in seen.values()) or (name != "prefetch" and len({f(r) for r in gathers}) > 1)
    out: dict[tuple, list[dict]] = {}
    for r in gathers:
        p = r["params"]
        key = (p["threads"], _pair(r) if multi["pair"] else None, p["index_pattern"] if multi["pattern"] else None,
               p["prefetch_distance"] if multi["prefetch"] else None)
        out.setdefault(key, []).append(r)
    return out


def _series_label(key: tuple) -> str:
    th, pair, pattern, pf = key
    parts = [f"{th} thread{'s' if th != 1 else ''}"]
    parts += [x for x in (pair, pattern) if x is not None]
    if pf is not None:
        parts.append(f"prefetch {pf}")
    return ", ".join(parts)


def _yerr(rs: list[dict], scale: float):
    """p05–p95 of each result's samples as asymmetric error bars (in the plotted unit)."""
    lo = [max(0.0, (r["stats"]["median"] - r["stats"]["p05"]) * scale) for r in rs]
    hi = [max(0.0, (r["stats"]["p95"] - r["stats"]["median"]) * scale) for r in rs]
    return [lo, hi]


def bench_figure(rec):
    """The matplotlib Figure ``--plot`` writes: one panel per plotted test that has results —
    loaded latency vs reader bandwidth (points joined in bandwidth order, each labelled with its
    injected delay) and gather bandwidth vs record size (a labelled tick per measured size), both
    with p05–p95 error bars from the record's samples. Raises UsageError when neither exists."""
    from matplotlib.ticker import NullLocator

    from sactool.render.figures import pyplot

    plt = pyplot()

    loaded = [r for r in rec.results if r["test"] == "loaded"]
    gathers = [r for r in rec.results if r["test"] == "gather"]
    later = None
    panels = [k for k, rs in (("loaded", loaded), ("gather", gathers)) if rs]
    if not panels:
        from sactool.errors import UsageError

        raise UsageError("the record has no loaded-latency or gather results to plot",
                         "plot a record of bench loaded, gather or all")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.8 * len(panels), 4.4), squeeze=False)
    axes = list(axes[0])
    mem = node_name(rec.data.get("memory_node"), "None")
    stand = " (stand-in for CXL)" if rec.stand_in else ""
    if "loaded" in panels:
        ax = axes[panels.index("loaded")]
        rs = sorted(loaded, key=lambda r: r["derived"]["reader_bandwidth_bytes_per_s"])
        xs = [r["derived"]["reader_bandwidth_bytes_per_s"] / 1e9 for r in rs]
        ys = [r["derived"]["latency_ns"] for r in rs]
        ax.errorbar(xs, ys, yerr=_yerr(rs, 1.0), fmt="o-", capsize=3, label="median, p05–p95")
        ax.set_xlabel("reader bandwidth (GB/s)")
        ax.set_ylabel("chase latency (ns)")
        ax.set_title(f"Loaded latency, {mem}{stand}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        later = (ax, xs, ys, rs)
    if "gather" in panels:
        ax = axes[panels.index("gather")]
        sizes = sorted({r["params"]["record_bytes"] for r in gathers})
        for key, rs in sorted(_gather_series(gathers).items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            rs = sorted(rs, key=lambda r: r["params"]["record_bytes"])
            ax.errorbar([r["params"]["record_bytes"] for r in rs],
                        [r["derived"]["bandwidth_bytes_per_s"] / 1e9 for r in rs], yerr=_yerr(rs, 1e-9),
                        fmt="o-", capsize=3, label=_series_label(key))
        if len(sizes) > 1 and sizes[-1] / sizes[0] >= 4:
            ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(x) for x in sizes], rotation=45 if len(sizes) > 6 else 0)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("record bytes")
        ax.set_ylabel("gather bandwidth (GB/s)")
        ax.set_title(f"Top-k gather, {mem}{stand}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    if later is not None:   # labels placed in the final layout's pixels
        _label_delays(fig, *later)
    return fig


LABEL_OFFSETS = ((4, 4), (4, -11), (-46, 4), (-46, -11), (4, 14), (-46, 14))
"""Where a delay label may go around its point (offset points), tried in order."""


def _label_delays(fig, ax, xs, ys, rs) -> None:
    """Label each loaded-latency point with its injected delay where the label overlaps no other label
    and stays inside the panel (tried at :data:`LABEL_OFFSETS` around the point, in the figure's pixels): idle and the
    full-load end first, then the others; a label with no free place is left out (its point stays)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)   # inside the panel: not cut at its edge
    order = sorted(range(len(rs)), key=lambda i: (rs[i]["params"].get("inject_delay_iterations") is not None,
                                                  i != len(rs) - 1, i))
    placed: list[Bbox] = []
    for i in order:
        d = rs[i]["params"].get("inject_delay_iterations")
        for off in LABEL_OFFSETS:
            a = ax.annotate("idle" if d is None else f"delay {d}", (xs[i], ys[i]), textcoords="offset points",
                            xytext=off, fontsize=7, color="0.35")
            box = a.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            a.remove()


def plot_bench(rec, fmt: str = "png") -> bytes:
    """:func:`bench_figure` as ``png``, ``svg`` or ``pdf`` bytes."""
    from sactool.render.figures import figure_bytes

    return figure_bytes(bench_figure(rec), fmt)


def warning_lines(rec) -> list[tuple[str, str, str | None]]:
    """(code, message, hint), one per warning kind: per-result warnings of one kind (descheduled,
    high variance, …) become one line naming how many results and which; the record keeps each."""
    import re

    keys = {r.get("key") for r in rec.results}
    groups: dict[str, list[dict]] = {}
    for w in rec.warnings:
        groups.setdefault(w["code"], []).append(w)
    out: list[tuple[str, str, str | None]] = []
    for code, ws in groups.items():
        per = [(k, w) for w in ws if (k := _result_key(w.get("message") or "", keys)) is not None]
        if len(per) < 2 or len(per) != len(ws):
            out.extend((code, w["message"], w.get("hint")) for w in ws)
            continue
        rest = per[0][1]["message"].split(": ", 1)[1]
        pct = sorted({int(x) for _, w in per for x in re.findall(r"(\d+)%", w["message"].split(": ", 1)[1])})
        if len(pct) > 1:   # one sentence carrying the range of the figures the messages give
            rest = re.sub(r"\d+%", f"{pct[0]}–{pct[-1]}%", rest, count=1)
        names = [k for k, _ in per]
        shown = ", ".join(names[:6]) + (f", … ({len(names) - 6} more)" if len(names) > 6 else "")
        out.append((code, f"{len(names)} of {len(rec.results)} results ({shown}): {rest}", per[0][1].get("hint")))
    return out


def render_warnings(rec, err=None) -> None:
    from sactool.render import print_warnings, stderr_console

    print_warnings(warning_lines(rec), err or stderr_console())


PLAIN_PROGRESS_S = 10.0
"""Off a terminal (a log, a CI job, ``2> file``), a long run writes a plain progress line at most this often, so
it is seen to be alive; a run shorter than this writes none."""


def progress_reporter(plain_every_s: float | None = None):
    """(callback, close) showing a rich progress line on stderr. Off a terminal: nothing, or with
    ``plain_every_s`` a plain line (``progress: <step> 3/12, 41 s``) at most that often."""
    import sys

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sactool.render import COMPILING, compile_notice, note, quiet, stderr_console

    if not sys.stderr.isatty() or quiet():
        unhook = compile_notice()
        if plain_every_s is None or quiet():
            return (lambda desc, done, total: None), unhook
        import time

        t0 = time.monotonic()
        last = {"t": t0}

        def plain(desc: str, done: int, total: int) -> None:
            now = time.monotonic()
            if now - last["t"] >= plain_every_s:
                last["t"] = now
                note(f"progress: {desc} {done}/{max(total, 1)}, {now - t0:.0f} s")

        return plain, unhook
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=stderr_console(), transient=True)
    prog.start()
    task = prog.add_task("starting", total=1)

    def say(msg: str) -> None:   # a line above the bar, and the bar says it too while it compiles
        prog.console.print(msg, markup=False, highlight=False)
        prog.update(task, description=COMPILING[:60])

    unhook = compile_notice(say)

    def cb(desc: str, done: int, total: int) -> None:
        prog.update(task, description=desc[:60], completed=done, total=max(total, 1))

    def close() -> None:
        unhook()
        prog.stop()

    return cb, close


def render_plan(plan: dict, console=None, err=None) -> None:
    """``sactool bench --dry-run``: what would be measured, the buffer rule and each gather's planned
    working set against the cache rule, as lines on stdout; its warnings on stderr."""
    from sactool.render import stderr_console, stdout_console

    c = console or stdout_console()
    e = err or stderr_console()
    c.print(("" if plan["live"] else "[bold]a recorded machine[/]: ") + f"bench would measure {esc(plan['text'])}",
            highlight=False)
    for g in plan["gather"]:
        verdict = ("" if g["clears_rule"] is None else
                   f" = {g['cache_multiple']:g}x the last-level cache: "
                   + ("clears the rule" if g["clears_rule"] else f"[yellow]under {CACHE_MULTIPLE}x, flagged in_cache[/]"))
        c.print(f"  gather {g['record_bytes']} B: {g['records']} records, working set "
                f"{format_bytes(g['footprint_bytes'])}{verdict}", highlight=False)
    for w in plan["warnings"]:
        e.print(f"[yellow]warning[/] {esc('[' + w['code'] + ']')} {esc(w['message'])}"
                + (f" — {esc(w['hint'])}" if w.get("hint") else ""))
