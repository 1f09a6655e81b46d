"""Drawing a :class:`~sactool.render.machine.Scene` with matplotlib (the ``plot`` extra, imported
only when a picture is asked for): boxes, labelled PCIe links, member lines, socket → GPU trunks,
rank routes, the legend; SVG with text kept as text (names can be searched), or PNG.
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.render.machine import (COLOURS, GPUS_PER_COLUMN, HIGHLIGHT, LINE_H, ROW_H, WARN, Box, Edge, Scene,
                                    W_GPU)

from sactool.render.figures import plot_format  # noqa: E402,F401  (the one --plot rule, re-exported)

MARGIN = 0.3
LEGEND = ("link labels: negotiated speed × width (LnkSta) · per-direction ceiling = GT/s × lanes × encoding / 8 "
          "(a bound, not a measurement) · cap = the lower LnkCap of its two ends; thick orange = the narrowest "
          "link on the device's path; red: negotiated below what both ends can do")
RANK_LEGEND = "coloured lines: each rank's GPU → its pool target (a colour per target)"


def _tidy(sc: Scene) -> None:
    """Boxes shared by several columns (a switch) centred over them; each edge once."""
    cols: dict[str, list[float]] = {}
    for e in sc.edges:
        if e.kind == "link" and e.x is not None:
            for g in (e.a, e.b):
                if sc.boxes.get(g) is not None and sc.boxes[g].kind == "switch":
                    cols.setdefault(g, []).append(e.x)
    for g, xs in cols.items():
        b = sc.boxes[g]
        b.x, b.w = (min(xs) + max(xs)) / 2, max(xs) - min(xs) + W_GPU
    seen, edges = set(), []
    for e in sc.edges:
        key = (e.a, e.b, e.kind, e.label if e.kind == "rank" else "")
        if key in seen:
            continue
        seen.add(key)
        if e.kind == "link" and e.b in cols:
            e.x = sc.boxes[e.b].x
        edges.append(e)
    sc.edges = edges


def X(x: float) -> float:
    """Scene x (inches from the first column) → figure inches."""
    return MARGIN + x


def Y(y: float) -> float:
    """Scene row → figure inches from the top (the title takes the first 0.75 in)."""
    return 0.75 + y * ROW_H


def machine_figure(sc: Scene):
    """The matplotlib Figure of a :class:`Scene`: socket areas and boxes, then links, members,
    trunks and rank routes, then the legend and notes."""
    import textwrap

    from sactool.render.figures import pyplot

    plt = pyplot()

    _tidy(sc)
    width = max(sc.width + 2 * MARGIN, 6.5)
    links = any(e.kind == "link" for e in sc.edges) or any(b.kind == "gpu" for b in sc.boxes.values())
    legend = ([LEGEND] if links else []) + ([RANK_LEGEND] if any(e.kind == "rank" for e in sc.edges) else [])
    notes = [ln for n in legend + sc.notes for ln in textwrap.wrap(n, int((width - 2 * MARGIN) * 19))]
    ranks = [e for e in sc.edges if e.kind == "rank" and e.a in sc.boxes and e.b in sc.boxes]
    body = Y(sc.rows) + (0.12 + 0.1 * len(ranks) if ranks else 0.0)
    height = body + 0.2 + 0.15 * len(notes)
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    ax.text(MARGIN, 0.28, sc.title, fontsize=10, fontweight="bold", va="center", gid="title")
    _draw_boxes(ax, sc, body)
    route = _routes(sc, ranks)
    for e in sc.edges:
        if e.a in sc.boxes and e.b in sc.boxes:
            _draw_edge(ax, sc, e, route)
    for i, n in enumerate(notes):
        ax.text(MARGIN, body + 0.2 + 0.15 * i, n, fontsize=6.8, va="center", color="#333333")
    return fig


def _draw_boxes(ax, sc: Scene, body: float) -> None:
    """Each socket's area (its column group, behind everything), then every box with its lines."""
    from matplotlib.patches import FancyBboxPatch

    for b in sc.boxes.values():
        if b.kind == "socket":
            w = b.w + 0.16
            ax.add_patch(FancyBboxPatch((X(b.x) - w / 2, Y(b.y) - b.height() / 2 - 0.05), w,
                                        body - (Y(b.y) - b.height() / 2), boxstyle="round,pad=0.02",
                                        facecolor="#f7f9fc", edgecolor="#b8c4d6", linewidth=0.8, zorder=0))
    for b in sc.boxes.values():
        w, h = b.w, b.height()
        patch = FancyBboxPatch((X(b.x) - w / 2, Y(b.y) - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.06",
                               facecolor=COLOURS.get(b.kind, "#ffffff"), edgecolor="#555555",
                               linestyle="--" if b.dashed else "-", linewidth=0.9, zorder=3)
        patch.set_gid(b.gid)
        ax.add_patch(patch)
        top = Y(b.y) - h / 2 + 0.08 + LINE_H / 2
        for i, line in enumerate(b.lines):
            mark = line[:1] if line[:1] in (HIGHLIGHT, WARN) else ""
            ax.text(X(b.x), top + i * LINE_H, line[len(mark):], ha="center", va="center", zorder=4,
                    fontsize=7.5 if i else 8, fontweight="bold" if i == 0 or mark else "normal",
                    color={HIGHLIGHT: "#b35900", WARN: "#c00000"}.get(mark, "black"),
                    gid=f"{b.gid}-text{i}" if i else f"{b.gid}-name")


@dataclass
class _Route:
    lanes: dict[int, float]             # rank edge -> the y of its lane under every box
    slot: dict[int, tuple[int, int]]    # rank edge -> (its index among its target's arrivals, how many)
    depth: dict[str, int]               # GPU gid -> its place in its stack, top first


def _routes(sc: Scene, ranks: list[Edge]) -> _Route:
    """Rank lines leave the GPU sideways, run down beside its stack to a lane of their own under
    every box, along it, and up into the target's bottom edge (a target is the lowest box of its
    column). The top GPU of a stack runs down furthest out and arrivals are ordered so that no lane
    crosses another line's way down or up."""
    lanes = {id(e): Y(sc.rows) + 0.1 * i for i, e in enumerate(ranks)}
    stacks: dict[float, list[Box]] = {}
    for bx in sc.boxes.values():
        if bx.kind in ("gpu", "missing"):
            stacks.setdefault(bx.x, []).append(bx)
    depth = {bx.gid: i for col in stacks.values() for i, bx in enumerate(sorted(col, key=lambda q: q.y))}
    slot: dict[int, tuple[int, int]] = {}
    for t in {e.b for e in ranks}:
        # from the left in lane order, then from the right in reverse lane order
        mine = sorted((e for e in ranks if e.b == t),
                      key=lambda e: (0, lanes[id(e)]) if sc.boxes[e.a].x < sc.boxes[t].x else (1, -lanes[id(e)]))
        slot.update({id(e): (i, len(mine)) for i, e in enumerate(mine)})
    return _Route(lanes, slot, depth)


def _draw_edge(ax, sc: Scene, e: Edge, route: _Route) -> None:
    """One edge: a PCIe link (labelled), a socket → GPU trunk, a member line, or a rank route."""
    from matplotlib.patches import FancyArrowPatch

    a, b = sc.boxes[e.a], sc.boxes[e.b]
    y0, y1 = Y(a.y) + a.height() / 2, Y(b.y) - b.height() / 2
    if e.kind == "link":
        x = X(e.x if e.x is not None else b.x)
        ax.plot([x, x], [y0, y1], color="#e67e00" if e.narrowest else "#444444", lw=3.2 if e.narrowest else 1.2,
                zorder=2, solid_capstyle="butt", gid=f"link-{e.a}-{e.b}")
        text = e.label.replace(" · cap", "\ncap").replace(" · ", " = ", 1).replace(" · downgraded", "\nDOWNGRADED")
        ax.text(x, (y0 + y1) / 2, ("narrowest link\n" if e.narrowest else "") + text, fontsize=6.5,
                va="center", ha="center", zorder=5, color="#8a4b00" if e.narrowest else "#222222",
                linespacing=1.15, bbox=dict(boxstyle="round,pad=0.12", facecolor="white",
                                            edgecolor="#e67e00" if e.narrowest else "#999999", lw=0.6))
    elif e.kind == "trunk":          # socket → a GPU hanging off it: trunk down, branch across
        tx = e.x if e.x is not None else a.x   # the layout gives every trunk its x; else the socket's centre
        ax.plot([X(tx), X(tx), X(b.x) - b.w / 2], [y0, Y(b.y), Y(b.y)], color="#4a7a45", lw=1.4, zorder=1,
                linestyle="--" if b.dashed else "-")
    elif e.kind == "member":
        ax.plot([X(a.x), X(b.x)], [y0, y1], color="#777777", lw=1.0, zorder=1)
        if e.label:
            ax.text((X(a.x) + X(b.x)) / 2 + 0.05, (y0 + y1) / 2, e.label, fontsize=6.3, va="center", zorder=5,
                    bbox=dict(boxstyle="round,pad=0.06", facecolor="white", edgecolor="none", alpha=0.85))
    else:                            # a rank: GPU → its target, routed under everything (see _routes)
        k, n = route.slot[id(e)]
        gx = X(a.x) + a.w / 2 + 0.06 + 0.045 * (GPUS_PER_COLUMN - 1 - route.depth[e.a] % GPUS_PER_COLUMN)
        tx = X(b.x) - b.w / 2 + b.w * (k + 1) / (n + 1)
        yl, col = route.lanes[id(e)], e.colour or "#1f77b4"
        ax.plot([X(a.x) + a.w / 2, gx, gx, tx], [Y(a.y), Y(a.y), yl, yl], color=col,
                lw=1.3, alpha=0.85, zorder=2, solid_joinstyle="round", gid=f"route-{e.label.replace(' ', '-')}")
        ax.add_patch(FancyArrowPatch((tx, yl), (tx, Y(b.y) + b.height() / 2), arrowstyle="-|>", mutation_scale=10,
                                     lw=1.3, color=col, alpha=0.85, zorder=2, shrinkA=0, shrinkB=0,
                                     gid=f"arrow-{e.label.replace(' ', '-')}"))


def plot_machine(sc: Scene, fmt: str) -> bytes:
    """The picture as ``svg`` (text kept as text, so names can be searched) or ``png`` bytes."""
    from sactool.render.figures import figure_bytes

    return figure_bytes(machine_figure(sc), fmt, dpi=100)
