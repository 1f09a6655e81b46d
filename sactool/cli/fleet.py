"""The probe and bench hooks in fleet mode (``mpirun … sactool probe|bench``): run the fleet
library, render on rank 0 only. Imported only when :func:`sactool.fleet.detect` found a fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from sactool.errors import UsageError


def probe_fleet(fleet, fmt: str, sysfs_root: Optional[Path], snapshot: Optional[Path]) -> None:
    from sactool.fleet import commands

    data = commands.probe(fleet, sysfs_root, snapshot)
    if data is not None:
        _show(data, fmt, "probe")


def bench_fleet(fleet, opts, nd, out: Optional[Path], force: bool, fmt: str, plot: Optional[Path]) -> int:
    from sactool.fleet import commands

    if nd == "all" or plot is not None:
        commands.refuse(fleet, UsageError("a fleet bench takes one memory node and draws no plot",
                                          "drop --node all / --plot under mpirun"))
    cb, close = (lambda d, n, t: None), (lambda: None)
    notify: Optional[Callable[[str], None]] = None
    if fleet.is_root:
        from sactool.render import note
        from sactool.render.bench import progress_reporter

        cb, close = progress_reporter()
        notify = note   # for whom the job waits (sactool.fleet.lock): rank 0 says it once
    try:
        data = commands.bench(fleet, opts, out, force, progress=cb, notify=notify)
    finally:
        close()
    if data is not None:
        _show(data, fmt, "bench")
    return 0


def _show(data: dict, fmt: str, what: str) -> None:
    from sactool.render import emit_data
    from sactool.render.fleet import render_fleet_bench, render_fleet_probe, render_warnings

    render_warnings(data)
    if fmt != "table":
        emit_data(data, fmt)
        return
    from sactool.render.fleet import plain_console

    (render_fleet_probe if what == "probe" else render_fleet_bench)(data, console=plain_console())
