"""``sactool profile show|validate``."""

from __future__ import annotations

from pathlib import Path

import typer

from sactool.cli.common import FormatOpt, check_format

profile_app = typer.Typer(help="Show or validate a serving profile.", no_args_is_help=True)


@profile_app.command("show")
def profile_show(file: Path = typer.Argument(..., help="Profile (YAML or JSON)."), fmt: str = FormatOpt) -> None:
    """Print a profile: every setting with its provenance, and the predictions."""
    from sactool.profile import load_profile

    check_format(fmt)
    p = load_profile(file)
    if fmt == "table":
        from sactool.render.profile import render_profile

        render_profile(p, file)
    else:
        from sactool.render import emit_data

        emit_data(p, fmt)


@profile_app.command("validate")
def profile_validate(file: Path = typer.Argument(..., help="Profile (YAML or JSON).")) -> None:
    """Check a profile (exit 0 valid; 4 corrupt, invalid field or newer schema)."""
    from sactool.profile import load_profile
    from sactool.render.profile import render_valid

    render_valid(load_profile(file), file)
