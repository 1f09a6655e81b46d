"""Rendering: the only place that imports rich. Data formats go to stdout; everything else to stderr."""

from __future__ import annotations

import sys
from typing import Any

from sactool.textsafe import printable  # re-exported: the render boundary escapes what files hold

FORMATS = ("table", "json", "yaml")

_QUIET = {"on": False}


def set_quiet(on: bool = True) -> None:
    """``--quiet``: no progress, notes or warnings on stderr (errors still print; data is unchanged)."""
    _QUIET["on"] = bool(on)


def quiet() -> bool:
    return _QUIET["on"]


def note(message: str) -> None:
    """One plain line on stderr (a note, a path written), unless ``--quiet``."""
    if not _QUIET["on"]:
        sys.stderr.write(printable(message) + "\n")
        sys.stderr.flush()


COMPILING = "compiling kernels (first run, cached afterwards)"
_COMPILE_SAID = {"done": False}


def compile_notice(say=None):
    """Say :data:`COMPILING` once per process, on stderr, when numba starts a real compile (a
    kernel loaded from numba's cache raises no ``numba:compile`` event, so a warm run says nothing).
    ``say``: how to print it (default :func:`note`). Returns a function that removes the listener."""
    try:
        from numba.core import event as ev
    except ImportError:  # pragma: no cover - numba is a dependency
        return lambda: None

    class _First(ev.Listener):
        def on_start(self, event):
            if not _COMPILE_SAID["done"]:
                _COMPILE_SAID["done"] = True
                (say or note)(COMPILING)

        def on_end(self, event):
            pass

    listener = _First()
    ev.register("numba:compile", listener)
    return lambda: ev.unregister("numba:compile", listener)


def check_format(fmt: str) -> str:
    """``--format`` must be one of :data:`FORMATS` (UsageError otherwise); checked before any work."""
    if fmt not in FORMATS:
        from sactool.errors import UsageError

        raise UsageError(f"unknown format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return fmt


def _console_class():
    from rich.console import Console

    class _Console(Console):
        def _render_buffer(self, buffer):
            # text from files (a recorded tree, a profile) may hold ESC and friends; rich strips
            # BEL/CR/BS but not ESC. Its own control segments (cursor moves) stay as they are.
            return super()._render_buffer(seg if seg.control else seg._replace(text=printable(seg.text))
                                          for seg in buffer)

        def print(self, *objects, **kw):  # noqa: A003 - rich's own name
            from rich.table import Table

            for obj in objects:      # a table never cuts a value at this width (fit_table)
                if isinstance(obj, Table) and not getattr(obj, "_sactool_fitted", False):
                    fit_table(obj, self.width)
            return super().print(*objects, **kw)

        def on_broken_pipe(self) -> None:
            # rich exits 1 here; a closed pipe (| head) is quiet and exit 0 (cli.guard.run_guarded)
            self.quiet = True
            raise BrokenPipeError

    return _Console


def stdout_console():
    """A rich console on stdout (colour and tables only when stdout is a terminal)."""
    return _console_class()(highlight=False, soft_wrap=False)


def stderr_console():
    """A rich console on stderr for progress, logs, warnings."""
    return _console_class()(stderr=True, highlight=False, quiet=_QUIET["on"])


def emit_data(data: Any, fmt: str) -> None:
    """Write a record as JSON or YAML to stdout (nothing else goes to stdout)."""
    from sactool.records import dumps

    sys.stdout.write(dumps(data, fmt))
    sys.stdout.flush()


def print_warnings(warnings, err=None) -> None:
    """Warnings on stderr (unless ``--quiet``), one form for every command: ``warning [code] message``,
    then ``  hint: …`` on a line of its own. ``warnings``: :class:`sactool.records.Warning` objects,
    their mappings (``code``, ``message``, ``hint``), or (code, message, hint) tuples."""
    from rich.markup import escape

    con = err or stderr_console()
    for w in warnings:
        if isinstance(w, tuple):
            code, message, hint = w
        elif isinstance(w, dict):
            code, message, hint = w.get("code"), w.get("message"), w.get("hint")
        else:
            code, message, hint = w.code, w.message, w.hint
        con.print(f"[yellow]warning[/] {escape('[' + str(code) + ']')} {escape(str(message))}"
                  + (f"\n  hint: {escape(str(hint))}" if hint else ""))


def drop_to_fit(table, *headers: str):
    """Name the columns ``table`` may lose, first to last, where it does not fit the terminal
    (:func:`fit_table`); returns ``table``."""
    table._sactool_drop = tuple(headers)
    return table


def _header(col) -> str:
    return str(col.header)


def _cut_marks(table) -> int:
    """How many "…" the table's own text holds (title, caption, headers, cells): more in its rendering means rich cut something."""
    texts = [table.title, table.caption] + [c.header for c in table.columns]
    texts += [cell for c in table.columns for cell in c._cells]
    return sum(str(t).count("…") for t in texts if t is not None)


def _render_cuts(table, width: int) -> bool:
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False).print(table)
    return buf.getvalue().count("…") > _cut_marks(table)


def fit_table(table, width: int):
    """Make ``table`` print at ``width`` columns without cutting a value (rich ends a cell too narrow for it
    in "…": at 80 columns bench gpu-gather showed ``20…``, ``unifo…``, ``3711895…``): text columns fold
    long words instead of cutting them; where the unbreakable columns (numbers, names) still do not fit,
    the columns :func:`drop_to_fit` names are dropped, first to last, and the caption says which; as a
    last resort the rest fold too. Returns ``table``."""
    for col in table.columns:
        if not col.no_wrap and col.overflow == "ellipsis":
            col.overflow = "fold"
    drop = list(getattr(table, "_sactool_drop", ()))
    dropped = []
    while _render_cuts(table, width):
        col = next((c for name in drop for c in table.columns if _header(c) == name), None)
        if col is None:
            for c in table.columns:
                c.no_wrap, c.overflow = False, "fold"
            break
        drop.remove(_header(col))
        table.columns.remove(col)
        for i, c in enumerate(table.columns):
            c._index = i
        dropped.append(_header(col).replace("\n", " "))
    if dropped:
        note = f"not shown at {width} columns: {', '.join(dropped)} (a wider terminal or --format json shows them)"
        table.caption = f"{table.caption}; {note}" if table.caption else note
        table.caption_justify = "left"
    table._sactool_fitted = True
    return table
