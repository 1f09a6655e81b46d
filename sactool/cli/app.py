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

from sactool.cli import bench, gpugather, profile, serve, simulate, tune, watch
from sactool.cli.common import RAW_ARGS, QuietOpt, example, flag
from sactool.cli.guard import run_guarded
from sactool.cli.probe import register as register_probe
from sactool.errors import ExitCode

def _flags_take_no_value() -> None:
    """typer 0.29's rich help prints a type for every option, ``--force <bool>`` included, though a
    flag takes no value; show flags without one (older typer never printed it: nothing to do)."""
    from typer.core import TyperOption

    orig = getattr(TyperOption, "display_type_rich", None)
    if orig is None or getattr(orig, "_sactool_flags", False):
        return

    def display_type_rich(self, ctx):
        if getattr(self, "is_flag", False) and not getattr(self, "count", False):
            return None
        return orig(self, ctx)

    display_type_rich._sactool_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()

app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    help="Probe, benchmark, tune and serve sparse-attention KV caches from CXL memory.",
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=example("sactool probe", "sactool bench --preset fast",
                   "sactool tune --model deepseek-v3.2 --out myhost.yaml",
                   "sactool serve --profile myhost.yaml --dry-run -- --model-path deepseek-ai/DeepSeek-V3.2"),
)

_STATE = {"debug": False}


def _version_cb(value: bool) -> None:
    if value:
        from sactool import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = flag("--debug", help="Show tracebacks for errors."),
    version: bool = flag("--version", "-V", help="Print the version and exit.", is_eager=True, callback=_version_cb),
    quiet: bool = QuietOpt,
) -> None:
    _STATE["debug"] = debug


register_probe(app)
gpugather.register(bench.bench_app)
app.add_typer(bench.bench_app, name="bench")
app.command(epilog=tune.EXAMPLE)(tune.tune)
app.add_typer(profile.profile_app, name="profile")
app.command(context_settings=serve.SERVE_SETTINGS, epilog=serve.EXAMPLE)(serve.serve)
app.command(epilog=simulate.EXAMPLE)(simulate.simulate)
app.command(epilog=watch.EXAMPLE)(watch.watch)


def _usage_error(e) -> int:
    """A click usage error (unknown option, bad choice, missing value) in sactool's own form."""
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "sactool"
    msg = e.format_message() if hasattr(e, "format_message") else str(e)
    msg = msg.replace("Value error, ", "")   # typer 0.29 validates choices through pydantic
    from sactool.render import printable

    sys.stderr.write(printable(f"error: {msg}\nhint: see '{where} --help'\n"))
    return int(ExitCode.USAGE)


def _check_completion_home() -> None:
    """``--install-completion`` writes under the home directory (``~/.bash_completions``, the shell's
    rc file): one that is missing or not writable (a service account's ``/nonexistent``, no HOME) is
    a one-line error — typer's was a PermissionError traceback, and as root it created the missing
    home silently."""
    import os
    from pathlib import Path

    from sactool.errors import SactoolError

    try:
        home = Path.home()
    except (KeyError, RuntimeError):
        home = None
    if home is None or not home.is_dir() or not os.access(home, os.W_OK | os.X_OK):
        why = "is not set" if home is None else ("does not exist" if not home.exists() else "is not writable")
        raise SactoolError(f"cannot install shell completion: the home directory {home or ''} {why}".replace("  ", " "),
                           "set HOME to a writable directory, or print the script with "
                           "'sactool --show-completion' and save it where your shell reads it")


def main(argv: Optional[List[str]] = None) -> int:
    """Console-script entry point; returns (and exits with) the process exit code."""
    try:  # typer >= 0.2x vendors click as typer._click and has its own Exit/Abort
        from typer import Abort as _Abort, Exit as _Exit
        from typer._click.exceptions import ClickException as _ClickException, UsageError as _ClickUsage
    except ImportError:  # pragma: no cover - older typer on real click
        # an older typer re-exports these very click classes; the checker reads the installed typer,
        # whose classes are its vendored click's, and calls them a different type: that alone is ignored
        from click.exceptions import Abort as _Abort, ClickException as _ClickException  # type: ignore[assignment]
        from click.exceptions import Exit as _Exit, UsageError as _ClickUsage  # type: ignore[assignment]

    args = list(sys.argv[1:] if argv is None else argv)
    _STATE["debug"] = "--debug" in args
    RAW_ARGS["args"] = args
    from sactool.render import set_quiet

    set_quiet(False)   # --quiet callbacks turn it on for this invocation only
    if argv is None:   # the process is sactool: SIGTERM keeps finished work as Ctrl-C does
        from sactool.errors import handle_sigterm

        handle_sigterm()

    def run() -> int:
        if "--install-completion" in args:
            _check_completion_home()
        try:
            rv = app(args=args, prog_name="sactool", standalone_mode=False)
            if rv == ExitCode.INTERRUPTED:
                # typer >= 0.2x turns a KeyboardInterrupt (Ctrl-C, or SIGTERM's Terminated) that leaves
                # a command into a silent 130; sactool's commands never return 130 themselves
                raise KeyboardInterrupt
            return rv if isinstance(rv, int) else ExitCode.OK
        except _Exit as e:
            return e.exit_code
        except _Abort:
            raise KeyboardInterrupt from None
        except _ClickUsage as e:
            if type(e).__name__ == "NoArgsIsHelpError":   # bare 'sactool': the help, as before
                e.show()
                return ExitCode.USAGE
            return _usage_error(e)
        except _ClickException as e:
            e.show()
            return ExitCode.ERROR

    code = run_guarded(run, debug=_STATE["debug"])
    if argv is None:
        sys.exit(int(code))
    return int(code)


if __name__ == "__main__":  # pragma: no cover
    main()
