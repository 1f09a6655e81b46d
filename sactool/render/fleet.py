"""Terminal views of fleet records: the fleet probe (hosts, shared devices) and the fleet bench
(the contention sweep: aggregate, per-rank spread, latency, fairness). Warnings go to stderr."""

from __future__ import annotations

from rich.markup import escape as esc

from sactool.units import format_bytes, node_name


def _b(n) -> str:
    return "?" if n is None else format_bytes(n)


def plain_console():
    """stdout without colour codes. Open MPI gives each rank a pseudo-terminal as stdout (its I/O
    forwarding), so a rank cannot tell whether ``mpirun``'s own stdout is a terminal or a file."""
    from rich.console import Console

    return Console(force_terminal=False, no_color=True, highlight=False, width=100)


def render_warnings(data: dict, err=None) -> None:
    from sactool.render import stderr_console

    from sactool.render import print_warnings

    print_warnings(data.get("warnings") or [], err or stderr_console())


def _n(count, word: str) -> str:
    """``1 host``, ``2 hosts``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def render_fleet_probe(data: dict, console=None) -> None:
    from rich.table import Table

    from sactool.render import stdout_console

    c = console or stdout_console()
    c.print(f"[bold]sactool probe[/] — fleet of {_n(data['world_size'], 'rank')} on {_n(len(data['hosts']), 'host')}")
    t = Table(title="Hosts", title_justify="left")
    for col in ("host", "ranks", "source", "nodes", "CXL memdevs (serial)", "pool"):
        t.add_column(col)
    for h in data["hosts"]:
        topo = h["topology"]
        devs = ", ".join(f"{m['name']} ({m.get('serial') or '?'})" for m in topo.get("cxl", {}).get("memdevs", []))
        nodes = ", ".join(f"{n['node']} {n['kind']}" for n in topo.get("nodes", []))
        import os

        src = "this system" if h["live"] else f"recording {os.path.basename(str(h['sysfs_root']).rstrip('/'))}"
        v = topo.get("verdict") or {}
        pool = ", ".join(f"node{n}" for n in v.get("pool_nodes") or ()) + (" (stand-in)" if v.get("stand_in") else "")
        t.add_row(esc(h["host"]), ",".join(map(str, h["ranks"])), esc(src), esc(nodes), esc(devs or "-"),
                  esc(pool or "-"))
    c.print(t)
    pm = data["pool_map"]
    t = Table(title="Pool map: physical CXL devices (matched by serial)", title_justify="left")
    for col in ("serial", "shared", "host", "memdev", "capacity", "regions", "nodes", "DAX"):
        t.add_column(col)
    for d in pm["memdevs"]:
        for i, h in enumerate(d["hosts"]):
            t.add_row(d["serial"] if i == 0 else "", ("yes" if d["shared"] else "no") if i == 0 else "",
                      esc(h["host"]), esc(h["memdev"] or "?"), _b(h["capacity_bytes"]),
                      esc(", ".join(r["region"] for r in h["regions"]) or "-"), esc(", ".join(node_name(n) for n in h["nodes"]) or "-"),
                      esc(", ".join(h["dax_devices"]) or "-"))
    c.print(t if pm["memdevs"] else "no CXL memdevs on any host")
    shared = [d for d in pm["memdevs"] if d["shared"]]
    for d in shared:
        c.print(f"device {d['serial']} is shared by {', '.join(map(esc, d['host_names']))}")
    if pm["memdevs"] and not shared:
        c.print("no device is seen by more than one host")
    for u in pm["unmatched"]:
        c.print(f"[yellow]unmatched[/] {esc(u['host'])} {esc(u['memdev'] or '?')}: {esc(u['reason'])}")


def render_fleet_bench(data: dict, console=None) -> None:
    from rich.table import Table

    from sactool.render import stdout_console

    c = console or stdout_console()
    fl = data["fleet"]
    c.print(f"[bold]sactool bench {esc(data.get('command') or '')}[/] — fleet of {_n(fl['world_size'], 'rank')} on "
            f"{_n(len(fl['hosts']), 'host')}, memory {esc(node_name(data.get('memory_node')))}, preset "
            f"{data['protocol'].get('preset')}" + ("" if data.get("complete") else " [bold red](interrupted: partial)[/]"))
    for h in fl["hosts"]:
        dev = h["pool_device"]
        c.print(f"  {esc(h['host'])}: ranks {','.join(map(str, h['ranks']))}, {esc(node_name(dev['node']))} ({esc(dev['kind'])}"
                + (f", memdevs {', '.join(dev['memdev_serials'])}" if dev["memdev_serials"] else "") + ")")
    by: dict[str, list[dict]] = {}
    for s in fl["sweep"]:
        by.setdefault(s["config"], []).append(s)
    for key, steps in by.items():
        lat = next((k for k in ("topk_step_us", "latency_ns") if k in steps[0]), None)
        t = Table(title=f"Contention sweep: {key}", title_justify="left", show_edge=False)
        cols = ["ranks", "GB/s", "×1", "on-CPU", "per rank"]
        if lat:
            cols += ["step µs" if lat == "topk_step_us" else "ns/load", "p95"]
        cols += ["min/max"]
        for col in cols:
            t.add_column(col, justify="right")
        for s in steps:
            bws = [r["bandwidth_bytes_per_s"] / 1e9 for r in s["per_rank"]]
            oc = s.get("aggregate_on_cpu_bytes_per_s")
            row = [str(s["active_ranks"]), f"{s['aggregate_bytes_per_s'] / 1e9:.2f}",
                   "-" if s["speedup_vs_one_rank"] is None else f"{s['speedup_vs_one_rank']:.2f}",
                   "-" if oc is None else f"{oc / 1e9:.2f}",
                   f"{min(bws):.2f}" if len(bws) == 1 else f"{min(bws):.2f}–{max(bws):.2f}"]
            if lat:
                row += [f"{s[lat]['median_of_ranks']:.1f}", f"{s[lat]['worst_p95']:.1f}"]
            f = s["fairness"]["min_over_max"]
            row.append("-" if f is None else f"{f:.2f}")
            t.add_row(*row)
        c.print(t)
    if by:
        lat = next((k for k in ("topk_step_us", "latency_ns") if k in fl["sweep"][0]), None)
        c.print("GB/s: all active ranks together (bytes / the slowest rank's time); ×1: over one rank; on-CPU: the "
                "same over each rank's on-CPU time; per rank: min–max; "
                + ("step µs: one top-k step, median of the ranks, p95 of the worst rank; " if lat == "topk_step_us"
                   else "ns/load: median of the ranks, p95 of the worst rank; " if lat else "")
                + "min/max: fairness between ranks")
    if data.get("stand_in"):
        c.print(f"[yellow]{esc(node_name(data['stand_in']['node']))} stands in for CXL[/]: {esc(data['stand_in'].get('reason') or '')}")
