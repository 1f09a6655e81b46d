"""``sactool serve``: build the launch from the profile, print it (``--dry-run``) or exec SGLang."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from sactool.cli.common import FormatOpt, SysfsRootOpt, check_format
from sactool.errors import UsageError


SERVE_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def serve(
    ctx: typer.Context,
    profile: Path = typer.Option(..., "--profile", "-p", help="Profile written by 'sactool tune'."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print argv and env delta with their sources; start nothing."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter of SGLang's environment (default: this one)."),
    entrypoint: Optional[str] = typer.Option(None, "--entrypoint", help="launch_server or serve (default: the profile's)."),
    allow_untested: bool = typer.Option(False, "--allow-untested-sglang",
                                        help="Start an SGLang outside the profile's sglang.tested range (warns)."),
    placement: Optional[str] = typer.Option(None, "--placement",
                                            help="Override pool.placement: plugin, numactl, or none (DRAM A/B baseline)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fmt: str = FormatOpt,
) -> None:
    """Start SGLang with the profile: HiSparse flags, pool placement plug-in, checks first. Extra SGLang args after --."""
    from sactool.serve.launch import build_launch, exec_launch

    check_format(fmt)
    if entrypoint is not None and entrypoint not in ("launch_server", "serve"):
        raise UsageError(f"unknown --entrypoint {entrypoint!r}", "use launch_server or serve")
    launch = build_launch(str(profile), list(ctx.args), python=python, entrypoint=entrypoint, dry_run=dry_run,
                          allow_untested=allow_untested, sysfs_root=str(sysfs_root) if sysfs_root else None,
                          placement=placement)
    if dry_run:
        from sactool.render.serve import render_launch

        render_launch(launch, fmt)
        return
    import shlex

    for line in launch.checks:
        sys.stderr.write(f"sactool serve: {line}\n")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.command.env_delta.items())
    sys.stderr.write(f"sactool serve: exec {env} {shlex.join(launch.command.argv)}\n")
    exec_launch(launch)
