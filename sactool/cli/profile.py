"""``sactool profile show|validate``."""

from __future__ import annotations

from pathlib import Path

import typer

from sactool.cli.common import FormatOpt, QuietOpt, check_format, example

profile_app = typer.Typer(help="Show or validate a serving profile.", no_args_is_help=True,
                          epilog=example("sactool profile show myhost.yaml", "sactool profile validate myhost.yaml"))


@profile_app.command("show", epilog=example("sactool profile show profiles/deepseek-v3.2/myhost.yaml --format yaml"))
def profile_show(file: Path = typer.Argument(..., help="Profile (YAML or JSON)."), fmt=FormatOpt,
                 quiet: bool = QuietOpt) -> None:
    """Print a profile: every setting with its provenance, and the predictions."""
    from sactool.profile import load_profile

    fmt = check_format(fmt)
    p = load_profile(file)
    if fmt == "table":
        from sactool.render.profile import render_profile

        render_profile(p, file)
    else:
        from sactool.render import emit_data

        emit_data(p, fmt)


@profile_app.command("validate", epilog=example("sactool profile validate profiles/deepseek-v3.2/myhost.yaml"))
def profile_validate(file: Path = typer.Argument(..., help="Profile (YAML or JSON)."), fmt=FormatOpt,
                     quiet: bool = QuietOpt) -> None:
    """Check a profile as serve will (exit 0 valid; 4 corrupt, invalid field or newer schema)."""
    from sactool.profile import load_profile
    from sactool.render.profile import render_valid

    from sactool.errors import SactoolError

    fmt = check_format(fmt)
    try:
        p = load_profile(file)
    except SactoolError as e:   # the verdict is data too: JSON/YAML readers get it on stdout, then the error
        if fmt != "table":
            from sactool.render import emit_data

            emit_data({"path": str(file), "valid": False, "error": e.message, "hint": e.hint,
                       "exit_code": int(e.exit_code)}, fmt)
        raise
    render_valid(p, file, fmt)
