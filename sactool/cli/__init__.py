"""Command line: the only package importing typer (and, through ``sactool.render``, rich).

``app`` (:mod:`sactool.cli.app`) declares the verbs; each lives in its own module — ``probe``,
``bench``, ``tune``, ``profile``, ``serve``, ``simulate`` — which parses options, calls one library
function and renders its result. This package file imports nothing, so the fast probe path
(:mod:`sactool.entry` → :mod:`sactool.cli.probe`) does not load typer.
"""

from __future__ import annotations


def main(argv=None) -> int:
    """See :func:`sactool.cli.app.main`."""
    from sactool.cli.app import main as _main

    return _main(argv)
