"""Options and checks every verb of the command line shares."""

from __future__ import annotations

from pathlib import Path

import typer

from sactool.errors import ExistsError, UsageError

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


def refuse_existing(path: Path | None, force: bool, hint: str = "pass --force to overwrite it") -> None:
    """An output that exists is not overwritten without ``--force`` (checked before any work)."""
    if path is not None and path.exists() and not force:
        raise ExistsError(f"{path} already exists", hint)
