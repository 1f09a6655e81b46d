"""Command line: the only module importing typer. Each command parses options, calls one library
function, and renders its result. Heavy imports (numpy, numba) happen inside the commands that
measure, never at module import, so ``sactool probe`` starts fast.

Errors: library code raises :class:`sactool.errors.SactoolError`; :func:`main` prints
``error: …`` / ``hint: …`` on stderr and exits with the error's code (a traceback only with
``--debug``). Ctrl-C exits 130; a closed stdout pipe (``| head``) exits quietly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from sactool.errors import ExitCode, SactoolError, UsageError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Probe, benchmark, tune and serve sparse-attention KV caches from CXL memory.",
    context_settings={"help_option_names": ["-h", "--help"]},
)

_STATE = {"debug": False}

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


def _version_cb(value: bool) -> None:
    if value:
        from sactool import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_version_cb),
) -> None:
    _STATE["debug"] = debug


# ---------------------------------------------------------------------------------------------
# probe  (issue 2)
# ---------------------------------------------------------------------------------------------
@app.command()
def probe(
    fmt: str = FormatOpt,
    sysfs_root: Optional[Path] = SysfsRootOpt,
    snapshot: Optional[Path] = typer.Option(
        None, "--snapshot", help="Also write the files the prober read to this .tar.gz (for bug reports)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --snapshot file."),
) -> None:
    """What memory do I have: NUMA nodes, which is CXL and why, CXL devices, regions, DAX, HMAT, tiers."""
    from sactool.host.sysfs import SysfsReader
    from sactool.topology import probe as do_probe

    _check_format(fmt)
    if snapshot is not None and snapshot.exists() and not force:
        from sactool.errors import ExistsError

        raise ExistsError(f"{snapshot} exists", "pass --force to overwrite it, or choose another name")
    reader = SysfsReader(sysfs_root)
    topo = do_probe(reader)
    if snapshot is not None:
        from sactool.topology.snapshot import write_snapshot

        path = write_snapshot(reader, snapshot, force=force)
        typer.echo(f"snapshot: {path} ({len(reader.touched)} paths)", err=True)
    if fmt == "table":
        from sactool.render.probe import render_probe

        render_probe(topo)
    else:
        from sactool.render import emit_data

        emit_data(topo, fmt)


# ---------------------------------------------------------------------------------------------
# bench  (issue 6)
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# tune, profile  (issue 3)
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# serve  (issue 4)
# ---------------------------------------------------------------------------------------------
@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    profile: Path = typer.Option(..., "--profile", "-p", help="Profile written by 'sactool tune'."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print argv and env delta with their sources; start nothing."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter of SGLang's environment (default: this one)."),
    entrypoint: Optional[str] = typer.Option(None, "--entrypoint", help="launch_server or serve (default: the profile's)."),
    allow_untested: bool = typer.Option(False, "--allow-untested-sglang",
                                        help="Start an SGLang outside the profile's sglang.tested range (warns)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fmt: str = FormatOpt,
) -> None:
    """Start SGLang with the profile: HiSparse flags, pool placement plug-in, checks first. Extra SGLang args after --."""
    from sactool.serve import build_launch, exec_launch

    _check_format(fmt)
    if entrypoint is not None and entrypoint not in ("launch_server", "serve"):
        raise UsageError(f"unknown --entrypoint {entrypoint!r}", "use launch_server or serve")
    launch = build_launch(str(profile), list(ctx.args), python=python, entrypoint=entrypoint, dry_run=dry_run,
                          allow_untested=allow_untested, sysfs_root=str(sysfs_root) if sysfs_root else None)
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


# ---------------------------------------------------------------------------------------------
# simulate  (issue 5)
# ---------------------------------------------------------------------------------------------


def _print_error(e: SactoolError) -> None:
    sys.stderr.write(f"error: {e.message}\n")
    if e.hint:
        sys.stderr.write(f"hint: {e.hint}\n")


def main(argv: Optional[List[str]] = None) -> int:
    """Console-script entry point; returns (and exits with) the process exit code."""
    try:  # typer >= 0.2x vendors click as typer._click and has its own Exit/Abort
        from typer import Abort as _Abort, Exit as _Exit
        from typer._click.exceptions import ClickException as _ClickException, UsageError as _ClickUsage
    except ImportError:  # pragma: no cover - older typer on real click
        from click.exceptions import Abort as _Abort, ClickException as _ClickException
        from click.exceptions import Exit as _Exit, UsageError as _ClickUsage

    args = list(sys.argv[1:] if argv is None else argv)
    _STATE["debug"] = "--debug" in args
    code: int = ExitCode.OK
    try:
        rv = app(args=args, prog_name="sactool", standalone_mode=False)
        code = rv if isinstance(rv, int) else ExitCode.OK
    except SactoolError as e:
        if _STATE["debug"]:
            import traceback

            traceback.print_exc()
        _print_error(e)
        code = e.exit_code
    except _Exit as e:
        code = e.exit_code
    except _Abort:
        sys.stderr.write("interrupted\n")
        code = ExitCode.INTERRUPTED
    except _ClickException as e:
        e.show()
        code = ExitCode.USAGE if isinstance(e, _ClickUsage) else ExitCode.ERROR
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = ExitCode.INTERRUPTED
    except BrokenPipeError:
        # stdout closed early (| head): be quiet, and keep Python from complaining at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = ExitCode.OK
    if argv is None:
        sys.exit(int(code))
    return int(code)


if __name__ == "__main__":  # pragma: no cover
    main()
