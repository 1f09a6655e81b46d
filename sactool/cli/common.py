"""Options and checks every verb of the command line shares.

Choices are :class:`enum.Enum` types built from the library's own tuples, so typer/click list them
in ``--help``, complete them in the shell and refuse anything else with exit 2 before any work.
Outputs (``--out``, ``--plot``, profiles) are checked before the work (exists without ``--force``,
a directory that cannot be written, a full disk) and written after it without ever losing the
finished result (:func:`write_result`).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Callable

import typer

from sactool.errors import SactoolError
from sactool.records import refuse_existing  # the one "exists / --force" rule
from sactool.render import FORMATS  # light: rich is imported only when something renders


def choices(name: str, values) -> type[enum.Enum]:
    """A ``str`` Enum whose members are ``values`` (typer shows ``a|b|c`` and completes them)."""
    return enum.Enum(name, [(v, v) for v in values], type=str)  # type: ignore[return-value]


def value(v):
    """The plain string behind an Enum option (None stays None)."""
    return v.value if isinstance(v, enum.Enum) else v


Format = choices("Format", FORMATS)

FormatOpt = typer.Option(Format("table"), "--format", "-f", case_sensitive=False,
                         help="Output format (data on stdout; progress and warnings on stderr).")
SysfsRootOpt = typer.Option(
    None, "--sysfs-root", envvar="SACTOOL_SYSFS_ROOT",
    help="Read /sys and /proc from this directory (a recorded machine) instead of the live system.",
)


def _quiet_cb(on: bool) -> bool:
    if on:
        from sactool.render import set_quiet

        set_quiet(True)
    return on


def flag(*names: str, help: str, callback: Callable | None = None, is_eager: bool = False):
    """A boolean flag (no value; shown without a type in ``--help``)."""
    return typer.Option(False, *names, help=help, callback=callback, is_eager=is_eager)


QuietOpt = flag("--quiet", "-q", help="No progress, notes or warnings on stderr (errors still print; "
                                      "warnings stay in the data).", callback=_quiet_cb, is_eager=True)

RAW_ARGS: dict[str, list[str]] = {"args": []}
"""The command line as given (``sactool.cli.app.main`` fills it): serve uses it to tell the
arguments after ``--`` from stray ones before it."""


def example(*lines: str) -> str:
    """The ``Example`` epilog of a command's ``--help``."""
    body = "\n\n".join(f"  $ {ln}" for ln in lines)
    return f"[bold]Example[/bold]\n\n{body}"


def check_format(fmt) -> str:
    """The ``--format`` value as a plain string (:func:`sactool.render.check_format` checks it)."""
    from sactool.render import check_format as _check

    return _check(value(fmt))


def check_output(path: Path | None, force: bool, what: str = "--out") -> None:
    """Before the work: ``path`` must not exist (unless ``force``) and its directory must take a
    file (see :func:`sactool.records.check_writable`)."""
    if path is None:
        return
    refuse_existing(path, force, f"pass --force to overwrite it, or choose another {what}")
    from sactool.records import check_writable

    check_writable(path)


def write_result(path: Path, data: bytes | str, *, force: bool, kind: str, suffix: str,
                 fallback_stdout: Callable[[], None] | None = None, on_stdout: bool = False) -> Path:
    """Write a finished result atomically without overwriting a file that appeared meanwhile
    (another run) unless ``force``. When the write fails (full disk, the file appeared, the
    directory went away) the result is saved under the temporary directory instead and the error
    names that file; if even that fails, ``fallback_stdout`` prints the data (``on_stdout``: it is
    there already). Raises the error after saving, so the exit code still says what went wrong."""
    from sactool import records

    written, e = records.save_result(path, data, force=force, kind=kind, suffix=suffix)
    if e is None:
        assert written is not None   # no error: the file is where it was asked to be
        return written
    if written is None:
        if fallback_stdout is not None or on_stdout:
            if fallback_stdout is not None:
                fallback_stdout()
            e.hint = "no file could be written anywhere: the record is on stdout"
        else:
            e.hint = "no file could be written anywhere; free some space and rerun"
    raise e


__all__ = ["Format", "FormatOpt", "QuietOpt", "SysfsRootOpt", "check_format", "check_output", "choices", "example",
           "flag", "refuse_existing", "value", "write_result"]
