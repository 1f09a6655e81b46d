"""Rendering: the only place that imports rich. Data formats go to stdout; everything else to stderr."""

from __future__ import annotations

import sys
from typing import Any

FORMATS = ("table", "json", "yaml")


def stdout_console():
    """A rich console on stdout (colour and tables only when stdout is a terminal)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def stderr_console():
    """A rich console on stderr for progress, logs, warnings."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def emit_data(data: Any, fmt: str) -> None:
    """Write a record as JSON or YAML to stdout (nothing else goes to stdout)."""
    from sactool.records import dumps

    sys.stdout.write(dumps(data, fmt))
    sys.stdout.flush()
