"""``sactool simulate``: options → :class:`sactool.simulate.api.SimulationOptions`, run, render."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from sactool.cli.common import FormatOpt, QuietOpt, check_format, check_output, choices, example, flag
from sactool.data import paper_platform
from sactool.errors import UsageError
from sactool.simulate.platform import CASES

if TYPE_CHECKING:   # choices() builds these str Enums from data at run time: the checker sees their base
    from enum import Enum as Case
else:
    Case = choices("Case", CASES)

EXAMPLE = example("sactool simulate --platform sactool/data/platforms/sac-paper.yaml --explain",
                  "sactool simulate --profile myhost.yaml --context 32k,128k --concurrency 8,16,32,64 --plot sim.png")


def simulate(
    platform: Optional[Path] = typer.Option(
        None, "--platform", help="Platform file (YAML), or a packaged platform by name (sac-paper); default "
        "with --profile: the packaged sac-paper for links, NICs and GPU figures."),
    profile: Optional[Path] = typer.Option(
        None, "--profile", help="A sactool profile: model, engine settings and its bench record's gather figures."),
    dram_bench: Optional[Path] = typer.Option(
        None, "--dram-bench", help="With --profile: bench record of a DRAM node for the local-DRAM placement."),
    context: Optional[str] = typer.Option(None, "--context", help="Context lengths, e.g. 32k,128k."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Concurrencies, e.g. 8,16,32,64,128."),
    output_tokens: Optional[int] = typer.Option(None, "--output-tokens", help="Output tokens per request."),
    case: Optional[Case] = typer.Option(None, "--case", case_sensitive=False,
                                        help="cache_hit (KV already in the pool) or cache_populate."),
    arrival_rate: Optional[float] = typer.Option(
        None, "--arrival-rate", help="Poisson arrivals per second (default: closed loop at the concurrency)."),
    prefetch: Optional[bool] = typer.Option(
        None, "--prefetch/--no-prefetch", help="Overlap each layer's swap-in with compute (what-if)."),
    placements: str = typer.Option("sac,rdma,dram", "--placements", help="Subset of sac,rdma,dram."),
    hotbuffer_steps: int = typer.Option(
        128, "--hotbuffer-steps", help="Decode steps simulated for hot-buffer misses per context."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", metavar="<field=value>", help="Override a platform field, e.g. --set nic.count=4 (repeatable)."),
    explain: bool = flag("--explain", help="Attribute each ratio to its drivers, and rerun the model with each "
                                           "input at ±50% to show the three each ratio is most sensitive to."),
    convert_bench: Optional[Path] = typer.Option(
        None, "--convert-bench", help="Bench record of 'sactool bench convert': the RDMA baseline's CPU-pass rate "
        "measured on this host instead of the platform's (read from the authors' logs)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write throughput, TTFT and TBT vs concurrency to this .svg, .pdf or .png "
                                                            "(by the extension; needs matplotlib)."),
    force: bool = flag("--force", help="Overwrite an existing --plot file."),
    fmt=FormatOpt,
    quiet: bool = QuietOpt,
) -> None:
    """What SAC/CXL vs an RDMA pool vs local DRAM would give: TTFT, TBT, throughput, memory, ratios."""
    from sactool.simulate.api import SimulationOptions
    from sactool.units import parse_int_list, parse_list, parse_tokens

    fmt = check_format(fmt)
    case = case.value if case is not None else None
    if platform is None and profile is None:
        raise UsageError("give --platform FILE or --profile P",
                         f"e.g. sactool simulate --platform {paper_platform()}")
    if plot is not None:                  # .svg, .pdf or .png (and matplotlib), or refused: the one --plot rule
        from sactool.render.figures import plot_format

        plot_format(plot)
    check_output(plot, force, "--plot")   # before the work: exists, unwritable directory, full disk
    if plot is not None:
        from sactool.render.figures import require_matplotlib

        require_matplotlib()
    if hotbuffer_steps < 2:
        raise UsageError(f"--hotbuffer-steps {hotbuffer_steps} must be >= 2", "e.g. 128")
    ctxs = tuple(parse_list(context, parse_tokens, what="context")) if context else None
    concs = parse_int_list(concurrency, what="--concurrency", minimum=1) if concurrency else None
    places = tuple(x.strip() for x in placements.split(",") if x.strip())
    plat, notes = _platform(platform, profile, dram_bench, overrides, convert_bench)
    sopts = SimulationOptions(plat, contexts=ctxs, concurrency=concs, output_tokens=output_tokens, case=case,
                              arrival_rate_per_s=arrival_rate, prefetch=prefetch, placements=places,
                              hotbuffer_steps=hotbuffer_steps, notes=tuple(notes))
    res, sens = _run(sopts, explain=explain and {"sac", "rdma", "dram"} <= set(places))
    _emit(res, sens, fmt=fmt, explain=explain, plot=plot, force=force)


def _platform(platform, profile, dram_bench, overrides, convert_bench):
    """(platform, notes): the file, or the profile's figures over a base platform (default: the
    paper's), with a measured conversion rate when ``--convert-bench`` is given."""
    from sactool.simulate.platform import load_platform

    notes: list = []
    if platform is not None:
        from sactool.data import resolve_platform

        platform, how = resolve_platform(platform)
        if how:
            from sactool.render import note

            note(how)
    if profile is not None:
        from sactool.simulate.fromprofile import platform_from_profile

        base_path = platform or paper_platform()
        if not base_path.exists():
            raise UsageError(f"base platform {base_path} not found", "give --platform FILE with links, NICs and GPU figures")
        plat, notes = platform_from_profile(profile, load_platform(base_path, overrides),
                                            dram_bench=str(dram_bench) if dram_bench else None)
    else:
        plat = load_platform(platform, overrides)
    if convert_bench is not None:
        from sactool.simulate.fromprofile import with_convert_bench

        plat, note = with_convert_bench(plat, convert_bench)
        notes.append(note)
    return plat, notes


def _run(sopts, *, explain: bool):
    """(result, sensitivity or None), with a progress bar on stderr."""
    from dataclasses import replace

    from sactool.render.bench import progress_reporter
    from sactool.simulate.api import simulate as run_sim

    cb, close = progress_reporter()
    sens = None
    try:
        sopts = replace(sopts, progress=cb)
        res = run_sim(sopts)
        if explain:
            from sactool.simulate.sensitivity import sensitivity

            sens = sensitivity(sopts, progress=cb)
        from sactool.errors import settle

        settle()   # computed: a signal from here on finds the result shown and the plot written
    finally:
        close()
    return res, sens


def _emit(res, sens, *, fmt: str, explain: bool, plot: Optional[Path], force: bool) -> None:
    """The result first (stdout), then the plot file (a concurrency that fits nowhere was refused
    before the work, exit 6)."""
    if fmt == "table":
        from sactool.render.simulate import render_simulation

        render_simulation(res, explain=explain, sensitivity=sens)
    else:
        from sactool.render import emit_data

        if sens is None:
            emit_data(res, fmt)
        else:
            from sactool.records import to_data

            data = res.to_data()
            data["sensitivity"] = to_data(sens)
            emit_data(data, fmt)
    if plot is not None:
        from sactool.cli.common import write_result
        from sactool.render import note
        from sactool.render.simfigure import plot_png

        from sactool.render.figures import plot_format

        fmt_plot = plot_format(plot)
        write_result(plot, plot_png(res, fmt_plot), force=force, kind="simulate-plot", suffix=f".{fmt_plot}")
        note(f"plot: {plot}")
