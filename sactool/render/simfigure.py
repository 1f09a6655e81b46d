"""The ``--plot`` figure of ``sactool simulate``: throughput, TTFT and TBT against concurrency (or
context), a colour and marker per placement, drawn through :mod:`sactool.render.figures`."""

from __future__ import annotations

from sactool.render.simulate import NAMES
from sactool.units import format_tokens


STYLE = {  # colour per placement; SAC and DRAM often coincide: DRAM's diamond is larger and see-through
    # (no fill), SAC's filled circle smaller, so where they coincide the circle shows inside the diamond
    "sac": {"color": "tab:blue", "marker": "o", "markerfacecolor": "tab:blue", "linestyle": "-", "zorder": 3,
            "markersize": 5},
    "rdma": {"color": "tab:red", "marker": "s", "markerfacecolor": "tab:red", "linestyle": "--", "zorder": 2,
             "markersize": 5},
    "dram": {"color": "tab:green", "marker": "D", "markerfacecolor": "none", "markeredgewidth": 1.5,
             "linestyle": ":", "zorder": 4, "markersize": 9},
}
CONTEXT_DASHES = ["-", "--", "-.", ":"]


def simulation_figure(res):
    """Throughput, mean TTFT and mean TBT: one panel each, a colour and marker per placement (local
    DRAM's see-through diamond around SAC's circle where they coincide). The x axis is concurrency,
    one line per placement and context (contexts by dash pattern); at a single concurrency it is the
    context length instead, one line per placement — not a column of points nobody can tell apart.
    Returns the matplotlib Figure."""
    from sactool.render.figures import pyplot

    plt = pyplot()

    ctxs = sorted({p.context_tokens for p in res.points})
    concs = sorted({p.concurrency for p in res.points})
    by_ctx = len(concs) == 1 and len(ctxs) > 1
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4))
    panels = (("throughput", "output tokens/s", lambda p: p.throughput_tokens_per_s, False),
              ("TTFT (mean)", "mean TTFT (s)", lambda p: p.ttft_mean_s, True),
              ("TBT (mean)", "mean TBT (ms)", lambda p: p.tbt_mean_s * 1e3, False))
    for ax, (title, ylabel, get, log) in zip(axes, panels):
        for pl in ("sac", "rdma", "dram"):
            for i, ctx in enumerate([None] if by_ctx else ctxs):
                pts = [p for p in res.points if p.placement == pl and p.fits and (ctx is None or p.context_tokens == ctx)]
                xof = (lambda p: p.context_tokens) if by_ctx else (lambda p: p.concurrency)
                pts.sort(key=xof)
                if not pts:
                    continue
                st = dict(STYLE[pl])
                if not by_ctx and len(ctxs) > 1:   # contexts apart by dash pattern, placements by colour and marker
                    st["linestyle"] = CONTEXT_DASHES[i % len(CONTEXT_DASHES)]
                label = f"{NAMES[pl]} {format_tokens(ctx)}" if ctx is not None and len(ctxs) > 1 else NAMES[pl]
                capped = [p for p in pts if p.capped]
                ax.plot([xof(p) for p in pts], [get(p) for p in pts], label=label, **st)
                if capped:   # the excess waited: mark those points
                    ax.plot([xof(p) for p in capped], [get(p) for p in capped], linestyle="none",
                            marker="x", color="black", zorder=5)
        xs = ctxs if by_ctx else concs
        ax.set_xlabel(f"context (tokens), at concurrency {concs[0]}" if by_ctx else "concurrency (requests)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if len(xs) > 1 and xs[-1] / max(xs[0], 1) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([format_tokens(x) if by_ctx else str(x) for x in xs])
        ax.minorticks_off()
        if log:
            from matplotlib.ticker import FormatStrFormatter, NullFormatter

            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    capped = any(p.capped and p.fits for p in res.points)
    fig.suptitle(f"sactool simulate: {res.platform} ({res.model}, {res.case.replace('_', ' ')})"
                 + ("; x = above the placement's capacity, the excess waited" if capped else ""), fontsize=9)
    fig.tight_layout()
    return fig


def plot_png(res, fmt: str = "png") -> bytes:
    """:func:`simulation_figure` as ``png``, ``svg`` or ``pdf`` bytes."""
    from sactool.render.figures import figure_bytes

    return figure_bytes(simulation_figure(res), fmt)
