"""The one place sactool gets matplotlib and turns a figure into a file's bytes (the ``plot`` extra):
bench's curves, simulate's sweep and the machine picture all draw through these.

* :func:`pyplot` — matplotlib's pyplot on the Agg backend (no display), its config directory made
  writable first (a user without a writable HOME gets no "temporary cache directory" warning), or a
  UsageError naming the extra when matplotlib is not installed — checked before any work;
* :func:`plot_format` — the one rule for every ``--plot`` (bench, simulate, probe, serve): the file's
  extension names the format, ``.svg``, ``.pdf`` or ``.png``; any other name is refused before the work;
* :func:`figure_bytes` — the figure as PNG, SVG or PDF bytes (an SVG with text kept as text and no date,
  a PDF without a creation date, so two runs give the same file), the figure closed.
"""

from __future__ import annotations

from typing import Any


def require_matplotlib() -> Any:
    """The matplotlib module, or a UsageError naming the extra (checked before the work)."""
    from sactool.cachedir import ensure_mpl_config

    ensure_mpl_config()   # no "temporary cache directory" warning for a user without a writable HOME
    from sactool.render import quiet

    if quiet():
        # --quiet holds for matplotlib's own log too: its one-time "building the font cache" warning fires
        # when that build takes over 5 s (a first plot on a busy machine), which no sactool line could silence
        import logging

        logging.getLogger("matplotlib").setLevel(logging.ERROR)
    try:
        import matplotlib
    except ImportError:
        from sactool.errors import UsageError

        raise UsageError("--plot needs matplotlib", "pip install matplotlib (the 'plot' extra: pip install -e '.[plot]' in sactool's checkout)") from None
    return matplotlib


PLOT_FORMATS = {".svg": "svg", ".pdf": "pdf", ".png": "png"}
"""``--plot`` file extension -> the format written (matplotlib's own writers: vector SVG and PDF, raster PNG)."""


def plot_format(path: Any) -> str:
    """``svg``, ``pdf`` or ``png`` from ``path``'s extension (UsageError otherwise, exit 2), and matplotlib
    there: checked before any work, for every command's ``--plot``."""
    from pathlib import Path

    from sactool.errors import UsageError

    fmt = PLOT_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise UsageError(f"--plot {path}: the picture is written as SVG, PDF or PNG, by the file's extension",
                         "name it .svg, .pdf or .png, e.g. --plot plot.svg")
    require_matplotlib()
    return fmt


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (see :func:`require_matplotlib`)."""
    require_matplotlib().use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_bytes(fig: Any, fmt: str = "png", *, dpi: int = 110) -> bytes:
    """``fig`` as ``png``, ``svg`` or ``pdf`` bytes; the figure is closed."""
    import io

    plt = pyplot()
    buf = io.BytesIO()
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt)
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sactool"}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=metadata)
    plt.close(fig)
    return buf.getvalue()
