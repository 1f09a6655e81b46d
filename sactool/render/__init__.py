"""Rendering: the only place that imports rich. Data formats go to stdout; everything else to stderr."""

from __future__ import annotations

import sys
from typing import Any

FORMATS = ("table", "json", "yaml")


def check_format(fmt: str) -> str:
    """``--format`` must be one of :data:`FORMATS` (UsageError otherwise); checked before any work."""
    if fmt not in FORMATS:
        from sactool.errors import UsageError

        raise UsageError(f"unknown format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return fmt


def _console_class():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits 1 here; a closed pipe (| head) is quiet and exit 0 (errors.run_guarded)
            self.quiet = True
            raise BrokenPipeError

    return _Console


def stdout_console():
    """A rich console on stdout (colour and tables only when stdout is a terminal)."""
    return _console_class()(highlight=False, soft_wrap=False)


def stderr_console():
    """A rich console on stderr for progress, logs, warnings."""
    return _console_class()(stderr=True, highlight=False)


def emit_data(data: Any, fmt: str) -> None:
    """Write a record as JSON or YAML to stdout (nothing else goes to stdout)."""
    from sactool.records import dumps

    sys.stdout.write(dumps(data, fmt))
    sys.stdout.flush()
