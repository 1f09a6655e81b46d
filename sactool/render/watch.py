"""Rendering of ``sactool watch``: one sample as tables (``--once``), or a live view redrawn every
interval (rich Live, on a terminal)."""

from __future__ import annotations

from typing import Any

from sactool.render import stdout_console
from sactool.units import format_bytes


def _b(v: Any) -> str:
    return "-" if v is None else format_bytes(v)


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e9:.2f} GB/s"


def _pct(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v * 100:.{digits}f}%"


def tables(s: Any) -> list[Any]:
    """The renderables of one sample: ranks, targets, traffic, engine vs prediction, sources."""
    from rich.table import Table
    from rich.text import Text

    out: list[Any] = []
    t = Table(title="pool per rank (placement as it is vs the plan)", show_edge=False)
    for c in ("rank", "pid", "plan", "status", "present", "per node", "off plan", "policy / range"):
        t.add_column(c, overflow="fold")
    for r in s.ranks:
        style = {"on_plan": "green", "off_plan": "bold red", "not_placed": "bold red"}.get(r.status, "yellow")
        per = ", ".join(f"node{n}: {format_bytes(b)}" for n, b in sorted(r.node_bytes.items())) or "-"
        how = r.policy if r.plan.mode == "numa" else (f"{r.device} @ {r.offset_bytes}" if r.device else "-")
        t.add_row(str(r.rank), str(r.pid or "-"), r.plan.target + (" (stand-in)" if r.plan.stand_in else ""),
                  Text(r.status, style=style), _b(r.present_bytes if r.plan.mode == "numa" else r.mapped_bytes),
                  per, _b(r.off_plan_bytes), Text(how or "-"))
    out.append(t)
    t = Table(title="pool targets", show_edge=False)
    for c in ("target", "kind", "total", "free", "pools here", "planned", "ranks"):
        t.add_column(c)
    for x in s.targets:
        t.add_row(x.target, x.kind, _b(x.total_bytes), _b(x.free_bytes), _b(x.pool_bytes), _b(x.planned_bytes),
                  ",".join(map(str, x.ranks)))
    out.append(t)
    if s.traffic:
        t = Table(title="CXL link traffic (cxl_pmu) vs the link ceiling (computed)", show_edge=False)
        for c in ("memdev", "target", "read", "write", "ceiling", "read/ceiling", "note"):
            t.add_column(c, overflow="fold")
        for x in s.traffic:
            d = x.to_data()
            t.add_row(x.memdev or "-", x.target or "-", _rate(x.read_bytes_per_s), _rate(x.write_bytes_per_s),
                      _rate(x.ceiling_bytes_per_s), _pct(d["read_fraction_of_ceiling"], 1), Text(x.detail))
        out.append(t)
    out.append(Text(f"traffic counters: {s.pmu_absent or 'see the table'}"
                    + "".join(f"\n  {p.name}: {p.reason}" for p in s.pmus if not p.read)))
    e, p = s.engine, s.prediction
    if e is not None or p is not None:
        t = Table(title="engine demand: observed vs the profile's prediction", show_edge=False)
        for c in ("", "predicted", "observed", "observed/predicted"):
            t.add_column(c)
        if p is not None:
            t.add_row("hot-buffer hit rate", _pct(p.predicted_hit_rate), _pct(p.observed_hit_rate),
                      "-" if p.miss_ratio is None else f"misses x{p.miss_ratio:.2f}")
            t.add_row("bytes per generated token", _b(p.predicted_bytes_per_token), _b(p.observed_bytes_per_token),
                      "-" if p.bytes_ratio is None else f"x{p.bytes_ratio:.2f}")
        elif e is not None:
            t.add_row("hot-buffer hit rate", "-", _pct(e.hit_rate), "-")
            t.add_row("bytes per generated token", "-", _b(e.h2d_bytes_per_token), "-")
        out.append(t)
        lines = []
        if p is not None:
            lines.append(f"prediction: workload {p.workload}, device_buffer_size {p.device_buffer_size}, mean over "
                         f"design contexts {', '.join(map(str, p.contexts)) or '-'}" + (f"; {p.detail}" if p.detail else ""))
        if e is not None:
            step = ("" if e.step_time_s is None else f"; decode step {e.step_time_s * 1e3:.1f} ms (mean inter-token latency)"
                    + ("" if e.requests_running is None else f" with {e.requests_running:g} requests running per engine"))
            lines.append(f"engine: {e.url} ({e.naming}), {e.window}{step}" + (f"; {e.detail}" if e.detail else ""))
        out.append(Text("\n".join(lines)))
    src = "  ".join(f"{r.source}: " + ("ok" if r.ok else ("stale" if r.stale else "failed"))
                    + ("" if r.age_s is None or r.ok else f" ({r.age_s:.1f} s old)") for r in s.sources)
    out.append(Text(f"sources  {src}"))
    for n in s.notes:
        out.append(Text(f"note: {n}"))
    return out


def render_sample(s: Any, fmt: str, *, stream: bool = False) -> None:
    """One sample on stdout: tables, or the record as JSON/YAML (``stream``: JSON one line per sample)."""
    if fmt == "json" and stream:
        import json
        import sys

        from sactool.records import to_data

        sys.stdout.write(json.dumps(to_data(s), separators=(",", ":")) + "\n")
        sys.stdout.flush()
        return
    if fmt != "table":
        from sactool.render import emit_data

        emit_data(s, fmt)
        return
    con = stdout_console()
    for r in tables(s):
        con.print(r)


def render_warnings(s: Any) -> None:
    """The sample's warnings on stderr (a live view shows them in the frame instead)."""
    from sactool.render import note, quiet

    if quiet():
        return
    for w in s.warnings:
        note(f"warning: {w['message']}" + (f"\n  hint: {w['hint']}" if w.get("hint") else ""))


def live(next_sample, *, listen: str | None = None) -> None:
    """Redraw every sample ``next_sample()`` returns until it returns None (Ctrl-C ends it)."""
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    con = stdout_console()
    with Live(console=con, auto_refresh=False, screen=False) as view:
        while True:
            s = next_sample()
            if s is None:
                return
            head = Text(f"sactool watch  {s.model or ''}  {s.elapsed_s:.0f} s" + (f"  serving {listen}" if listen else ""),
                        style="bold")
            warns = [Text(f"warning: {w['message']}", style="red") for w in s.warnings]
            view.update(Group(head, *tables(s), *warns), refresh=True)


__all__ = ["live", "render_sample", "render_warnings", "tables"]
