"""Console-script entry point with a fast path for ``sactool probe``.

``sactool probe`` must answer in ≤ 0.3 s. typer 0.29 imports pydantic and builds a TypeAdapter for
every non-flag option it parses: measured here with ``python -X importtime`` and ``/usr/bin/time``,
``import typer`` + ``typer._adapters`` cost ≈ 0.25 s of CPU before any work. So the plain forms

    sactool [--debug] probe [--format|-f F] [--sysfs-root D] [--snapshot F] [--plot F] [--force] [--quiet|-q]
                    [--poison] [--profile P]

are parsed here without typer and run :func:`sactool.cli.probe.run_probe`, the same function the
typer command calls. Anything else — ``--help``, other commands, unknown or malformed options —
goes to :func:`sactool.cli.app.main` untouched, so there is one source of truth for the CLI's
surface and tests check both paths give the same bytes and exit codes. Imports go one way:
entry → cli, never back.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

_VALUE_OPTS = {"--format": "fmt", "-f": "fmt", "--sysfs-root": "sysfs_root", "--snapshot": "snapshot", "--plot": "plot",
               "--profile": "profile"}


def parse_fast_probe(args: List[str]) -> Optional[dict]:
    """kwargs for :func:`run_probe` when ``args`` is a plain probe invocation, else None."""
    i = 0
    debug = False
    if args[:1] == ["--debug"]:
        debug, i = True, 1
    if args[i:i + 1] != ["probe"]:
        return None
    kw: dict = {"debug": debug}
    i += 1
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        if a == "--force" and "force" not in kw:
            kw["force"] = True
        elif a == "--poison" and "poison" not in kw:
            kw["poison"] = True
        elif a in ("--quiet", "-q") and "quiet" not in kw:
            kw["quiet"] = True
        elif a == "--debug" and not debug:
            kw["debug"] = debug = True
        elif name in _VALUE_OPTS:
            key = _VALUE_OPTS[name]
            if key in kw or (eq and name == "-f"):
                return None  # repeated option, or a short-option form left to typer
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("-"):
                    return None
                i += 1
                val = args[i]
            if not val:
                return None
            kw[key] = val
        else:
            return None  # help, unknown or repeated option: let typer explain
        i += 1
    if kw.get("fmt", "table") not in ("table", "json", "yaml"):   # = sactool.render.FORMATS
        return None  # a bad choice: typer's message, as for every other command
    for k in ("sysfs_root", "snapshot", "plot", "profile"):
        if k in kw:
            kw[k] = Path(kw[k])
    return kw


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    kw = parse_fast_probe(args)
    if kw is None:
        from sactool.cli.app import main as cli_main

        return cli_main(argv)
    from sactool.cli.probe import run_probe
    from sactool.cli.guard import run_guarded

    debug = kw.pop("debug")
    if argv is None:   # the process is sactool: SIGTERM keeps finished work as Ctrl-C does (a --snapshot)
        from sactool.errors import handle_sigterm

        handle_sigterm()
    from sactool.render import set_quiet

    set_quiet(kw.pop("quiet", False))
    code = run_guarded(lambda: run_probe(**kw), debug=debug)
    if argv is None:
        sys.exit(int(code))
    return int(code)
