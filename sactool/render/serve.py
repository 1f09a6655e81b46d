"""Rendering of ``sactool serve --dry-run``: the command, where each flag came from, the checks."""

from __future__ import annotations

import shlex
import sys

from sactool.records import WarningLine
from sactool.render import emit_data, printable, stdout_console


def render_launch(launch, fmt: str) -> None:
    """``json``/``yaml``: the Launch record on stdout; ``table``: command line and explanation tables."""
    from sactool.render import print_warnings

    if fmt != "table":
        emit_data(launch.to_data(), fmt)
        print_warnings(launch.warnings)    # on stderr, as every command with --format json|yaml (-q: none)
        _problems(launch)
        return
    from rich.table import Table

    con = stdout_console()
    c = launch.command
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in c.env_delta.items())
    con.print((env + " " if env else "") + shlex.join(c.argv), markup=False, highlight=False, soft_wrap=True)
    t = Table(title="argv", show_lines=False)
    for col in ("flag", "from profile field", "why"):
        t.add_column(col, overflow="fold")
    for f in (*c.prefix, *c.flags):
        t.add_row(" ".join(f.args), f.source, f.why)
    con.print(t)
    if c.env:
        e = Table(title="environment delta")
        for col in ("variable", "value", "from profile field", "why"):
            e.add_column(col, overflow="fold")
        for v in c.env:
            e.add_row(v.name, v.value, v.source, v.why)
        con.print(e)
    for line in launch.checks:
        if not isinstance(line, WarningLine):      # warnings go to stderr, below
            con.print(f"check: {line}", markup=False, highlight=False, soft_wrap=True)
    for line in c.notes:
        con.print(f"note: {line}", markup=False, highlight=False, soft_wrap=True)
    print_warnings(launch.warnings)
    _problems(launch)


def _problems(launch) -> None:
    """What the launch would refuse, on stderr (the exit code is the first one's)."""
    for p in launch.problems:
        sys.stderr.write(printable(f"would refuse (exit {p.exit_code}): {p.message}\n"
                                   + (f"  hint: {p.hint}\n" if p.hint else "")))
