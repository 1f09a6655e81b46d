"""``sactool serve``: build the launch from the profile, print it (``--dry-run``) or exec SGLang."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sactool.cli.common import (RAW_ARGS, FormatOpt, QuietOpt, SysfsRootOpt, check_format, choices, example, flag,
                                value)
from sactool.errors import UsageError
from sactool.profile import ENTRYPOINTS, PLACEMENTS

SERVE_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": False}
"""Arguments after ``--`` go to SGLang; an unknown option before it is an error (a typo such as
``--dryrun`` must not reach SGLang and start a real launch)."""

Placement = choices("Placement", PLACEMENTS)
Entrypoint = choices("Entrypoint", ENTRYPOINTS)

EXAMPLE = example("sactool serve --profile myhost.yaml --dry-run -- --model-path deepseek-ai/DeepSeek-V3.2",
                  "sactool serve --profile myhost.yaml --python /opt/sglang/bin/python -- "
                  "--model-path deepseek-ai/DeepSeek-V3.2 --port 30000")


def sglang_args(extra: list[str]) -> list[str]:
    """The arguments for SGLang: exactly those after the first ``--`` of the command line; any
    other stray argument is refused."""
    raw = RAW_ARGS["args"]
    after = raw[raw.index("--") + 1:] if "--" in raw else []
    if list(extra) != after:    # click hands over stray arguments before -- together with those after it
        raise UsageError(f"unexpected argument {extra[0]!r} before --",
                         "SGLang's own arguments go after --, e.g. sactool serve --profile P -- --port 30000")
    return list(extra)


def serve(
    ctx: typer.Context,
    profile: Path = typer.Option(..., "--profile", "-p", help="Profile written by 'sactool tune'."),
    dry_run: bool = flag("--dry-run", help="Print argv, env delta and checks with their sources; start nothing "
                                           "(exit code: what the launch would give)."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter of SGLang's environment (default: this one)."),
    entrypoint: Optional[Entrypoint] = typer.Option(None, "--entrypoint", case_sensitive=False,
                                                    help="SGLang entry point (default: the profile's)."),
    allow_untested: bool = flag("--allow-untested-sglang",
                                help="Start an SGLang outside the profile's sglang.tested range (warns)."),
    placement: Optional[Placement] = typer.Option(None, "--placement", case_sensitive=False,
                                                  help="Override pool.placement (none: the DRAM A/B baseline)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fmt=FormatOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Start SGLang with the profile: HiSparse flags, pool placement plug-in, checks first. Extra SGLang args after --."""
    from sactool.serve.launch import build_launch, exec_launch

    fmt = check_format(fmt)
    entrypoint, placement = value(entrypoint), value(placement)
    launch = build_launch(str(profile), sglang_args(ctx.args), python=python, entrypoint=entrypoint, dry_run=dry_run,
                          allow_untested=allow_untested, sysfs_root=str(sysfs_root) if sysfs_root else None,
                          placement=placement)
    if dry_run:
        from sactool.render.serve import render_launch

        render_launch(launch, fmt)
        if launch.problems:   # the launch would be refused: say so in the exit code as well
            raise typer.Exit(int(launch.problems[0].exit_code))
        return
    import shlex

    from sactool.render import note

    for line in launch.checks:
        note(f"sactool serve: {line}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.command.env_delta.items())
    note(f"sactool serve: exec {env} {shlex.join(launch.command.argv)}")
    exec_launch(launch)
