"""The one place sactool gets matplotlib and turns a figure into a file's bytes (the ``plot`` extra):
bench's curves, simulate's sweep and the machine picture all draw through these.

* :func:`pyplot` — matplotlib's pyplot on the Agg backend (no display), its config directory made
  writable first (a user without a writable HOME gets no "temporary cache directory" warning), or a
  UsageError naming the extra when matplotlib is not installed — checked before any work;
* :func:`figure_bytes` — the figure as PNG or SVG bytes (an SVG with text kept as text and no date,
  so two runs give the same file), the figure closed.
"""

from __future__ import annotations

from typing import Any


def require_matplotlib() -> Any:
    """The matplotlib module, or a UsageError naming the extra (checked before the work)."""
    from sactool.cachedir import ensure_mpl_config

    ensure_mpl_config()   # no "temporary cache directory" warning for a user without a writable HOME
    try:
        import matplotlib
    except ImportError:
        from sactool.errors import UsageError

        raise UsageError("--plot needs matplotlib", "pip install matplotlib (the 'plot' extra: pip install -e '.[plot]' in sactool's checkout)") from None
    return matplotlib


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (see :func:`require_matplotlib`)."""
    require_matplotlib().use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_bytes(fig: Any, fmt: str = "png", *, dpi: int = 110) -> bytes:
    """``fig`` as ``png`` or ``svg`` bytes; the figure is closed."""
    import io

    plt = pyplot()
    buf = io.BytesIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sactool"}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata={"Date": None} if fmt == "svg" else None)
    plt.close(fig)
    return buf.getvalue()
