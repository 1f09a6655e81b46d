"""The click command behind the typer app, for the generated CLI reference (docs/reference/cli.md:
mkdocs-click reads ``command`` here). Nothing imports this module at run time."""

from __future__ import annotations

import typer

from sactool.cli.app import app

command = typer.main.get_command(app)
