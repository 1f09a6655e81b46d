"""``sactool serve``: build the launch from the profile, print it (``--dry-run``) or exec SGLang."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from sactool.cli.common import (RAW_ARGS, FormatOpt, QuietOpt, SysfsRootOpt, check_format, choices, example, flag,
                                value)
from sactool.errors import SactoolError, UsageError
from sactool.profile import ENGINES, ENTRYPOINTS, PLACEMENTS

SERVE_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": False}
"""Arguments after ``--`` go to SGLang; an unknown option before it is an error (a typo such as
``--dryrun`` must not reach SGLang and start a real launch)."""

if TYPE_CHECKING:   # choices() builds these str Enums from data at run time: the checker sees their base
    from enum import Enum as Engine, Enum as Entrypoint, Enum as Placement
else:
    Placement = choices("Placement", PLACEMENTS)
    Entrypoint = choices("Entrypoint", ENTRYPOINTS)
    Engine = choices("Engine", ENGINES)

EXAMPLE = example("sactool serve --profile myhost.yaml --dry-run -- --model-path deepseek-ai/DeepSeek-V3.2",
                  "sactool serve --profile myhost.yaml --python /opt/sglang/bin/python -- "
                  "--model-path deepseek-ai/DeepSeek-V3.2 --port 30000",
                  "sactool serve --engine vllm --profile vllm-host.yaml --python /opt/vllm/bin/python --dry-run "
                  "-- --port 8000")


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
    engine: Optional[Engine] = typer.Option(None, "--engine", case_sensitive=False,
                                            help="sglang or vllm; must be the profile's engine (default: the profile's)."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter of the engine's environment (default: this one)."),
    entrypoint: Optional[Entrypoint] = typer.Option(None, "--entrypoint", case_sensitive=False,
                                                    help="SGLang entry point (default: the profile's)."),
    allow_untested: bool = flag("--allow-untested-sglang", "--allow-untested-engine",
                                help="Start an engine outside the profile's tested range (sglang.tested / "
                                     "vllm.tested; warns)."),
    placement: Optional[Placement] = typer.Option(None, "--placement", case_sensitive=False,
                                                  help="Override pool.placement (none: the DRAM A/B baseline)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="With --dry-run: draw the rank plan on the machine "
                                                             "(each rank's GPU → its pool target) to this .svg, "
                                                             ".pdf or .png (by the extension; needs matplotlib)."),
    force: bool = flag("--force", help="Overwrite an existing --plot file."),
    strict: bool = flag("--strict", help="Refuse a profile tuned on another machine (its machine block: host, CPU "
                                         "model, CPUs, NUMA layout); without it, a warning."),
    fmt=FormatOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Start the profile's engine (SGLang or vLLM): HiSparse flags, pool placement plug-in, checks first. Extra engine args after --."""
    from sactool.serve.launch import build_launch, exec_launch

    fmt = check_format(fmt)
    plot_fmt = None
    if plot is not None:
        if not dry_run:
            raise UsageError("--plot draws the plan of a --dry-run", "add --dry-run (sactool serve --profile P "
                                                                     "--dry-run --plot plan.svg)")
        from sactool.cli.probe import check_plot

        plot_fmt = check_plot(plot, force)
    launch = build_launch(str(profile), sglang_args(ctx.args), python=python, entrypoint=value(entrypoint), dry_run=dry_run,
                          allow_untested=allow_untested, sysfs_root=str(sysfs_root) if sysfs_root else None,
                          placement=value(placement), engine=value(engine), strict=strict)
    if dry_run:
        from sactool.render.serve import render_launch

        render_launch(launch, fmt)
        if plot is not None and plot_fmt is not None:   # check_plot gave a format for every --plot
            _plot_plan(launch, plot, plot_fmt, sysfs_root, force)
        if launch.problems:   # the launch would be refused: say so in the exit code as well
            raise typer.Exit(int(launch.problems[0].exit_code))
        return
    import shlex

    from sactool.render import note

    for line in launch.checks:
        note(f"sactool serve: {line}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.command.env_delta.items())
    note(f"sactool serve: exec {env} {shlex.join(launch.command.argv)}")
    _run_file(launch)
    exec_launch(launch)


def _run_file(launch) -> None:
    """Record this launch for ``sactool watch`` (the PID stays the engine's after the exec); a run file
    that cannot be written costs the launch nothing: watch then needs --pid."""
    from sactool import runfile
    from sactool.render import note

    try:
        path = runfile.write(launch.profile_path, list(launch.command.argv), launch.profile.engine)
        note(f"sactool serve: run file {path} (sactool watch finds the engine through it)")
    except (OSError, SactoolError) as e:
        note(f"sactool serve: no run file ({getattr(e, 'message', e)}); sactool watch needs --pid")


def _plot_plan(launch, plot: Path, fmt: str, sysfs_root: Optional[Path], force: bool) -> None:
    """The machine of ``--sysfs-root`` (or this one) with the launch's rank plan on it: each rank's
    GPU as CUDA will number it (:mod:`sactool.topology.cuda`), or, when the GPU is not seen, a
    placeholder on the socket the profile names (``pool.gpu_local_nodes``)."""
    import os

    from sactool.cli.probe import write_plot
    from sactool.errors import SactoolError
    from sactool.host.sysfs import SysfsReader
    from sactool.render import note
    from sactool.topology import probe
    from sactool.topology.cuda import cuda_devices

    try:
        topo = probe(SysfsReader(sysfs_root))
    except SactoolError as e:
        if launch.problems:     # already reported; the exit code says it
            note(f"plot: not drawn ({e.message})")
            return
        raise
    plan = launch.pool.plan if launch.pool is not None else None
    if plan is None:
        note("plot: no rank plan (the pool check did not pass): the machine alone is drawn")
    env = dict(os.environ)
    env.update(launch.command.env_delta)
    view = cuda_devices(topo.gpus, env)
    gpus = [f"gpu-{view.gpus[s.gpu].pci_device}" if view.known and s.gpu < len(view.gpus) else None
            for s in (plan.slots if plan is not None else ())]
    write_plot(plot, topo, fmt, force=force, plan=plan, rank_gpus=gpus,
               gpu_sockets=tuple(launch.profile.pool.gpu_local_nodes))
