"""Command line: the only module importing typer. Each command parses options, calls one library
function, and renders its result. Heavy imports (numpy, numba) happen inside the commands that
measure, never at module import, so ``sactool probe`` starts fast.

Errors: library code raises :class:`sactool.errors.SactoolError`; :func:`main` prints
``error: …`` / ``hint: …`` on stderr and exits with the error's code (a traceback only with
``--debug``). Ctrl-C exits 130; a closed stdout pipe (``| head``) exits quietly.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from sactool.errors import ExitCode, UsageError, run_guarded

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Probe, benchmark, tune and serve sparse-attention KV caches from CXL memory.",
    context_settings={"help_option_names": ["-h", "--help"]},
)

_STATE = {"debug": False}

FormatOpt = typer.Option("table", "--format", "-f", help="Output format: table, json or yaml.")
SysfsRootOpt = typer.Option(
    None, "--sysfs-root", envvar="SACTOOL_SYSFS_ROOT",
    help="Read /sys and /proc from this directory (a recorded machine) instead of the live system.",
)


def _check_format(fmt: str) -> str:
    from sactool.render import FORMATS

    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return fmt


def _version_cb(value: bool) -> None:
    if value:
        from sactool import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_version_cb),
) -> None:
    _STATE["debug"] = debug


# ---------------------------------------------------------------------------------------------
# probe  (issue 2)
# ---------------------------------------------------------------------------------------------
@app.command()
def probe(
    fmt: str = FormatOpt,
    sysfs_root: Optional[Path] = SysfsRootOpt,
    snapshot: Optional[Path] = typer.Option(
        None, "--snapshot", help="Also write the files the prober read to this .tar.gz (for bug reports)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --snapshot file."),
) -> None:
    """What memory do I have: NUMA nodes, which is CXL and why, CXL devices, regions, DAX, HMAT, tiers."""
    from sactool.entry import run_probe  # also the typer-free fast path of the console script

    run_probe(fmt, sysfs_root, snapshot, force)


# ---------------------------------------------------------------------------------------------
# bench  (issue 6)
# ---------------------------------------------------------------------------------------------
bench_app = typer.Typer(
    help="Measure memory on a NUMA node: idle/loaded latency, MLP, bandwidth, KV top-k gathers. "
         "Without a subcommand: all tests on the pool node.",
    invoke_without_command=True,
)
app.add_typer(bench_app, name="bench")

_B_NODE = typer.Option(None, "--node", "-n", help="Memory node (2 or node2), a devdax device (dax0.0), or 'all' for "
                                                  "CPU-node × memory-node matrices. Default: the pool node.")
_B_CPUS = typer.Option(None, "--cpus", help="CPUs to run on: a list (0-3,8) or a node (node0). "
                                            "Default: the CPU node nearest the memory node.")
_B_SIZE = typer.Option(None, "--size", help="Buffer size (default by preset: 512MiB / 1GiB / 4GiB).")
_B_THREADS = typer.Option(None, "--threads", "-t", help="Thread counts for bandwidth and gathers (e.g. 1,2).")
_B_RECORD = typer.Option(None, "--record-bytes", "-r", help="Gather record sizes in bytes (default 64,128,256,656,1152,4096).")
_B_TOPK = typer.Option(2048, "--topk", "-k", help="Records gathered per decode step.")
_B_PREFETCH = typer.Option(None, "--prefetch", help="Software-prefetch distances in records (default: per size).")
_B_PATTERN = typer.Option("uniform", "--pattern", help="Gather indices: uniform, clustered or trace.")
_B_TRACE = typer.Option(None, "--trace", help="Index trace (.npy, or text: one step per line).")
_B_HUGE = typer.Option("thp", "--hugepages", help="thp (MADV_HUGEPAGE), none, 2MB or 1GB (hugetlb pool).")
_B_PRESET = typer.Option("default", "--preset", help="Protocol: fast, default or rigorous.")
_B_SEED = typer.Option(1, "--seed", help="Seed for chains and indices.")
_B_OUT = typer.Option(None, "--out", "-o", help="Write the bench record here (JSON, or YAML by suffix).")
_B_FORCE = typer.Option(False, "--force", help="Overwrite --out / --plot.")
_B_PLOT = typer.Option(None, "--plot", help="Draw loaded-latency and gather curves to this PNG (needs matplotlib).")


def _bench(test: str, **kw) -> None:
    from sactool.bench.cliopts import run_command

    _check_format(kw["fmt"])
    run_command(test, **kw)


def _bench_cmd(test: str, doc: str):
    def cmd(node: Optional[str] = _B_NODE, cpus: Optional[str] = _B_CPUS, size: Optional[str] = _B_SIZE,
            threads: Optional[str] = _B_THREADS, record_bytes: Optional[str] = _B_RECORD, topk: int = _B_TOPK,
            prefetch: Optional[str] = _B_PREFETCH, pattern: str = _B_PATTERN, trace: Optional[Path] = _B_TRACE,
            hugepages: str = _B_HUGE, preset: str = _B_PRESET, seed: int = _B_SEED, out: Optional[Path] = _B_OUT,
            force: bool = _B_FORCE, fmt: str = FormatOpt, plot: Optional[Path] = _B_PLOT) -> None:
        _bench(test, node=node, cpus=cpus, size=size, threads=threads, record_bytes=record_bytes, topk=topk,
               prefetch=prefetch, pattern=pattern, trace=trace, hugepages=hugepages, preset=preset, seed=seed,
               out=out, force=force, fmt=fmt, plot=plot)

    cmd.__doc__ = doc
    bench_app.command(name=test)(cmd)


for _t, _doc in (("latency", "Idle latency: pointer chase over page-local and fully random chains."),
                 ("bandwidth", "Sequential read/write/copy bandwidth, 1 … all CPUs of the CPU node."),
                 ("mlp", "Memory-level parallelism: 1 … 32 independent chases (latency and bandwidth)."),
                 ("gather", "KV top-k gather of R-byte records at uniform/clustered/trace indices."),
                 ("loaded", "Loaded latency: one chaser while throttled readers sweep from full load to idle."),
                 ("all", "Every test above, in one record.")):
    _bench_cmd(_t, _doc)


@bench_app.callback()
def _bench_default(ctx: typer.Context, node: Optional[str] = _B_NODE, preset: str = _B_PRESET,
                   out: Optional[Path] = _B_OUT, force: bool = _B_FORCE, fmt: str = FormatOpt) -> None:
    if ctx.invoked_subcommand is None:
        _bench("all", node=node, cpus=None, size=None, threads=None, record_bytes=None, topk=2048, prefetch=None,
               pattern="uniform", trace=None, hugepages="thp", preset=preset, seed=1, out=out, force=force,
               fmt=fmt, plot=None)


# ---------------------------------------------------------------------------------------------
# tune, profile  (issue 3)
# ---------------------------------------------------------------------------------------------
def _given(ctx: typer.Context, names: dict) -> frozenset:
    """Option names the user set on the command line (provenance "user")."""
    out = set()
    for param, label in names.items():
        src = ctx.get_parameter_source(param)
        if src is not None and getattr(src, "name", "") not in ("DEFAULT", "DEFAULT_MAP"):
            out.add(label)
    return frozenset(out)


@app.command()
def tune(
    ctx: typer.Context,
    model: str = typer.Option("deepseek-v3.2", "--model", "-m", help="Model name or path to a config.json."),
    context: str = typer.Option("16k,32k,64k,128k", "--context", help="Context lengths in tokens (comma list)."),
    concurrency: str = typer.Option("auto", "--concurrency",
                                    help="Concurrent requests in all (auto: SAC's 64, or what the pool holds)."),
    tp: int = typer.Option(8, "--tp", help="GPU ranks (tensor parallel size)."),
    attn_dp: Optional[int] = typer.Option(None, "--attn-dp", help="Attention-DP groups (default: = --tp)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU from the catalog: h20, h100, h200 (default h200)."),
    gpu_kv_budget: Optional[str] = typer.Option(None, "--gpu-kv-budget",
                                                help="GPU bytes per GPU for hot buffers + indexer keys (e.g. 30GiB)."),
    weights_bytes: Optional[str] = typer.Option(None, "--weights-bytes", help="Checkpoint size (e.g. 642GiB)."),
    kv_dtype: str = typer.Option("fp8", "--kv-dtype", help="KV cache dtype: fp8 (656 B) or bf16 (1152 B)."),
    bench: Optional[Path] = typer.Option(None, "--bench", help="Bench record from 'sactool bench --out'."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Replay a real top-k trace (.npz)."),
    strict: bool = typer.Option(False, "--strict", help="Refuse bench records from another machine or node."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Profile path (default profiles/<model>/<host>.yaml)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing profile; restart unfinished points."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted tune from its points file."),
    steps: int = typer.Option(128, "--steps", help="Decode steps simulated per context and seed."),
    replicates: int = typer.Option(3, "--replicates", help="Workload seeds = interleaved measurement rounds."),
    seed: int = typer.Option(0, "--seed", help="First workload seed."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fmt: str = FormatOpt,
) -> None:
    """Choose HiSparse and pool settings for a model from measurements; write a serving profile."""
    from sactool.tune.api import TuneOptions, tune as do_tune
    from sactool.units import parse_list, parse_size, parse_tokens

    _check_format(fmt)
    conc = None
    if concurrency.strip().lower() != "auto":
        try:
            conc = int(concurrency)
        except ValueError:
            raise UsageError(f"--concurrency {concurrency!r} is not a number", "give an integer or auto") from None
    opts = TuneOptions(
        model=model, contexts=tuple(parse_list(context, parse_tokens, what="context")), concurrency=conc, tp=tp,
        attn_dp=attn_dp, gpu=gpu,
        gpu_kv_budget_bytes=parse_size(gpu_kv_budget, what="--gpu-kv-budget") if gpu_kv_budget else None,
        weights_bytes=parse_size(weights_bytes, what="--weights-bytes") if weights_bytes else None,
        kv_dtype=kv_dtype, bench=bench, trace=trace, strict=strict, out=out, force=force, resume=resume,
        steps=steps, replicates=replicates, seed=seed, sysfs_root=sysfs_root,
        given=_given(ctx, {"context": "contexts", "concurrency": "concurrency", "tp": "tp", "attn_dp": "attn-dp",
                           "gpu": "gpu", "kv_dtype": "kv-dtype"}))
    from sactool.render.tune import progress_reporter, render_tune, render_warnings

    cb, close = progress_reporter()
    try:
        result = do_tune(opts, progress=cb)
    finally:
        close()
    render_warnings(result.warnings)
    if fmt == "table":
        render_tune(result)
    else:
        from sactool.render import emit_data

        emit_data(result, fmt)


profile_app = typer.Typer(help="Show or validate a serving profile.", no_args_is_help=True)
app.add_typer(profile_app, name="profile")


@profile_app.command("show")
def profile_show(file: Path = typer.Argument(..., help="Profile (YAML or JSON)."), fmt: str = FormatOpt) -> None:
    """Print a profile: every setting with its provenance, and the predictions."""
    from sactool.profile import load_profile

    _check_format(fmt)
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


# ---------------------------------------------------------------------------------------------
# serve  (issue 4)
# ---------------------------------------------------------------------------------------------
@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def serve(
    ctx: typer.Context,
    profile: Path = typer.Option(..., "--profile", "-p", help="Profile written by 'sactool tune'."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print argv and env delta with their sources; start nothing."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter of SGLang's environment (default: this one)."),
    entrypoint: Optional[str] = typer.Option(None, "--entrypoint", help="launch_server or serve (default: the profile's)."),
    allow_untested: bool = typer.Option(False, "--allow-untested-sglang",
                                        help="Start an SGLang outside the profile's sglang.tested range (warns)."),
    placement: Optional[str] = typer.Option(None, "--placement",
                                            help="Override pool.placement: plugin, numactl, or none (DRAM A/B baseline)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fmt: str = FormatOpt,
) -> None:
    """Start SGLang with the profile: HiSparse flags, pool placement plug-in, checks first. Extra SGLang args after --."""
    from sactool.serve import build_launch, exec_launch

    _check_format(fmt)
    if entrypoint is not None and entrypoint not in ("launch_server", "serve"):
        raise UsageError(f"unknown --entrypoint {entrypoint!r}", "use launch_server or serve")
    launch = build_launch(str(profile), list(ctx.args), python=python, entrypoint=entrypoint, dry_run=dry_run,
                          allow_untested=allow_untested, sysfs_root=str(sysfs_root) if sysfs_root else None,
                          placement=placement)
    if dry_run:
        from sactool.render.serve import render_launch

        render_launch(launch, fmt)
        return
    import shlex

    for line in launch.checks:
        sys.stderr.write(f"sactool serve: {line}\n")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.command.env_delta.items())
    sys.stderr.write(f"sactool serve: exec {env} {shlex.join(launch.command.argv)}\n")
    exec_launch(launch)


# ---------------------------------------------------------------------------------------------
# simulate  (issue 5)
# ---------------------------------------------------------------------------------------------
@app.command()
def simulate(
    platform: Optional[Path] = typer.Option(
        None, "--platform", help="Platform file (YAML); default with --profile: the shipped sac-paper.yaml "
        "for links, NICs and GPU figures."),
    profile: Optional[Path] = typer.Option(
        None, "--profile", help="A sactool profile: model, engine settings and its bench record's gather figures."),
    dram_bench: Optional[Path] = typer.Option(
        None, "--dram-bench", help="With --profile: bench record of a DRAM node for the local-DRAM placement."),
    context: Optional[str] = typer.Option(None, "--context", help="Context lengths, e.g. 32k,128k."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Concurrencies, e.g. 8,16,32,64,128."),
    output_tokens: Optional[int] = typer.Option(None, "--output-tokens", help="Output tokens per request."),
    case: Optional[str] = typer.Option(None, "--case", help="cache_hit (KV in the pool) or cache_populate."),
    arrival_rate: Optional[float] = typer.Option(
        None, "--arrival-rate", help="Poisson arrivals per second (default: closed loop at the concurrency)."),
    prefetch: Optional[bool] = typer.Option(
        None, "--prefetch/--no-prefetch", help="Overlap each layer's swap-in with compute (what-if)."),
    placements: str = typer.Option("sac,rdma,dram", "--placements", help="Subset of sac,rdma,dram."),
    hotbuffer_steps: int = typer.Option(
        128, "--hotbuffer-steps", help="Decode steps simulated for hot-buffer misses per context."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Override a platform field, e.g. --set nic.count=4 (repeatable)."),
    explain: bool = typer.Option(False, "--explain", help="Attribute each ratio to its drivers."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write throughput and TTFT vs concurrency (PNG)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --plot file."),
    fmt: str = FormatOpt,
) -> None:
    """What SAC/CXL vs an RDMA pool vs local DRAM would give: TTFT, TBT, throughput, memory, ratios."""
    from sactool.units import parse_list, parse_tokens

    _check_format(fmt)
    if platform is None and profile is None:
        raise UsageError("give --platform FILE or --profile P",
                         "e.g. sactool simulate --platform profiles/platforms/sac-paper.yaml")
    if plot is not None and plot.exists() and not force:
        from sactool.errors import ExistsError

        raise ExistsError(f"{plot} already exists", "pass --force to overwrite it")
    if plot is not None:
        from sactool.render.simulate import require_matplotlib

        require_matplotlib()
    if hotbuffer_steps < 2:
        raise UsageError(f"--hotbuffer-steps {hotbuffer_steps} must be >= 2", "e.g. 128")

    def _int(s, what):
        try:
            return int(s)
        except ValueError:
            raise UsageError(f"{what} {s!r} is not an integer", "e.g. 8,16,64") from None

    ctxs = tuple(parse_list(context, parse_tokens, what="context")) if context else None
    concs = tuple(parse_list(concurrency, _int, what="concurrency")) if concurrency else None
    places = tuple(x.strip() for x in placements.split(",") if x.strip())
    from sactool.simulate.api import SimulationOptions, simulate as run_sim
    from sactool.simulate.platform import load_platform

    notes: list = []
    if profile is not None:
        from sactool.simulate.fromprofile import platform_from_profile

        base_path = platform or Path(__file__).resolve().parent.parent / "profiles" / "platforms" / "sac-paper.yaml"
        if not base_path.exists():
            raise UsageError(f"base platform {base_path} not found", "give --platform FILE with links, NICs and GPU figures")
        plat, notes = platform_from_profile(profile, load_platform(base_path, overrides),
                                            dram_bench=str(dram_bench) if dram_bench else None)
    else:
        plat = load_platform(platform, overrides)
    res = run_sim(SimulationOptions(plat, contexts=ctxs, concurrency=concs, output_tokens=output_tokens, case=case,
                                    arrival_rate_per_s=arrival_rate, prefetch=prefetch, placements=places,
                                    hotbuffer_steps=hotbuffer_steps, notes=tuple(notes)))
    if plot is not None:
        from sactool.render.simulate import plot_simulation

        plot_simulation(res, plot, force=force)
        typer.echo(f"plot: {plot}", err=True)
    if fmt == "table":
        from sactool.render.simulate import render_simulation

        render_simulation(res, explain=explain)
    else:
        from sactool.render import emit_data

        emit_data(res, fmt)



def main(argv: Optional[List[str]] = None) -> int:
    """Console-script entry point; returns (and exits with) the process exit code."""
    try:  # typer >= 0.2x vendors click as typer._click and has its own Exit/Abort
        from typer import Abort as _Abort, Exit as _Exit
        from typer._click.exceptions import ClickException as _ClickException, UsageError as _ClickUsage
    except ImportError:  # pragma: no cover - older typer on real click
        from click.exceptions import Abort as _Abort, ClickException as _ClickException
        from click.exceptions import Exit as _Exit, UsageError as _ClickUsage

    args = list(sys.argv[1:] if argv is None else argv)
    _STATE["debug"] = "--debug" in args

    def run() -> int:
        try:
            rv = app(args=args, prog_name="sactool", standalone_mode=False)
            return rv if isinstance(rv, int) else ExitCode.OK
        except _Exit as e:
            return e.exit_code
        except _Abort:
            raise KeyboardInterrupt from None
        except _ClickException as e:
            e.show()
            return ExitCode.USAGE if isinstance(e, _ClickUsage) else ExitCode.ERROR

    code = run_guarded(run, debug=_STATE["debug"])
    if argv is None:
        sys.exit(int(code))
    return int(code)


if __name__ == "__main__":  # pragma: no cover
    main()
