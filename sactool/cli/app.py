"""The typer app: root options, one registration per verb (modules of :mod:`sactool.cli`), and
:func:`main`. Heavy imports (numpy, numba) happen inside the commands that measure, never at
module import, so ``sactool probe`` starts fast.

Errors: library code raises :class:`sactool.errors.SactoolError`; :func:`main` prints
``error: …`` / ``hint: …`` on stderr and exits with the error's code (a traceback only with
``--debug``). Ctrl-C exits 130; a closed stdout pipe (``| head``) exits quietly.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from sactool.cli import bench, gpugather, profile, serve, simulate, tune
from sactool.cli.probe import register as register_probe
from sactool.errors import ExitCode, run_guarded

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Probe, benchmark, tune and serve sparse-attention KV caches from CXL memory.",
    context_settings={"help_option_names": ["-h", "--help"]},
)

_STATE = {"debug": False}

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


register_probe(app)
gpugather.register(bench.bench_app)
app.add_typer(bench.bench_app, name="bench")
app.command()(tune.tune)
app.add_typer(profile.profile_app, name="profile")
app.command(context_settings=serve.SERVE_SETTINGS)(serve.serve)
app.command()(simulate.simulate)


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

    def run() -> int:
        try:
            rv = app(args=args, prog_name="sactool", standalone_mode=False)
            return rv if isinstance(rv, int) else ExitCode.OK
        except _Exit as e:
            return e.exit_code
        except _Abort:
            raise KeyboardInterrupt from None
        except _ClickException as e:
            e.show()
            return ExitCode.USAGE if isinstance(e, _ClickUsage) else ExitCode.ERROR

    code = run_guarded(run, debug=_STATE["debug"])
    if argv is None:
        sys.exit(int(code))
    return int(code)


if __name__ == "__main__":  # pragma: no cover
    main()
