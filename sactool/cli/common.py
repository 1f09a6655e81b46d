"""Options and checks every verb of the command line shares."""

from __future__ import annotations


import typer

from sactool.errors import UsageError
from sactool.records import refuse_existing  # noqa: F401  (the one "exists / --force" rule)

FormatOpt = typer.Option("table", "--format", "-f", help="Output format: table, json or yaml.")
SysfsRootOpt = typer.Option(
    None, "--sysfs-root", envvar="SACTOOL_SYSFS_ROOT",
    help="Read /sys and /proc from this directory (a recorded machine) instead of the live system.",
)


def _check_format(fmt: str) -> str:
    from sactool.render import FORMATS

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return fmt



def check_format(fmt: str) -> str:
    from sactool.render import FORMATS

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return fmt
