"""Terminal view of a ``bench gpu-gather`` record: the GPU, the path and its link ceiling, the
placement, one table of swap-in configurations (top-k step vs the full-prefix copy of the same
requests), and the warnings on stderr."""

from __future__ import annotations

from rich.markup import escape as esc

from sactool.units import format_bytes, format_rate, node_name  # noqa: F401


def _f(x, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def render_gpu_gather(rec, console=None, err=None) -> None:
    from rich.table import Table

    from sactool.render import drop_to_fit, stderr_console, stdout_console
    from sactool.render.bench import render_warnings

    c = console or stdout_console()
    e = err or stderr_console()
    d = rec.data
    g = d.get("gpu") or {}
    b = rec.buffer
    where = d.get("dax_device") or node_name(d.get("memory_node"), "host memory (node unknown)")
    c.print(f"[bold]sactool bench gpu-gather[/] — GPU {g.get('index')} {esc(str(g.get('name')))} reading {esc(where)}, "
            f"preset {d['protocol'].get('preset')}" + ("" if rec.complete else " [bold red](interrupted: partial)[/]"))
    if g.get("simulator"):
        c.print("[bold yellow]numba CUDA simulator: the bytes are checked, the times mean nothing[/]")
    pl = (b or {}).get("placement") or {}
    if b:
        ver = b.get("verified_fraction")
        c.print(f"buffer {format_bytes(b.get('size_bytes'))} ({esc(pl.get('method', b.get('policy', '?')))}), "
                + (f"verified on node: {ver:.1%} of {b.get('pages_checked')} pages" if ver is not None and pl.get("verified", True)
                   else "[yellow]placement not verified[/]")
                + f"; registered: {esc(str((d.get('registration') or {}).get('method')))}")
    pc = d.get("path_ceiling") or {}
    if pc.get("ceiling_bytes_per_s"):
        c.print(f"link ceiling {format_rate(pc['ceiling_bytes_per_s'])} per direction (limited by {pc.get('limited_by')}; "
                "theoretical, not measured)")
    else:
        c.print("link ceiling unknown: " + esc("; ".join(pc.get("notes") or ["not readable"])))
    if rec.stand_in:
        c.print(f"[yellow]{esc(node_name(rec.stand_in['node']))} stands in for CXL[/]: {esc(rec.stand_in.get('reason') or '')}")
    gathers = [r for r in rec.results if r["test"] == "gpu_gather"]
    if gathers:
        t = Table(title="GPU swap-in: one block (blk) per request, one warp per record; µs/step: one top-k step of "
                        "every request in flight; lines: 64-B lines in flight (structural); ÷ceil: share of the link "
                        f"ceiling; prefix µs: bulk copy of each request's {d.get('context_tokens')} records; ×: prefix "
                        "µs over µs/step", title_justify="left")
        for col in ("rec B", "k", "idx", "blk", "thr", "µs/step", "GB/s", "lines", "÷ceil", "prefix µs", "×"):
            t.add_column(col, justify="right", no_wrap=True)
        for r in gathers:
            p, dv = r["params"], r["derived"]
            t.add_row(str(p["record_bytes"]), str(p["topk"]), p["index_pattern"], str(p["blocks"]),
                      str(p["threads_per_block"]), _f(dv["topk_step_us"]), f"{dv['bandwidth_bytes_per_s'] / 1e9:.2f}",
                      str(dv["lines_in_flight"]), _f(dv.get("ceiling_ratio"), "{:.0%}"), _f(dv.get("full_prefix_us")),
                      _f(dv.get("full_prefix_over_topk"), "{:.1f}×"))
        c.print(drop_to_fit(t, "lines", "×", "÷ceil", "prefix µs"))   # derived or structural: the figures stay
    render_warnings(rec, e)
