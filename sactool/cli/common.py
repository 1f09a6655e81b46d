"""Options and checks every verb of the command line shares."""

from __future__ import annotations

import typer

from sactool.records import refuse_existing  # noqa: F401  (the one "exists / --force" rule)
from sactool.render import check_format  # noqa: F401  (also the fast probe path's check)

FormatOpt = typer.Option("table", "--format", "-f", help="Output format: table, json or yaml.")
SysfsRootOpt = typer.Option(
    None, "--sysfs-root", envvar="SACTOOL_SYSFS_ROOT",
    help="Read /sys and /proc from this directory (a recorded machine) instead of the live system.",
)
